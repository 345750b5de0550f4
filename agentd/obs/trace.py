"""Traces: W3C trace context and OpenTelemetry spans, behind a no-op facade.

Why a facade: most runs export nothing, so every call site here costs one
global lookup and returns a shared do-nothing object unless tracing was
switched on by `setup()`.

Why our own span objects and exporter, not the OpenTelemetry SDK: a span here
is a small extension object (`agentd_native.span`, a compiled twin with a
pure-Python fallback) whose context is one `ContextVar`; a finished (sampled)
span is encoded into the batch being built at once (the encoder
drops None values and scrubs secrets), and the event loop POSTs full batches
without waiting for the answer (`agentd.obs.otlp`). The SDK's span and batch
processor cost a large multiple of that per span, made and exported (`benchmarks/bench_obs.py`, its
`obs_span_cost` line; docs/operations.md), and a subagent needs none of it:
it relays its tuples to its parent (below). So tracing needs no extra package
at all; what is exported is standard OTLP/HTTP, decoded in the tests with the
official `opentelemetry-proto` types.

When it is on: when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and not `OTEL_SDK_DISABLED=true`
or `OTEL_TRACES_EXPORTER=none`); `agentd.obs.otlp` lists the other variables it
reads. Sampling: `OTEL_TRACES_SAMPLER`/`_ARG` (always_on, always_off,
traceidratio and their parentbased_ forms; default parentbased_always_on).

Propagation: `current_traceparent()` is what goes into an outbound MCP
request's `_meta.traceparent` (SEP-414) or a control-wire frame; `headers()`
the W3C `traceparent`/`tracestate` HTTP headers; `span(..., parent=tp)`
continues a trace that arrived from elsewhere (a child's `child/run` frame, an
inbound self-MCP request).

Subagents: a child process never holds the collector's address or headers
(they may carry a token, and its environment is scrubbed). Its parent tells it
to trace (`ChildConfig.tracing`); it records spans the same way and relays
them in batches up its control wire (`child/spans`); the parent exports them
with its own (`relay_in`).

Attributes carry names, counts and outcomes only (server, tool, model, handle,
status, tokens), never arguments, results, URLs or headers; as a second line
of defence every string attribute is scrubbed of the secrets registered with
`agentd.log.register_secret`, in the child and again in the parent.

A root run's span takes its trace id from the run id (the first 32 hex digits
of its SHA-256), the same id the MCP client derives for its per-run
`traceparent` when no span is live, so a trace can be found from a run id.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import random
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from agentd_native import span as _spans
from agentd_native.span import Span as _Span
from agentd_native.span import child
from agentd_native.traceparent import parse_traceparent

__all__ = [
    "NOSPAN",
    "aflush",
    "ashutdown",
    "child",
    "current_traceparent",
    "enabled",
    "flush",
    "headers",
    "meta",
    "parse_traceparent",
    "relay_in",
    "run_span",
    "server_span",
    "setup",
    "shutdown",
    "span",
    "start",
    "steps",
    "trace_id_for_run",
]

enabled = False  # True once setup() switched tracing on: spans are made
exporting = False  # ... and this process exports them over OTLP/HTTP

RELAY_BATCH = 64  # spans a child buffers before it sends them up
RELAY_MAX = 1024  # spans accepted from one child message (a bound, not a target)
_KINDS = ("internal", "client", "server")

_current: contextvars.ContextVar[Any] = _spans.current  # the current span
_exporter: Any = None  # the agentd.obs.otlp Exporter (export mode)
_relay: Any = None  # the _Relay of a child (relay mode)
_rand = random.Random()  # setup() reseeds it in place
_sampling: tuple[bool, int, int] = (True, 0, 0)  # parent-based, root sampler, ratio bound


# ------------------------------------------------------------------ spans

class _NoSpan:
    """The do-nothing span: what every call returns while tracing is off."""

    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        return False

    def set(self, **attrs: Any) -> None:
        pass

    def update(self, attrs: dict[str, Any]) -> None:
        pass

    def end(self) -> None:
        pass

    @property
    def traceparent(self) -> str | None:
        return None


NOSPAN = _NoSpan()


class _Remote:
    """A parent from elsewhere (a traceparent that arrived): context, no span."""

    __slots__ = ("sampled", "span_id", "trace_id", "tracestate")

    def __init__(self, trace_id: int, span_id: int, sampled: bool,
                 tracestate: str | None) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.sampled = sampled
        self.tracestate = tracestate


def server_span(name: str, traceparent: str | None, tracestate: str | None,
                attrs: dict[str, Any]) -> _Span:
    """The span of one inbound request (kind server), made only while tracing is
    on: it continues `traceparent` (the request's W3C value) or, when that is
    absent or invalid, starts a new trace; `attrs` becomes the span's own dict.

    What `span(name, parent=tp, tracestate=ts, kind="server", root=True, **attrs)`
    makes, without the keyword packing: a served request pays for its span on
    its request path.
    """
    parent = parse_traceparent(traceparent) if traceparent is not None else None
    return _spans.served(name, parent, _tracestate(tracestate) if parent is not None else None,
                         attrs)


class NoSteps:
    """`steps()` while tracing is off."""

    __slots__ = ()

    def next(self, step: int) -> None:
        pass

    def close(self, exc: BaseException | None) -> None:
        pass


NOSTEPS = NoSteps()


Steps = _spans.Steps  # a loop's consecutive `agent.step` spans (compiled twin)


def steps() -> Steps | NoSteps:
    return Steps() if enabled else NOSTEPS


# ------------------------------------------------------------------ the facade

# `child(name, kind, attrs)`: `span(name, kind=kind, **attrs)` without the keyword
# packing, for hot paths that checked `enabled` themselves (a loop step, an MCP
# call); `attrs` becomes the span's own dict.


def span(name: str, *, parent: str | None = None, tracestate: str | None = None,
         kind: str = "internal", root: bool = False, **attrs: Any) -> _Span | _NoSpan:
    """A span to use as `with trace.span("agent.step", step=3):` (current inside).

    `parent` (a W3C traceparent) continues a remote trace instead of the
    current one (an invalid one is ignored); `root=True` (and no valid
    `parent`) starts a new trace (a reactive wake, a request to a long-lived
    worker: not one trace per process lifetime). Off: the shared no-op span.
    """
    if not enabled:
        return NOSPAN
    if parent is None and not root:  # the usual case: a child of the current span
        return child(name, kind, attrs)
    return _Span(name, _parent(parent, tracestate, root), kind, attrs)


def start(name: str, *, parent: str | None = None, kind: str = "internal",
          **attrs: Any) -> _Span | _NoSpan:
    """A span that outlives the block that starts it (a subagent's spawn, ended at
    its end): not made current; call `.end()`."""
    if not enabled:
        return NOSPAN
    return _Span(name, _parent(parent, None, False), kind, attrs)


def run_span(name: str, run_id: str, *, parent: str | None = None,
             **attrs: Any) -> _Span | _NoSpan:
    """The span of a whole run: a root run's trace id is derived from its run id."""
    if not enabled:
        return NOSPAN
    p = _parent(parent, None, parent is None)
    return _Span(name, p, "internal", {"agentd.run_id": run_id, **attrs},
                 trace_id=trace_id_for_run(run_id) if p is None and run_id else 0)


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the current span, or None (tracing off, no span).

    This is the value for an outbound MCP request's `_meta.traceparent`
    (SEP-414), a control-wire frame to a child, or any other hop that carries
    trace context in a payload rather than in HTTP headers.
    """
    if not enabled:
        return None
    cur = _current.get()
    return cur.traceparent if cur is not None else None


def current_tracestate() -> str | None:
    """The W3C `tracestate` carried by the current span's trace, or None."""
    if not enabled:
        return None
    cur = _current.get()
    return cur.tracestate if cur is not None else None


def headers() -> list[tuple[str, str]]:
    """The W3C trace-context HTTP headers of the current span ([] when off).
    The list may be the span's own: extend a copy, do not change it."""
    return _spans.headers() if enabled else []


def meta(meta_json: bytes) -> bytes:
    """`meta_json` (a JSON object) with the current `traceparent`/`tracestate` set in it.

    Returns the argument itself when tracing is off or no span is live. Why a
    splice: a client's `_meta` is the same few bytes on every call, so it is
    parsed once (cached without its own trace context, `_meta_head`) and each
    call appends the live span's fields, formatted once per span, to those bytes.
    """
    return _spans.meta(meta_json, _meta_head) if enabled else meta_json


def _meta_head(meta_json: bytes) -> bytes | None:
    """`{...,` (or `{`) of a JSON object without its trace context; None if not one."""
    import orjson

    try:
        obj = orjson.loads(meta_json) if meta_json else {}
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    obj.pop("traceparent", None)
    obj.pop("tracestate", None)
    return orjson.dumps(obj)[:-1] + b"," if obj else b"{"


def parent_from(headers: Any = None, meta: Any = None) -> tuple[str | None, str | None]:
    """(traceparent, tracestate) of an inbound request: `_meta` first (SEP-414),
    then the W3C HTTP headers. Values that are not strings are ignored."""
    for source in (meta, headers):
        if source is None:
            continue
        try:
            tp = source.get("traceparent")
        except AttributeError:
            continue
        if isinstance(tp, str):
            ts = source.get("tracestate")
            return tp, ts if isinstance(ts, str) else None
    return None, None


def trace_id_for_run(run_id: str) -> int:
    """The trace id of a root run: the first 128 bits of SHA-256(run id)."""
    import hashlib  # only a root run needs it: the lean subagent template never loads it

    value = int(hashlib.sha256(run_id.encode()).hexdigest()[:32], 16)
    return value or 1


def flush(timeout_s: float = 5.0) -> None:
    """Export (or, in a child, relay) what is buffered now."""
    if _relay is not None:
        _relay.flush()
    if _exporter is not None:
        _exporter.flush(timeout_s)


async def aflush() -> None:
    """`flush()` from the event loop: waits for the export in flight too."""
    if _relay is not None:
        _relay.flush()
    if _exporter is not None:
        await _exporter.aflush()


def shutdown() -> None:
    """Flush and stop the exporter; tracing is off afterwards."""
    exporter = _off()
    if exporter is not None:
        exporter.stop()


async def ashutdown() -> None:
    """`shutdown()` from the event loop (what a run does at its end)."""
    exporter = _off()
    if exporter is not None:
        await exporter.astop()


def _off() -> Any:
    """Tracing off, the relay flushed; the exporter to stop, if any."""
    global enabled, exporting, _exporter, _relay
    relay, exporter = _relay, _exporter
    enabled = exporting = False
    _exporter = _relay = None
    _sink_to(None)
    if relay is not None:
        relay.flush()
    return exporter


# ------------------------------------------------------------------- set-up

def wanted() -> bool:
    """Does the environment ask for exported traces?"""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def setup(service: str = "agentd", *, mode: str | None = None,
          relay: Callable[[list[tuple]], None] | None = None, **resource: Any) -> bool:
    """Switch tracing on when the environment asks for it; True when on.

    `mode`: None reads the environment; "export" exports over OTLP/HTTP (the
    exporter reads its endpoint from the environment; a malformed one logs
    `obs.otel.unavailable` and tracing stays off); "record"
    makes spans and exports none (benchmarks: the cost of tracing itself);
    "relay" (a subagent) hands finished spans in batches to `relay(records)`,
    which sends them up the control wire; "off". Idempotent.
    """
    global enabled, exporting, _exporter, _relay
    if enabled:
        return True
    if mode is None:
        mode = "export" if wanted() else "off"
    if mode == "off":
        return False
    from agentd.log import log

    # A forked subagent inherits the template's generator state (the forkserver
    # forks without CPython's at-fork hooks): reseed, or siblings share span ids.
    _rand.seed(os.urandom(32))
    _configure_sampler()
    if mode == "export":
        try:
            exporter = _make_exporter(service, resource)
        except (ValueError, OSError, ssl_error()) as exc:  # a bad endpoint or CA file
            log.warning("obs.otel.unavailable", error=f"{type(exc).__name__}: {exc}"[:300])
            return False
        _exporter, exporting = exporter, True
        _sink_to(exporter.put)
    elif mode == "relay" and relay is not None:
        _relay = _Relay(relay)
        _sink_to(_relay.put)
    else:
        _sink_to(None)  # record: spans are made, and dropped at their end
    enabled = True
    log.info("obs.tracing", mode=mode, service=service)
    return True


def ssl_error() -> type[BaseException]:
    import ssl

    return ssl.SSLError


def _configure_sampler() -> None:
    """`OTEL_TRACES_SAMPLER`/`_ARG`: parent-based or not; a root span always, never,
    or when its trace id's low 64 bits are under ratio * 2**64."""
    global _sampling
    name = os.environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    arg = os.environ.get("OTEL_TRACES_SAMPLER_ARG", "1.0")
    parent_based = name.startswith("parentbased_")
    base = name.removeprefix("parentbased_")
    if base == "always_off":
        _sampling = (parent_based, 1, 0)
    elif base == "traceidratio":
        try:
            ratio = min(max(float(arg), 0.0), 1.0)
        except ValueError:
            ratio = 1.0
        _sampling = (parent_based, 2, int(ratio * (1 << 64)))
    else:
        _sampling = (parent_based, 0, 0)


def _sink_to(sink: Callable[[_Span], None] | None) -> None:
    """Where a finished sampled span goes (None: nowhere), with the sampler."""
    _spans.configure(sink, *_sampling, _rand.getrandbits, (asyncio.CancelledError, GeneratorExit))


# ------------------------------------------------------------------ relaying

class _Relay:
    """A subagent's buffer: finished spans, batched, go to its parent."""

    def __init__(self, send: Callable[[list[tuple]], None]) -> None:
        self._send = send
        self._buf: list[_Span] = []

    def put(self, span: _Span) -> None:
        self._buf.append(span)
        if len(self._buf) >= RELAY_BATCH:
            self.flush()

    def flush(self) -> None:
        buf, self._buf = self._buf, []
        if not buf:
            return
        wire = [(n, f"{t:032x}", f"{s:016x}", f"{p:016x}" if p else None, k, a, b,
                 _clean(at), e)
                for n, t, s, p, k, a, b, at, e in (span.record() for span in buf)]  # scrubbed
        try:
            self._send(wire)
        except Exception:  # the wire is gone: the spans are lost, the run is not
            pass


def relay_in(records: list[Any], **attrs: Any) -> int:
    """Export spans a subagent relayed (`agentd.child.control.SpanRecord`s, or the
    same 9-tuples); returns how many were taken. Dropped unless this process
    exports. `attrs` (the child's handle) are added to each; every attribute is
    scrubbed again here, and a malformed record is skipped."""
    exporter = _exporter
    if exporter is None:
        return 0
    extra = _clean(attrs)
    taken = 0
    for rec in records[:RELAY_MAX]:
        try:
            if isinstance(rec, msgspec.Struct):  # a SpanRecord: its fields, in order
                rec = msgspec.structs.astuple(rec)
            name, tid, sid, pid, kind, start_ns, end_ns, rattrs, error = rec
            trace_id, span_id = int(tid, 16), int(sid, 16)
            parent_id = int(pid, 16) if pid else 0
            if not trace_id or not span_id or trace_id >> 128 or span_id >> 64 \
                    or parent_id >> 64:
                continue
            clean = _clean(rattrs) if isinstance(rattrs, dict) else {}
            clean.update(extra)
            exporter.put((str(name)[:256], trace_id, span_id, parent_id,
                          kind if kind in _KINDS else "internal", int(start_ns),
                          int(end_ns), clean, str(error)[:256] if error else None))
        except (TypeError, ValueError):
            continue
        taken += 1
    return taken


# ------------------------------------------------------------------ exporting

def _make_exporter(service: str, resource: dict[str, Any]) -> Any:
    import agentd
    from agentd.obs.otlp import Exporter, resource_attributes

    return Exporter(resource_attributes(service, agentd.__version__, resource),
                    ("agentd", agentd.__version__), secrets=_secrets)


# ------------------------------------------------------------------ internals

def _tracestate(value: str | None) -> str | None:
    """A tracestate that arrived, if it is one to carry on (bounded, printable)."""
    return value if value and len(value) <= 512 and value.isprintable() else None


def _parent(tp: str | None, tracestate: str | None, root: bool) -> Any:
    if tp is not None:
        parsed = parse_traceparent(tp)
        if parsed is not None:
            return _Remote(parsed[0], parsed[1], parsed[2], _tracestate(tracestate))
    return None if root else _current.get()


_secret_set: set[str] | None = None


def _secrets() -> set[str]:
    """The live set of registered secrets (agentd.log's, shared: mutated in place)."""
    global _secret_set
    if _secret_set is None:
        from agentd import log as logmod

        _secret_set = logmod.secret_set()
    return _secret_set


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    secrets = _secrets()
    for k, v in attrs.items():
        if v is None:
            continue
        if isinstance(v, str):
            for s in secrets:
                if s in v:
                    v = v.replace(s, "***")
        elif not isinstance(v, bool | int | float):
            if isinstance(v, list | tuple):
                v = [str(x) for x in v]
            else:
                v = str(v)
        out[str(k)] = v
    return out
