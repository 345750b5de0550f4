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

And the facade's per-call helpers, for the same reason: `child()` (a span
under the current one, without the facade's keyword packing), `Steps` (a
loop's consecutive step spans), `headers()` and `meta()` (the current span's
trace context as W3C headers and spliced into an MCP request's `_meta`).
The facade calls them only while tracing is on.
"""

from __future__ import annotations

import contextvars
import time
import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Callable
    from typing import Any, Literal

__all__ = ["COMPILED", "Span", "Steps", "child", "configure", "current", "headers", "meta"]


def _probe() -> None:
    return None


#: True when this module is the compiled extension, False for the .py twin.
COMPILED: bool = type(_probe) is not types.FunctionType

#: The current span (or a remote parent: anything with trace_id, span_id,
#: sampled and tracestate), set by `Span.__enter__`.
current: contextvars.ContextVar = contextvars.ContextVar("agentd_span", default=None)
# its methods, bound once (the compiled twin would make a bound method per call)
_get, _set, _reset = current.get, current.set, current.reset

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

    __slots__ = ("_headers", "_tail", "_token", "_tp", "attrs", "end_ns", "error", "kind",
                 "name", "parent_id", "sampled", "span_id", "start_ns", "trace_id",
                 "tracestate")

    def __init__(self, name: str, parent: Any, kind: str, attrs: dict[str, Any],
                 trace_id: int = 0) -> None:
        self._init(name, parent, kind, attrs, trace_id)

    def _init(self, name: str, parent: Any, kind: str, attrs: dict[str, Any],
              trace_id: int) -> int:
        self.name = name
        self.kind = kind
        self.attrs = attrs  # as given: cleaned where they leave the process (encoder, relay)
        self._tp: str | None = None
        self._headers: list[tuple[str, str]] | None = None
        self._tail: bytes | None = None
        self.span_id = _random_bits(64) or 1  # type: ignore[misc]
        if type(parent) is Span:  # the usual parent: read as C fields when compiled
            up = parent
            self.trace_id: int = up.trace_id
            self.parent_id: int = up.span_id
            self.sampled: bool = up.sampled if _parent_based else _root_sampled(self.trace_id)
            self.tracestate: str | None = up.tracestate
        elif parent is not None:  # a remote parent, or anything with the same fields
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
        return 0

    def __enter__(self) -> Span:
        self._token = _set(self)
        return self

    def __exit__(self, tp: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        self._exit(exc)
        return False

    def _exit(self, exc: BaseException | None) -> int:
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
                _reset(token)
            except ValueError:  # left in another context (a cancelled task): harmless
                pass
        self._finish()
        return 0

    def set(self, **attrs: Any) -> None:
        """Add attributes (None values are dropped, strings scrubbed of secrets, both
        where the span leaves the process)."""
        self.attrs.update(attrs)

    def update(self, attrs: dict[str, Any]) -> None:
        """`set()` from a dict (no keyword packing on a hot path)."""
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

    def _w3c(self) -> list[tuple[str, str]]:
        """The W3C headers of this span's context (made once: they are not changed)."""
        out = self._headers
        if out is None:
            out = [("traceparent", self.traceparent)]
            if self.tracestate:
                out.append(("tracestate", self.tracestate))
            self._headers = out
        return out

    def _meta_tail(self) -> bytes:
        """The JSON members `"traceparent":"..."` (and `,"tracestate":"..."`), and `}`."""
        tail = self._tail
        if tail is None:
            tail = b'"traceparent":"' + self.traceparent.encode() + b'"'
            if self.tracestate:
                import orjson  # a tracestate may need escaping; rare

                tail += b',"tracestate":' + orjson.dumps(self.tracestate)
            tail = self._tail = tail + b"}"
        return tail


def _span(name: str, parent: Any, kind: str, attrs: dict[str, Any]) -> Span:
    """A span made without the constructor's argument parsing."""
    span = Span.__new__(Span)
    span._init(name, parent, kind, attrs, 0)
    return span


def child(name: str, kind: str, attrs: dict[str, Any]) -> Span:
    """A span under the current one (or a root); `attrs` becomes its own dict."""
    return _span(name, _get(), kind, attrs)


class Steps:
    """Consecutive `agent.step` spans of one loop: `next(n)` ends the current step's
    span and makes step n's current; `close(exc)` ends the last (idempotent).

    Why not `with`: the step is the body of the loop's `while`, which returns from
    several places; this keeps the span without re-shaping that code.
    """

    __slots__ = ("_cur",)

    def __init__(self) -> None:
        self._cur: Span | None = None

    def next(self, step: int) -> None:
        self.close(None)
        cur = self._cur = _span("agent.step", _get(), "internal", {"agentd.step": step})
        cur._token = _set(cur)

    def close(self, exc: BaseException | None) -> None:
        cur = self._cur
        if cur is not None:
            self._cur = None
            cur._exit(exc)


def headers() -> list[tuple[str, str]]:
    """The W3C trace-context HTTP headers of the current span ([] without one).
    The list is the span's own: extend a copy, do not change it."""
    cur = _get()
    if cur is None:
        return []
    return cur._w3c()


_meta_heads: dict = {}  # a `_meta` object -> its bytes up to the splice


def meta(meta_json: bytes, head_of: Callable[[bytes], bytes | None]) -> bytes:
    """`meta_json` (a JSON object) with the current span's `traceparent` and
    `tracestate` set in it; the argument itself without a span or when it is
    not a JSON object. `head_of(meta_json)` gives the object's bytes without its
    trace context and its closing brace (`{...,` or `{`), or None; it is asked
    once per distinct `meta_json` (a client's `_meta` is the same on every call).
    """
    cur = _get()
    if cur is None:
        return meta_json
    head = _meta_heads.get(meta_json)
    if head is None:
        head = head_of(meta_json)
        if head is None:
            return meta_json
        if len(_meta_heads) >= 64:
            _meta_heads.clear()
        _meta_heads[meta_json] = head
    return head + cur._meta_tail()
