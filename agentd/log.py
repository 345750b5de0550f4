"""Structured logs: one line per event on stderr, JSON for machines, text for people.

Every JSON line carries `ts`, `level`, `event` (dotted, e.g. `mcp.handshake`)
and `run_id`, then the event's fields. Loggers are cheap to `bind()` with
context (server name, subagent handle) so callers never format strings.

The format `auto` (the CLI's default) is text when the log's stream is a
terminal and JSON otherwise, decided again whenever the stream changes (a
batch moves its log to a file). The text form is for reading at a glance: one
short line per event, a long value summarised (a string by its size, a list
by its length, an object by its keys; the full value is in the JSON form), a
subagent's line flattened under its handle (`0.1 │ event ...`), the level
coloured on a terminal unless NO_COLOR is set -- never in a file or a pipe.

Secrets: the primary rule is that secret values are never passed to a logger.
As a second line of defence every value registered with `register_secret()` is
replaced by `***` in each emitted line, wherever it appears.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Protocol, TextIO

import orjson

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
FORMATS = ("auto", "json", "text")
# text form: a string longer than this (or of several lines) is shown by its size,
# a list or object whose JSON is longer by its length or its keys
TEXT_VALUE_MAX = 120
# ... except the fields a person reads to act (what went wrong, what to do), cut here
TEXT_PROSE_MAX = 400
_PROSE = frozenset({"error", "fix", "reason", "detail", "message", "hint", "cause"})
_COLOURS = {"debug": "\x1b[2m", "info": "\x1b[32m", "warning": "\x1b[33m",
            "error": "\x1b[1;31m"}
_RESET = "\x1b[0m"
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
        self.fmt = "auto"  # as asked: auto, json or text
        self.text = False  # as decided for `stream` (auto: text on a terminal)
        self.colour = False
        self.level = LEVELS["info"]
        self.run_id = ""
        self.secrets: set[str] = set()
        # a person's terminal beside a log file: the lines at `echo_level` and up,
        # as text (a batch's live display, agentd.batch.progress)
        self.echo: Writer | None = None
        self.echo_level = LEVELS["warning"]
        self.settle()

    def settle(self) -> None:
        """Decide the form for the current stream (after a change of either)."""
        tty = _is_terminal(self.stream)
        self.text = self.fmt == "text" or (self.fmt == "auto" and tty)
        self.colour = self.text and tty and not os.environ.get("NO_COLOR") \
            and os.environ.get("TERM") != "dumb"

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
        if not self.text:
            _put(self.stream, self.redact(orjson.dumps(record, default=str).decode()))
        else:
            _put(self.stream, self.redact(_text_line(record["ts"], level, event, fields,
                                                     colour=self.colour)))
        if self.echo is not None and LEVELS[level] >= self.echo_level:
            _put(self.echo, self.redact(_text_line(record["ts"], level, event, fields)))

    def relay_text(self, handle: str, record: dict[str, Any] | None, line: str) -> None:
        """A child's line in the text form: its own event (or its raw text)
        under its handle, at its own level."""
        if record is None:
            level, ts, body = "info", time.time(), line
        else:
            level = str(record.get("level"))
            level = level if level in LEVELS else "info"
            ts = record["ts"] if isinstance(record.get("ts"), (int, float)) else time.time()
            fields = {k: v for k, v in record.items()
                      if k not in ("ts", "level", "event", "run_id")}
            body = f"{record.get('event')} {_text_fields(fields)}".rstrip()
        if LEVELS[level] >= self.level:
            _put(self.stream, self.redact(_text_line(ts, level, f"{handle} │ {body}", {},
                                                     colour=self.colour)))


def _put(stream: Writer, line: str) -> None:
    try:
        stream.write(line + "\n")
        stream.flush()
    except (BrokenPipeError, ValueError):  # stderr closed: never die of logging
        pass


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def _text_line(ts: float, level: str, event: str, fields: dict[str, Any], *,
               colour: bool = False) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(ts))
    word = f"{level.upper():7}"
    if colour:
        word = f"{_COLOURS[level]}{word}{_RESET}"
    return f"{stamp} {word} {event} {_text_fields(fields)}".rstrip()


def _text_fields(fields: dict[str, Any]) -> str:
    return " ".join(f"{k}={_text(k, v)}" for k, v in fields.items())


def _text(key: str, value: Any) -> str:
    """One field's value in the text form (see the module docstring)."""
    if isinstance(value, str):
        if key == "traceback":  # asked for (--log-level debug): whole, on one line
            return orjson.dumps(value).decode()
        if key in _PROSE:
            value = " ".join(value.split())  # one line
            if len(value) > TEXT_PROSE_MAX:
                value = value[:TEXT_PROSE_MAX] + "…"
        elif len(value) > TEXT_VALUE_MAX or "\n" in value:
            return size_text(len(value.encode("utf-8", "replace")))
        return value if value and " " not in value else orjson.dumps(value).decode()
    text = orjson.dumps(value, default=str).decode()
    if len(text) <= TEXT_VALUE_MAX:
        return text
    if isinstance(value, (list, tuple, set, frozenset)):
        return str(len(value))
    if isinstance(value, dict):
        return f"{{{len(value)} keys}}"
    return size_text(len(text))


def size_text(n: int) -> str:
    """A byte count as people read it: 812 B, 2.1 KB, 3.4 MB."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


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

    def relay(self, line: str, *, handle: str | None = None,
              record: dict[str, Any] | None = None) -> None:
        """A child's log line (what it wrote on stderr, `line`): in JSON the event
        `subagent.stderr` carrying it whole; in text the child's own event
        (`record`, parsed by the caller; None: not a log line) under `handle`
        (default: this logger's bound handle) with one timestamp and level."""
        if _sink.text:
            _sink.relay_text(handle or str(self._ctx.get("handle", "?")), record, line)
        else:
            self.emit("info", "subagent.stderr", {"line": line})

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
    """Set process-wide log settings (called once by the CLI, or by a child).
    `fmt` is one of FORMATS; `auto` is decided for the stream (a terminal: text)."""
    if fmt is not None:
        _sink.fmt = fmt
    if run_id is not None:
        _sink.run_id = run_id
    if level is not None:
        _sink.level = LEVELS[level]
    if stream is not None:
        _sink.stream = stream
    _sink.settle()


def text_form() -> bool:
    """Whether lines are written as text now (a terminal's `auto`, or `text`)."""
    return _sink.text


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
