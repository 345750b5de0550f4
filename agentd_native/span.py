"""The live trace span: what traced code makes, enters and ends on its hot path.

Why here: while tracing is on, every loop step makes three spans and every
served request one, and in Python a span's making, `with` and end are most of
what tracing costs (`docs/benchmarks.md`). This file is one source for two
twins (Cython "pure Python mode", see ``framing.py``): compiled with the
types in ``span.pxd``, a `Span` is an extension type whose constructor,
`__enter__`, `__exit__` and end run in C; interpreted, it is the same class
in Python. `agentd.obs.trace` is the facade that makes them (its docstring
says what a span carries and where it goes); `tests/test_native_span.py`
runs the same behaviour on both twins.

What this module holds besides the class: the context variable of the
current span, and the settings `configure()` gives it (where a finished
sampled span's record goes, the sampler, the random source, which exceptions
mark a span cancelled rather than failed). A record is `(name, trace_id,
span_id, parent_id, kind, start_ns, end_ns, attrs, error)`.
"""

from __future__ import annotations

import contextvars
import time
import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Callable
    from typing import Any, Literal

__all__ = ["COMPILED", "Span", "configure", "current"]


def _probe() -> None:
    return None


#: True when this module is the compiled extension, False for the .py twin.
COMPILED: bool = type(_probe) is not types.FunctionType

#: The current span (or a remote parent: anything with trace_id, span_id,
#: sampled and tracestate), set by `Span.__enter__`.
current: contextvars.ContextVar = contextvars.ContextVar("agentd_span", default=None)

_U64 = 0xFFFFFFFFFFFFFFFF
_sink = None  # where a finished sampled span's record goes (None: nowhere)
_parent_based = True  # a child span follows its parent's sampled flag
_sampler = 0  # a root span: 0 sampled, 1 not, 2 when the trace id is under `_bound`
_bound = 0
_random_bits = None  # getrandbits of the facade's generator (reseeded in place)
_cancelled: tuple = (GeneratorExit,)  # exceptions that end a span cancelled, not failed
_time_ns = time.time_ns


def configure(sink: Callable[[tuple], None] | None, parent_based: bool, sampler: int,
              bound: int, random_bits: Callable[[int], int],
              cancelled: tuple[type[BaseException], ...]) -> None:
    """Set where records go and how spans are sampled (`agentd.obs.trace.setup`)."""
    global _sink, _parent_based, _sampler, _bound, _random_bits, _cancelled
    _sink = sink
    _parent_based = parent_based
    _sampler = sampler
    _bound = bound
    _random_bits = random_bits
    _cancelled = cancelled


def _root_sampled(trace_id: int) -> bool:
    if _sampler == 0:
        return True
    if _sampler == 1:
        return False
    return (trace_id & _U64) < _bound


class Span:
    """A live span; `with` makes it current for the block, its end records it."""

    __slots__ = ("_token", "_tp", "attrs", "end_ns", "error", "kind", "name", "parent_id",
                 "sampled", "span_id", "start_ns", "trace_id", "tracestate")

    def __init__(self, name: str, parent: Any, kind: str, attrs: dict[str, Any],
                 trace_id: int = 0) -> None:
        self.name = name
        self.kind = kind
        self.attrs = attrs  # as given: cleaned where they leave the process (encoder, relay)
        self._tp: str | None = None
        self.span_id = _random_bits(64) or 1  # type: ignore[misc]
        if parent is not None:
            self.trace_id = parent.trace_id
            self.parent_id = parent.span_id
            self.sampled = parent.sampled if _parent_based else _root_sampled(self.trace_id)
            self.tracestate = parent.tracestate
        else:
            self.trace_id = trace_id or (_random_bits(128) or 1)  # type: ignore[misc]
            self.parent_id = 0
            self.sampled = _root_sampled(self.trace_id)
            self.tracestate = None
        self.error: str | None = None
        self.end_ns = 0
        self._token: Any = None
        self.start_ns = _time_ns()

    def __enter__(self) -> Span:
        self._token = current.set(self)
        return self

    def __exit__(self, tp: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is not None:
            if isinstance(exc, _cancelled):
                self.attrs["agentd.cancelled"] = True
            else:
                self.attrs["error.type"] = type(exc).__name__
                self.error = type(exc).__name__
        token = self._token
        if token is not None:
            self._token = None
            try:
                current.reset(token)
            except ValueError:  # left in another context (a cancelled task): harmless
                pass
        self._finish()
        return False

    def set(self, **attrs: Any) -> None:
        """Add attributes (None values are dropped, strings scrubbed of secrets, both
        where the span leaves the process)."""
        self.attrs.update(attrs)

    def end(self) -> None:
        """End the span (a `start()`ed one; `with` ends its own). Idempotent."""
        self._finish()

    def _finish(self) -> int:
        if self.end_ns:
            return 0
        self.end_ns = _time_ns()
        sink = _sink
        if self.sampled and sink is not None:
            sink((self.name, self.trace_id, self.span_id, self.parent_id, self.kind,
                  self.start_ns, self.end_ns, self.attrs, self.error))
        return 0

    @property
    def traceparent(self) -> str:
        tp = self._tp
        if tp is None:  # formatted once: an MCP call puts it in `_meta` and a header
            tp = self._tp = (f"00-{self.trace_id:032x}-{self.span_id:016x}-"
                             f"{'01' if self.sampled else '00'}")
        return tp
