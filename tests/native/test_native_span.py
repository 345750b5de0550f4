"""Both twins of `agentd_native.span`: the live span, made, entered and ended.

Each twin is its own module with its own settings and context variable, so
each test configures the twin it runs on. What a span does is the facade's
contract (`agentd.obs.trace`); the facade's own tests (tests/obs/test_trace.py) run
on whichever twin is installed, these on both.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import uuid

import pytest
from native_twins import twin


class Remote:
    """A parent that arrived from elsewhere: context, no span."""

    def __init__(self, trace_id: int, span_id: int, sampled: bool, tracestate=None) -> None:
        self.trace_id, self.span_id, self.sampled, self.tracestate = (
            trace_id, span_id, sampled, tracestate)


@pytest.fixture(params=["python", "native"])
def sp(request):
    mod = twin("span", request.param)
    yield mod
    mod.configure(None, True, 0, 0, _bits(), (GeneratorExit,))


def _bits():
    counter = itertools.count(5)
    return lambda n: next(counter) if n == 64 else (7 << 64) | next(counter)


def _records(sp, *, parent_based=True, sampler=0, bound=0):
    """The records of the spans the sink is given (the finished spans themselves)."""
    out: list[tuple] = []

    def sink(span) -> None:
        assert type(span) is sp.Span and span.end_ns
        out.append(span.record())

    sp.configure(sink, parent_based, sampler, bound, _bits(),
                 (asyncio.CancelledError, GeneratorExit))
    return out


def test_a_span_in_a_span_and_their_records(sp) -> None:
    out = _records(sp)
    with sp.Span("root", None, "internal", {"a": 1}) as root:
        assert sp.current.get() is root
        with sp.Span("child", sp.current.get(), "client", {}) as child:
            child.set(b="x", c=None)
            assert child.traceparent == f"00-{root.trace_id:032x}-{child.span_id:016x}-01"
        assert sp.current.get() is root
    assert sp.current.get() is None
    (c_name, c_tid, c_sid, c_pid, c_kind, c_start, c_end, c_attrs, c_err), \
        (r_name, r_tid, r_sid, r_pid, r_kind, r_start, r_end, r_attrs, r_err) = out
    assert (c_name, c_kind, r_name, r_kind) == ("child", "client", "root", "internal")
    assert c_tid == r_tid == root.trace_id and r_tid >> 64 == 7  # 128 bits from the source
    assert c_pid == r_sid and r_pid == 0 and c_sid != r_sid
    assert c_attrs == {"b": "x", "c": None} and r_attrs == {"a": 1}  # cleaned downstream
    assert r_start <= c_start <= c_end <= r_end and c_err is None and r_err is None


def test_a_failure_and_a_cancellation(sp) -> None:
    out = _records(sp)
    with pytest.raises(KeyError), sp.Span("fails", None, "internal", {}):
        raise KeyError("x")
    with pytest.raises(asyncio.CancelledError), sp.Span("cancelled", None, "internal", {}):
        raise asyncio.CancelledError
    (f, c) = out
    assert f[7] == {"error.type": "KeyError"} and f[8] == "KeyError"
    assert c[7] == {"agentd.cancelled": True} and c[8] is None


def test_end_is_idempotent_and_a_started_span_is_not_current(sp) -> None:
    out = _records(sp)
    s = sp.Span("spawn", None, "internal", {}, trace_id=42)
    assert sp.current.get() is None and s.trace_id == 42
    s.end()
    s.end()
    assert len(out) == 1 and out[0][1] == 42 and s.end_ns >= s.start_ns > 0


def test_a_remote_parent_and_its_tracestate(sp) -> None:
    out = _records(sp)
    parent = Remote(0xABC, 0xDEF, True, "k=v")
    with sp.Span("served", parent, "server", {}) as s:
        assert (s.trace_id, s.parent_id, s.tracestate) == (0xABC, 0xDEF, "k=v")
    assert out[0][1:4] == (0xABC, s.span_id, 0xDEF)


def test_a_served_span_continues_the_traceparent_it_arrived_with(sp) -> None:
    """`served()`: under a parsed traceparent (its sampled flag followed when
    sampling is parent-based, the sampler asked when not), or a new root."""
    out = _records(sp)
    tid = (0xABC << 64) | 5
    s = sp.served("mcp.server tools/call", (tid, 0xDEF, False), "k=v", {"a": 1})
    assert sp.current.get() is None  # made, not entered
    assert (s.trace_id, s.parent_id, s.tracestate, s.kind, s.sampled, s.attrs) == (
        tid, 0xDEF, "k=v", "server", False, {"a": 1})
    with s:
        assert sp.current.get() is s and s.traceparent.endswith("-00")
    assert out == []  # the caller did not sample it
    with sp.served("root", None, None, {}) as root:
        assert root.parent_id == 0 and root.sampled and root.tracestate is None
    assert out[0][0] == "root" and out[0][1] == root.trace_id != tid
    out = _records(sp, parent_based=False)
    with sp.served("asked", (7, 8, False), None, {}) as s2:
        assert s2.sampled
    assert out[0][1:4] == (7, s2.span_id, 8)


def test_sampling(sp) -> None:
    out = _records(sp, sampler=1)  # roots never
    with sp.Span("root", None, "internal", {}) as root:
        with sp.Span("child", root, "internal", {}) as child:
            assert child.traceparent.endswith("-00")  # propagated, not sampled
    assert out == []
    out = _records(sp, parent_based=False, sampler=1)  # each span asks the sampler
    with sp.Span("child", Remote(1, 2, True), "internal", {}):
        pass
    assert out == []
    out = _records(sp, sampler=2, bound=100)  # a ratio: the trace id's low 64 bits
    for tid in (99, (5 << 64) | 99, 100, 1 << 63):
        with sp.Span("r", None, "internal", {}, trace_id=tid):
            pass
    assert [r[1] for r in out] == [99, (5 << 64) | 99]
    out = _records(sp)  # parent-based: a sampled remote parent is followed
    with sp.Span("child", Remote(1, 2, True), "internal", {}):
        pass
    assert len(out) == 1


def test_left_in_another_context(sp) -> None:
    """A span entered in one context and left in another (a cancelled task's
    cleanup): the reset fails quietly and the span still ends."""
    out = _records(sp)
    s = sp.Span("moved", None, "internal", {})
    contextvars.copy_context().run(s.__enter__)
    assert s.__exit__(None, None, None) is False
    assert len(out) == 1
    steps = sp.Steps()
    contextvars.copy_context().run(steps.next, 1)
    steps.close(None)
    assert len(out) == 2 and out[1][0] == "agent.step" and sp.current.get() is None


def test_child_and_consecutive_steps(sp) -> None:
    """`child()` is a span under the current one; `Steps` ends each step's span
    as the next begins, and `close()` the last, with the error it was given."""
    out = _records(sp)
    with sp.Span("run", None, "internal", {}) as run:
        steps = sp.Steps()
        for n in (1, 2):
            steps.next(n)
            step = sp.current.get()
            assert step.parent_id == run.span_id and step.attrs == {"agentd.step": n}
            with sp.child("intelligence.call", "client", {"m": "x"}) as call:
                call.update({"tokens": 5})
                assert call.parent_id == step.span_id and call.kind == "client"
        steps.close(KeyError("k"))
        steps.close(None)  # idempotent
        assert sp.current.get() is run
        orphan = sp.child("late", "internal", {})
        assert orphan.parent_id == run.span_id and sp.current.get() is run
    assert sp.child("root", "internal", {}).parent_id == 0  # no span: a new trace
    names = [(r[0], r[7], r[8]) for r in out]
    assert names == [("intelligence.call", {"m": "x", "tokens": 5}, None),
                     ("agent.step", {"agentd.step": 1}, None),
                     ("intelligence.call", {"m": "x", "tokens": 5}, None),
                     ("agent.step", {"agentd.step": 2, "error.type": "KeyError"}, "KeyError"),
                     ("run", {}, None)]


def test_the_current_span_as_headers_and_in_meta(sp) -> None:
    """The W3C headers and the `_meta` splice of the current span: nothing
    without one; a tracestate is escaped as JSON; a `_meta` that is not an
    object is left alone; `head_of` is asked once per distinct `_meta`."""
    import orjson

    _records(sp)
    asked: list[bytes] = []
    one = b'{"a":"%s"}' % uuid.uuid4().hex.encode()  # the twin's cache has never seen it
    empty, array = b"{ }", b"[%d]" % uuid.uuid4().int

    def head_of(meta: bytes) -> bytes | None:
        asked.append(meta)
        obj = orjson.loads(meta)
        if not isinstance(obj, dict):
            return None
        return orjson.dumps(obj)[:-1] + b"," if obj else b"{"

    a = orjson.loads(one)["a"]
    assert sp.headers() == [] and sp.meta(one, head_of) == one
    with sp.Span("call", None, "client", {}) as s:
        tp = s.traceparent
        assert sp.headers() == [("traceparent", tp)]
        for _ in range(2):
            assert orjson.loads(sp.meta(one, head_of)) == {"a": a, "traceparent": tp}
        assert orjson.loads(sp.meta(empty, head_of)) == {"traceparent": tp}
        assert sp.meta(array, head_of) == array
    assert asked == [one, empty, array]
    with sp.Span("served", Remote(1, 2, True, 'k="v"\\'), "server", {}) as s:
        assert sp.headers() == [("traceparent", s.traceparent), ("tracestate", 'k="v"\\')]
        assert orjson.loads(sp.meta(one, head_of)) == {
            "a": a, "traceparent": s.traceparent, "tracestate": 'k="v"\\'}
