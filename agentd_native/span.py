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
sampled span goes, the sampler, the random source, which exceptions mark a
span cancelled rather than failed). What the sink is given is the finished
`Span` itself (its `record()` is the same as the 9-tuple `(name, trace_id,
span_id, parent_id, kind, start_ns, end_ns, attrs, error)` a subagent relays):
the compiled encoder reads its C fields, so no tuple and no integer object
is made per span on the way out.

Ids, clock and context, compiled: the ids are C integers (a trace id as two
64-bit halves; `trace_id`, `span_id` and `parent_id` make the Python
integers on demand), a span id comes from a SplitMix64 generator in C seeded
from the configured random source (`configure()` reseeds it, as the facade
does after a fork), the clock is `clock_gettime`, the traceparent's hex is
written in C, and the context variable is read and set through CPython's
C API. The interpreted twin does the same with `random_bits`, `time.time_ns`,
f-strings and the variable's methods. The C-only helpers live in `span.pxd`
and are called under `if _COMPILED:`, as in `otlp.py`.

And the facade's per-call helpers, for the same reason: `child()` (a span
under the current one, without the facade's keyword packing), `served()` (an
inbound request's span, under the traceparent it arrived with), `Steps` (a
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

__all__ = ["COMPILED", "Span", "Steps", "child", "configure", "current", "headers", "meta",
           "served"]


def _probe() -> None:
    return None


#: True when this module is the compiled extension, False for the .py twin.
COMPILED: bool = type(_probe) is not types.FunctionType
_COMPILED = COMPILED  # a C bint in the extension (see span.pxd)

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
_rng = 0  # the compiled twin's SplitMix64 state (a C integer there; unused here)


def configure(sink: Callable[[Span], None] | None, parent_based: bool, sampler: int,
              bound: int, random_bits: Callable[[int], int],
              cancelled: tuple[type[BaseException], ...]) -> None:
    """Set where finished spans go and how spans are sampled (`agentd.obs.trace.setup`)."""
    global _sink, _parent_based, _sampler, _bound, _random_bits, _cancelled
    _sink = sink
    _parent_based = parent_based
    _sampler = sampler
    _bound = bound
    _random_bits = random_bits
    _cancelled = cancelled
    if _COMPILED:
        _seed(random_bits(64))  # type: ignore[name-defined]  # noqa: F821


def _root_sampled(low: int) -> bool:
    """A root's sampling decision from its trace id's low 64 bits."""
    if _sampler == 0:
        return True
    if _sampler == 1:
        return False
    return low < _bound


def _span_id() -> int:
    """A new span id (not 0)."""
    if _COMPILED:
        return _next_id()  # type: ignore[name-defined]  # noqa: F821
    return _random_bits(64) or 1  # type: ignore[misc]


def _now() -> int:
    if _COMPILED:
        return _clock_ns()  # type: ignore[name-defined]  # noqa: F821
    return _time_ns()


def _current() -> Any:
    """The current span (or remote parent), None without one."""
    if _COMPILED:
        return _cv_get(current)  # type: ignore[name-defined]  # noqa: F821
    return _get()


def _enter(span: Any) -> Any:
    """Make `span` current; the token that undoes it."""
    if _COMPILED:
        return _cv_set(current, span)  # type: ignore[name-defined]  # noqa: F821
    return _set(span)


def _leave(token: Any) -> int:
    """Undo `_enter` (ValueError: the token belongs to another context)."""
    if _COMPILED:
        _cv_reset(current, token)  # type: ignore[name-defined]  # noqa: F821
    else:
        _reset(token)
    return 0


def _join(hi: int, lo: int) -> int:
    """A 128-bit trace id from its halves (Python integers)."""
    return (hi << 64) | lo


class Span:
    """A live span; `with` makes it current for the block, its end records it."""

    __slots__ = ("_headers", "_hi", "_lo", "_pid", "_sid", "_tail", "_token", "_tp", "attrs",
                 "end_ns", "error", "kind", "name", "sampled", "start_ns", "tracestate")

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
        self._sid: int = _span_id()
        if type(parent) is Span:  # the usual parent: read as C fields when compiled
            up = parent
            self._hi: int = up._hi
            self._lo: int = up._lo
            self._pid: int = up._sid
            self.sampled: bool = up.sampled if _parent_based else _root_sampled(self._lo)
            self.tracestate: str | None = up.tracestate
        else:
            if parent is not None:  # a remote parent, or anything with the same fields
                trace_id = parent.trace_id
                self._pid = parent.span_id & _U64
            else:
                trace_id = trace_id or (_random_bits(128) or 1)  # type: ignore[misc]
                self._pid = 0
            self._hi = (trace_id >> 64) & _U64
            self._lo = trace_id & _U64
            if parent is not None and _parent_based:
                self.sampled = parent.sampled
            else:
                self.sampled = _root_sampled(self._lo)
            self.tracestate = parent.tracestate if parent is not None else None
        self.error: str | None = None
        self.end_ns = 0
        self._token: Any = None
        self.start_ns = _now()
        return 0

    @property
    def trace_id(self) -> int:
        return _join(self._hi, self._lo)

    @property
    def span_id(self) -> int:
        return self._sid

    @property
    def parent_id(self) -> int:
        """The parent's span id; 0 for a root."""
        return self._pid

    def record(self) -> tuple:
        """This span as the 9-tuple a subagent relays (`agentd.obs.trace`)."""
        return (self.name, self.trace_id, self._sid, self._pid, self.kind, self.start_ns,
                self.end_ns, self.attrs, self.error)

    def __enter__(self) -> Span:
        self._token = _enter(self)
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
                _leave(token)
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
        self.end_ns = _now()
        sink = _sink
        if self.sampled and sink is not None:
            sink(self)
        return 0

    @property
    def traceparent(self) -> str:
        tp = self._tp
        if tp is None:  # formatted once: an MCP call puts it in `_meta` and a header
            if _COMPILED:
                tp = _hex_traceparent(self._hi, self._lo, self._sid, self.sampled)  # type: ignore[name-defined]  # noqa: F821
            else:
                tp = (f"00-{self._hi:016x}{self._lo:016x}-{self._sid:016x}-"
                      f"{'01' if self.sampled else '00'}")
            self._tp = tp
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
    return _span(name, _current(), kind, attrs)


def served(name: str, parent: tuple[int, int, bool] | None, tracestate: str | None,
           attrs: dict[str, Any]) -> Span:
    """The span of an inbound request (kind server), not made current: under
    `parent`, the `(trace_id, span_id, sampled)` of the traceparent the request
    arrived with (and its `tracestate`), or the root of a new trace (None)."""
    span = Span.__new__(Span)
    if parent is None:
        span._init(name, None, "server", attrs, 0)
        return span
    trace_id, parent_id, sampled = parent
    span._init(name, None, "server", attrs, trace_id)
    span._pid = parent_id
    span.tracestate = tracestate
    if _parent_based:
        span.sampled = sampled
    return span


class Steps:
    """Consecutive `agent.step` spans of one loop: `next(n)` ends the current step's
    span and makes step n's current; `close(exc)` ends the last (idempotent).

    Why not `with`: the step is the body of the loop's `while`, which returns from
    several places; this keeps the span without re-shaping that code. Each step
    is made current over the last one (one change of the context variable a
    step, not two), and `close` puts back what was current before the first.
    """

    __slots__ = ("_cur", "_token", "_up")

    def __init__(self) -> None:
        self._cur: Span | None = None
        self._up: Any = None  # the steps' parent: what was current at the first step
        self._token: Any = None  # undoes the first step's `_enter`

    def next(self, step: int) -> None:
        cur = self._cur
        if cur is None:
            self._up = _current()
        else:
            cur._exit(None)  # its `_token` is None: ended, the context left to the next
        cur = self._cur = _span("agent.step", self._up, "internal", {"agentd.step": step})
        token = _enter(cur)
        if self._token is None:
            self._token = token

    def close(self, exc: BaseException | None) -> None:
        cur = self._cur
        if cur is not None:
            token = self._token
            self._cur = self._up = self._token = None
            try:
                _leave(token)
            except ValueError:  # closed in another context (a cancelled task): harmless
                pass
            cur._exit(exc)


def headers() -> list[tuple[str, str]]:
    """The W3C trace-context HTTP headers of the current span ([] without one).
    The list is the span's own: extend a copy, do not change it."""
    cur = _current()
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
    cur = _current()
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
