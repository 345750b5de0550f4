"""Structured logs: one JSON line per event on stderr (or text for people).

Every line carries `ts`, `level`, `event` (dotted, e.g. `mcp.handshake`) and
`run_id`, then the event's fields. Loggers are cheap to `bind()` with context
(server name, subagent handle) so callers never format strings.

Secrets: the primary rule is that secret values are never passed to a logger.
As a second line of defence every value registered with `register_secret()` is
replaced by `***` in each emitted line, wherever it appears.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol, TextIO

import orjson

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
REDACTED = "***"
_MIN_SECRET = 4  # shorter values would redact ordinary text


class Writer(Protocol):
    """Where an echo of the log goes (a terminal's live display)."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


class _Sink:
    """Process-wide destination and settings shared by every bound logger."""

    def __init__(self) -> None:
        self.stream: TextIO = sys.stderr
        self.fmt = "json"
        self.level = LEVELS["info"]
        self.run_id = ""
        self.secrets: set[str] = set()
        # a person's terminal beside a log file: the lines at `echo_level` and up,
        # as text (a batch's live display, agentd.batch.progress)
        self.echo: Writer | None = None
        self.echo_level = LEVELS["warning"]

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def write(self, level: str, event: str, fields: dict[str, Any]) -> None:
        record: dict[str, Any] = {
            "ts": round(time.time(), 6),
            "level": level,
            "event": event,
            "run_id": self.run_id,
        }
        record.update(fields)
        line = self.redact(orjson.dumps(record, default=str).decode() if self.fmt == "json"
                           else _text_line(record, fields))
        _put(self.stream, line)
        if self.echo is not None and LEVELS[level] >= self.echo_level:
            _put(self.echo, line if self.fmt == "text"
                 else self.redact(_text_line(record, fields)))


def _put(stream: Writer, line: str) -> None:
    try:
        stream.write(line + "\n")
        stream.flush()
    except (BrokenPipeError, ValueError):  # stderr closed: never die of logging
        pass


def _text_line(record: dict[str, Any], fields: dict[str, Any]) -> str:
    extra = " ".join(f"{k}={_text(v)}" for k, v in fields.items())
    stamp = time.strftime("%H:%M:%S", time.localtime(record["ts"]))
    return f"{stamp} {record['level'].upper():7} {record['event']} {extra}".rstrip()


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value if value and " " not in value else orjson.dumps(value).decode()
    return orjson.dumps(value, default=str).decode()


_sink = _Sink()


class Logger:
    """A logger with bound context fields; `bind()` returns a child."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: dict[str, Any] | None = None) -> None:
        self._ctx = ctx or {}

    def bind(self, **fields: Any) -> Logger:
        return Logger({**self._ctx, **fields})

    def enabled(self, level: str) -> bool:
        return LEVELS[level] >= _sink.level

    def emit(self, level: str, event: str, fields: dict[str, Any]) -> None:
        """Log `event` at `level` (a name of LEVELS), for a caller that picks the
        level at run time (agentd.log_bridge.throttled)."""
        if LEVELS[level] >= _sink.level:
            _sink.write(level, event, {**self._ctx, **fields} if self._ctx else fields)

    def debug(self, event: str, **fields: Any) -> None:
        self.emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self.emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self.emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self.emit("error", event, fields)


log = Logger()


def configure(
    *,
    fmt: str | None = None,
    run_id: str | None = None,
    level: str | None = None,
    stream: TextIO | None = None,
) -> None:
    """Set process-wide log settings (called once by the CLI, or by a child)."""
    if fmt is not None:
        _sink.fmt = fmt
    if run_id is not None:
        _sink.run_id = run_id
    if level is not None:
        _sink.level = LEVELS[level]
    if stream is not None:
        _sink.stream = stream


def echo_to(stream: Writer | None, level: str = "warning") -> None:
    """Also write every line at `level` and up to `stream`, as text (None: stop):
    the log itself goes on to its own stream at its own level."""
    _sink.echo = stream
    _sink.echo_level = LEVELS[level]


def register_secret(value: str | None) -> None:
    """Redact `value` from every line logged from now on."""
    if value and len(value) >= _MIN_SECRET:
        _sink.secrets.add(value)


def secret_set() -> set[str]:
    """The registered secrets themselves, not a copy: the set is mutated in place, so
    a holder (the trace exporter, which scrubs span attributes) sees every secret
    registered later too."""
    return _sink.secrets


def redact(text: str) -> str:
    """`text` with every registered secret replaced (what a log line gets; a batch
    cassette too, agentd.batch.cassette)."""
    return _sink.redact(text)
