"""Library logs as agentd JSON lines, and a throttle for events a peer can trigger.

aiohttp (and asyncio) log through the stdlib ``logging`` module; left alone they
print plain-text tracebacks on stderr for every malformed request or client
that hangs up mid-body.  :func:`route_stdlib` sends those records through
:mod:`agentd.log` instead: one JSON line each (``event: "lib.log"``), the
exception as ``error`` (type and a truncated message, never a traceback), and
a peer's mistake (a bad HTTP message, a reset connection) at ``info`` rather
than ``error`` -- it is not ours to fix.

:class:`Throttle` bounds lines a remote party can provoke (401s, limit hits,
malformed requests): per key, at most ``burst`` lines per ``period`` seconds;
the next line that passes carries ``suppressed=N``.

:func:`route_python` does the same for what the interpreter itself would print
on stderr: a warning (``python.warning``: category, message, where) and an
exception nobody could catch (``python.unraisable``, in a ``__del__`` or a
callback) -- so that stderr holds log lines only, whatever goes wrong.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from typing import Any, Final

from agentd.log import LEVELS, Logger, log

__all__ = ["Throttle", "route_python", "route_stdlib", "throttled"]

_ROUTED: Final = ("aiohttp", "asyncio")
_MESSAGE_MAX: Final = 300  # characters of a library message / exception text kept

# Exceptions that only say a peer sent something wrong or went away.
_PEER_FAULTS: Final = ("BadHttpMessage", "BadStatusLine", "BadHttpMethod", "LineTooLong",
                       "InvalidHeader", "TransferEncodingError", "ContentLengthError",
                       "InvalidURLError", "HttpProcessingError", "ContentEncodingError",
                       "ConnectionResetError", "ConnectionAbortedError", "BrokenPipeError",
                       "ClientConnectionResetError", "CancelledError", "TimeoutError",
                       "PayloadEncodingError", "DecompressSizeError")


class Throttle:
    """Per-key rate limit on log lines: ``burst`` per ``period`` seconds."""

    __slots__ = ("_keys", "burst", "period")

    def __init__(self, period: float = 10.0, burst: int = 5) -> None:
        self.period = period
        self.burst = burst
        self._keys: dict[str, list[float | int]] = {}  # key -> [window start, sent, dropped]

    def allow(self, key: str) -> int | None:
        """``None`` to drop this line, else how many were dropped since the last one."""
        now = time.monotonic()
        slot = self._keys.get(key)
        if slot is None or now - slot[0] >= self.period:
            dropped = int(slot[2]) if slot is not None else 0
            if len(self._keys) >= 1024:  # keys come from a small fixed set; bound it anyway
                self._keys.clear()
            self._keys[key] = [now, 1, 0]
            return dropped
        if slot[1] < self.burst:
            slot[1] += 1
            dropped, slot[2] = int(slot[2]), 0
            return dropped
        slot[2] += 1
        return None


_throttle = Throttle()


def throttled(logger: Logger, level: str, event: str, *, key: str | None = None,
              **fields: Any) -> None:
    """Log ``event`` unless its key (``event`` + ``key``) is over its rate."""
    if not logger.enabled(level):
        return
    dropped = _throttle.allow(f"{event}/{key}" if key else event)
    if dropped is None:
        return
    if dropped:
        fields["suppressed"] = dropped
    logger.emit(level, event, fields)


def _level_of(record: logging.LogRecord) -> str:
    exc = record.exc_info[1] if record.exc_info else None
    if exc is not None and type(exc).__name__ in _PEER_FAULTS:
        return "info"
    if record.levelno >= logging.ERROR:
        return "error"
    if record.levelno >= logging.WARNING:
        return "warning"
    return "info" if record.levelno >= logging.INFO else "debug"


class _ToAgentd(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._log = log.bind(component="lib")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level = _level_of(record)
            if not self._log.enabled(level):
                return
            fields: dict[str, Any] = {"logger": record.name,
                                      "message": record.getMessage()[:_MESSAGE_MAX]}
            exc = record.exc_info[1] if record.exc_info else None
            if exc is not None:
                fields["error"] = f"{type(exc).__name__}: {str(exc)[:_MESSAGE_MAX]}"
            key = f"{record.name}/{type(exc).__name__ if exc is not None else record.levelno}"
            throttled(self._log, level, "lib.log", key=key, **fields)
        except Exception:  # logging must never raise into the library
            return


_handler: _ToAgentd | None = None


def route_stdlib(level: str | None = None) -> None:
    """Send aiohttp's and asyncio's records to the agentd log (idempotent)."""
    global _handler
    if _handler is None:
        _handler = _ToAgentd()
        for name in _ROUTED:
            lg = logging.getLogger(name)
            lg.handlers[:] = [_handler]
            lg.propagate = False
    if level is None:
        level = "debug" if log.enabled("debug") else "info"
    for name in _ROUTED:  # agentd's level numbers are the stdlib's
        logging.getLogger(name).setLevel(LEVELS[level])


def _warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
    try:
        throttled(log, "warning", "python.warning", key=category.__name__,
                  category=category.__name__, message=str(message)[:_MESSAGE_MAX],
                  where=f"{filename}:{lineno}")
    except Exception:  # at interpreter exit the log may be half torn down: say nothing
        return


def _unraisable(unraisable: Any) -> None:
    try:
        exc = unraisable.exc_value
        log.warning("python.unraisable", error=f"{type(exc).__name__}: {str(exc)[:_MESSAGE_MAX]}",
                    where=str(unraisable.object)[:_MESSAGE_MAX],
                    message=str(unraisable.err_msg or "")[:_MESSAGE_MAX])
    except Exception:
        return


def route_python() -> None:
    """Python's warnings and unraisable exceptions as log lines, never raw text on
    stderr (idempotent)."""
    warnings.showwarning = _warning
    sys.unraisablehook = _unraisable
