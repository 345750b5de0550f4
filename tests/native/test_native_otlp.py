"""OTLP span encoder (agentd_native.otlp): both twins, decoded as a collector would.

"python" is otlp.py loaded explicitly from its file; "native" is the compiled
extension (skipped when not built, a failure under CI=true). Every request is
decoded with the official `opentelemetry-proto` types and compared with what
the record says; Hypothesis also checks that the two twins give the same bytes.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from native_twins import twin
from peers import require_modules

from agentd_native.errors import SpanRecordInvalid

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RESOURCE = {"service.name": "svc", "service.version": "1.2"}
SCOPE = ("agentd", "0.9")
KINDS = {"internal": 1, "server": 2, "client": 3}
U64 = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


@pytest.fixture(params=["python", "native"])
def om(request):
    return twin("otlp", request.param)


def _request_type():
    require_modules("opentelemetry.proto")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    return ExportTraceServiceRequest


def _decode(data: bytes) -> list[dict]:
    """The spans of one request, as plain values; checks the resource and scope."""
    msg = _request_type().FromString(data)
    if not msg.resource_spans:
        return []
    (rs,) = msg.resource_spans
    assert {a.key: a.value.string_value for a in rs.resource.attributes} == RESOURCE
    (ss,) = rs.scope_spans
    assert (ss.scope.name, ss.scope.version) == SCOPE
    return [{
        "name": s.name, "trace_id": s.trace_id, "span_id": s.span_id,
        "parent_span_id": s.parent_span_id, "kind": s.kind,
        "start": s.start_time_unix_nano, "end": s.end_time_unix_nano, "flags": s.flags,
        "attrs": [(a.key, _value(a.value)) for a in s.attributes],
        "status": (s.status.code, s.status.message),
    } for s in ss.spans]


def _value(v) -> tuple:
    which = v.WhichOneof("value")
    if which == "array_value":
        return which, [_value(x) for x in v.array_value.values]
    return which, getattr(v, which)


def _scrub(text: str, secrets) -> str:
    for s in secrets:
        text = text.replace(s, "***")
    return text


def _expected_value(v, secrets) -> tuple:
    """What the encoder promises for an attribute value (see SpanEncoder._value)."""
    if isinstance(v, str):
        return "string_value", _scrub(v, secrets)
    if isinstance(v, bool):
        return "bool_value", v
    if isinstance(v, int):
        return ("int_value", v) if I64_MIN <= v <= I64_MAX else ("string_value", str(v))
    if isinstance(v, float):
        return "double_value", v
    if isinstance(v, list | tuple):
        return "array_value", [("string_value", _scrub(str(x), secrets)) for x in v]
    return "string_value", _scrub(str(v), secrets)


def _expected(rec: tuple, secrets=()) -> dict:
    name, trace_id, span_id, parent_id, kind, start_ns, end_ns, attrs, error = rec
    return {
        "name": name, "trace_id": trace_id.to_bytes(16, "big"),
        "span_id": span_id.to_bytes(8, "big"),
        "parent_span_id": parent_id.to_bytes(8, "big") if parent_id else b"",
        "kind": KINDS.get(kind, 1), "start": start_ns, "end": end_ns, "flags": 1,
        "attrs": [(k, _expected_value(v, secrets)) for k, v in attrs.items() if v is not None],
        "status": (2, _scrub(str(error), secrets)) if error else (0, ""),
    }


# --- strategies --------------------------------------------------------------------

TEXT = st.text(max_size=40) | st.sampled_from(["agent.step", "tools/call echo", "é✓ 名"])
KEYS = st.sampled_from(["agentd.step", "gen_ai.request.model", "mcp.method.name", "k"]) | TEXT
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(I64_MIN, I64_MAX),
    st.integers(-(1 << 63), 300),
    st.sampled_from([I64_MIN, I64_MAX, I64_MAX + 1, I64_MIN - 1, U64, 1 << 100, 127, 128, -1]),
    st.floats(allow_nan=False),
    TEXT,
    st.sampled_from(["playback", "ok", "secret-1 inside", "x" * 200]),
    st.lists(st.one_of(st.integers(), TEXT, st.booleans(), st.none(), st.floats(allow_nan=False)),
             max_size=4),
    st.tuples(TEXT, st.integers()),
    st.dictionaries(TEXT, st.integers(), max_size=2),
)


@st.composite
def records(draw) -> tuple:
    return (
        draw(TEXT),
        draw(st.integers(1, (1 << 128) - 1) | st.sampled_from([1, 123456789 << 64 | 5])),
        draw(st.integers(1, U64)),
        draw(st.sampled_from([0, 0, 1, U64]) | st.integers(0, U64)),
        draw(st.sampled_from(["internal", "client", "server", "producer"])),
        draw(st.integers(0, U64)),
        draw(st.integers(0, U64)),
        draw(st.dictionaries(KEYS, VALUES, max_size=6)),
        draw(st.none() | TEXT | st.just("failed: secret-1")),
    )


BATCHES = st.lists(records(), max_size=12)
SECRETS = st.sampled_from([(), ("secret-1",), ("secret-1", "ok")])


# --- both twins, against the decoded message -----------------------------------------

@SETTINGS
@given(batches=st.lists(BATCHES, min_size=1, max_size=3), secrets=SECRETS)
def test_twins_give_identical_bytes(batches, secrets) -> None:
    """The same encoder state (caches, the buffer kept between requests) over a
    few requests: the compiled twin's bytes are the interpreted twin's."""
    py, native = twin("otlp", "python"), twin("otlp", "native")
    a = py.SpanEncoder(RESOURCE, SCOPE, lambda: secrets)
    b = native.SpanEncoder(RESOURCE, SCOPE, lambda: secrets)
    for batch in batches:
        assert b.request(batch) == a.request(batch)
    assert native.encode_request(batches[0], RESOURCE, SCOPE) == py.encode_request(
        batches[0], RESOURCE, SCOPE)


@pytest.mark.parametrize("which", ["python", "native"])
@SETTINGS
@given(batch=BATCHES, secrets=SECRETS)
def test_every_field_decodes_as_the_record_says(which, batch, secrets) -> None:
    enc = twin("otlp", which).SpanEncoder(RESOURCE, SCOPE, lambda: secrets)
    got = _decode(enc.request(batch))
    want = [_expected(r, secrets) for r in batch]
    for g, w in zip(got, want, strict=True):  # floats: -0.0 == 0.0, and no NaN drawn
        assert g == w
        assert [math.copysign(1, v) for _, (_, v) in g["attrs"] if isinstance(v, float)] == [
            math.copysign(1, v) for _, (_, v) in w["attrs"] if isinstance(v, float)]
    assert _decode(enc.request(batch)) == got  # again, from the caches


def test_records_may_come_from_any_iterable(om) -> None:
    from collections import deque

    recs = [("a", 1, 2, 0, "internal", 1, 2, {"n": 1}, None),
            ("b", 1, 3, 2, "client", 1, 2, {"s": "x"}, "err")]
    enc = om.SpanEncoder(RESOURCE, SCOPE)
    want = enc.request(recs)
    assert enc.request(deque(recs)) == enc.request(iter(recs)) == enc.request(tuple(recs)) == want


@pytest.mark.parametrize("span_twin", ["python", "native"])
def test_a_finished_span_encodes_as_its_record(om, span_twin) -> None:
    """The tracing sink hands the encoder the finished span itself (the compiled
    encoder reads a compiled span's fields in place): the same bytes as its
    record's tuple, from either span twin, with and without a parent."""
    import random

    sp = twin("span", span_twin)
    done: list = []
    sp.configure(done.append, True, 0, 0, random.Random(7).getrandbits, (GeneratorExit,))
    try:
        with sp.Span("run", None, "internal", {"agentd.run_id": "r"}, trace_id=(U64 << 64) | 3):
            with sp.child("tools/call echo", "client", {"n": 1, "ok": True}) as call:
                call.update({"t": "x"})
            with pytest.raises(KeyError), sp.child("fails", "internal", {}):
                raise KeyError("k")
    finally:
        sp.configure(None, True, 0, 0, random.Random().getrandbits, (GeneratorExit,))
    assert [type(s) for s in done] == [sp.Span] * 3
    enc = om.SpanEncoder(RESOURCE, SCOPE)
    data = enc.request(done)
    assert data == enc.request([s.record() for s in done])
    spans = _decode(data)
    assert [s["trace_id"] for s in spans] == [((U64 << 64) | 3).to_bytes(16, "big")] * 3
    assert spans[0]["parent_span_id"] == done[2].span_id.to_bytes(8, "big")
    assert spans[2]["parent_span_id"] == b"" and spans[1]["status"][1] == "KeyError"


def test_an_empty_batch_is_a_request_with_no_spans(om) -> None:
    data = om.SpanEncoder(RESOURCE, SCOPE).request([])
    (rs,) = _request_type().FromString(data).resource_spans
    assert [len(ss.spans) for ss in rs.scope_spans] == [0]


def test_secrets_are_scrubbed_even_after_a_value_was_cached(om) -> None:
    """String values are encoded once and cached; a secret registered later
    still never reaches the wire (the caches are emptied when the set changes),
    in values, list items, keys' values of any type and status messages."""
    secrets: set[str] = set()
    enc = om.SpanEncoder(RESOURCE, SCOPE, lambda: secrets)
    rec = ("s", 1, 2, 0, "client", 1, 2,
           {"note": "key late-secret-77", "flag": True, "list": ["a late-secret-77", 3],
            "obj": {"k": "late-secret-77"}, "n": None}, "failed with late-secret-77")
    first = enc.request([rec, rec])
    assert first.count(b"late-secret-77") == 8
    secrets.add("late-secret-77")
    second = enc.request([rec, rec])
    assert b"late-secret-77" not in second
    (span, _) = _decode(second)
    assert span == _expected(rec, ("late-secret-77",))
    assert dict(span["attrs"])["note"] == ("string_value", "key ***")
    secrets.clear()  # the set changed again: the unscrubbed values come back
    assert enc.request([rec, rec]) == first


def test_a_str_subclass_value_is_a_string(om) -> None:
    import enum

    class Outcome(enum.StrEnum):
        OK = "ok-secret"

    rec = ("s", 1, 2, 0, "client", 1, 2, {"o": Outcome.OK, "p": Outcome.OK}, None)
    (span,) = _decode(om.SpanEncoder(RESOURCE, SCOPE, lambda: ("secret",)).request([rec]))
    assert span["attrs"] == [("o", ("string_value", "ok-***")), ("p", ("string_value", "ok-***"))]


@pytest.mark.parametrize("size", [100, 127, 128, 2000, 2047, 2048, 16383, 16384, 3 << 20])
def test_large_values_and_spans(om, size) -> None:
    """Lengths that take one, two, three and four varint bytes: an attribute
    past 127 bytes, a span past 2047 (the interpreted twin's cached heads) and
    16383 (the compiled twin's room for a length), a batch past the buffer
    the compiled twin keeps."""
    py = twin("otlp", "python")
    enc = om.SpanEncoder(RESOURCE, SCOPE)
    recs = [
        ("big", 7, 8, 9, "server", 10, 11, {"v": "é" * (size // 2) + "x" * (size % 2)}, None),
        ("big key", 7, 9, 0, "client", 10, 11, {"k" * size: size, "l": ["y" * size]}, "e" * size),
        ("small", 7, 10, 8, "internal", 12, 13, {"n": -1}, None),
    ]
    data = enc.request(recs)
    assert data == py.encode_request(recs, RESOURCE, SCOPE)
    assert _decode(data) == [_expected(r) for r in recs]
    assert enc.request(recs[2:]) == py.encode_request(recs[2:], RESOURCE, SCOPE)


def test_many_distinct_values_past_the_cache_bound(om) -> None:
    """Caches are bounded (names, keys, values); past the bound every span is
    still encoded, just not cached."""
    py = twin("otlp", "python")
    recs = [(f"name-{i}", 1, i + 1, 0, "internal", i, i + 1,
             {f"key-{i % 5000}": f"value-{i}", "b": i % 2 == 0}, None) for i in range(10000)]
    enc = om.SpanEncoder(RESOURCE, SCOPE)
    data = enc.request(recs)
    assert data == py.encode_request(recs, RESOURCE, SCOPE)
    assert enc.request(recs[-3:]) == py.encode_request(recs[-3:], RESOURCE, SCOPE)
    keys, values, heads = enc.cached  # both twins: every cache at its bound, not past it
    assert keys == values == heads == 4096, enc.cached


@pytest.mark.parametrize("bad", [
    ("s", 1, -2, 0, "internal", 1, 2, {}, None),  # a negative span id
    ("s", 1, 2, 1 << 64, "internal", 1, 2, {}, None),  # a parent id past 64 bits
    ("s", -1, 2, 0, "internal", 1, 2, {}, None),  # a negative trace id
    ("s", 1, 2, 0, "internal", -1, 2, {}, None),  # a negative time
    ("s", 1, 2, 0, "internal", 1.5, 2, {}, None),  # a float time (never truncated)
    ("s", 1 << 128, 2, 0, "internal", 1, 2, {}, None),  # a trace id past 128 bits
    ("s", 1, 2, 0, "internal", 1, 1 << 64, {}, None),  # a time past fixed64
    ("s", 1, 2, 0, "internal", 1, 2, {"a": 1}),  # eight fields
])
def test_a_bad_record_raises_and_the_encoder_goes_on(om, bad) -> None:
    good = ("ok", 1, 2, 0, "internal", 1, 2, {"a": "b", "n": 3}, None)
    enc = om.SpanEncoder(RESOURCE, SCOPE)
    # the same class from both twins: SpanRecordInvalid for an id or time, else ValueError
    with pytest.raises(SpanRecordInvalid if len(bad) == 9 else ValueError):
        enc.request([good, bad])
    assert enc.request([good]) == twin("otlp", "python").encode_request([good], RESOURCE, SCOPE)


@SETTINGS
@given(batches=st.lists(BATCHES, min_size=1, max_size=3), secrets=SECRETS)
def test_spans_added_one_at_a_time_are_the_request_of_them_all(batches, secrets) -> None:
    """What the exporter does (`add` as each span ends, `take` per batch) gives the
    bytes `request` gives, in both twins, batch after batch on one encoder."""
    py = twin("otlp", "python")
    for which in ("python", "native"):
        enc = twin("otlp", which).SpanEncoder(RESOURCE, SCOPE, lambda: secrets)
        for batch in batches:
            for r in batch:
                enc.add(r)
            assert enc.pending == len(batch)
            assert enc.take() == py.SpanEncoder(RESOURCE, SCOPE, lambda: secrets).request(batch)
            assert enc.pending == 0


@pytest.mark.parametrize("bad", [
    ("s", 1, -2, 0, "internal", 1, 2, {}, None),
    ("s", 1, 2, 0, "internal", 1, 2, {"a": 1}),
])
def test_a_bad_span_added_leaves_the_request_as_it_was(om, bad) -> None:
    good = ("ok", 1, 2, 0, "internal", 1, 2, {"a": "b", "n": 3}, None)
    enc = om.SpanEncoder(RESOURCE, SCOPE)
    enc.add(good)
    with pytest.raises(SpanRecordInvalid if len(bad) == 9 else ValueError):
        enc.add(bad)
    enc.add(good)
    assert enc.pending == 2
    assert enc.take() == twin("otlp", "python").encode_request([good, good], RESOURCE, SCOPE)
    with pytest.raises(RuntimeError):  # request() is for a batch of its own
        enc.add(good)
        enc.request([good])


# --- SpanQueue: the exporter's sink ---------------------------------------------------

def _rec(i: int) -> tuple:
    return (f"s{i}", 7, i + 1, 0, "internal", 1, 2, {"i": i, "m": "x"}, None)


class _Calls:
    """The exporter's side of a SpanQueue, recorded: `wake` arms the queue, as
    `Exporter._wake` does when it schedules something."""

    def __init__(self, loop: object = "the loop") -> None:
        self.wakes: list[tuple[bool, object]] = []
        self.drops: list[Exception | None] = []
        self.loop = loop
        self.queue = None

    def make(self, om, batch: int, max_queue: int):
        self.queue = om.SpanQueue(om.SpanEncoder(RESOURCE, SCOPE), batch, max_queue,
                                  self.wake, self.drops.append, lambda: self.loop)
        return self.queue

    def wake(self, full: bool, loop: object) -> None:
        self.wakes.append((full, loop))
        self.queue.armed = True


def test_the_queue_cuts_batches_at_the_batch_size_and_pops_them(om) -> None:
    calls = _Calls()
    q = calls.make(om, 3, 100)
    for i in range(7):
        assert q.put(_rec(i)) is None
    assert q.waiting == 7 and q.encoder.pending == 1
    expected = [[_rec(i) for i in range(j, min(j + 3, 7))] for j in (0, 3, 6)]
    py = twin("otlp", "python")
    assert list(q.ready) == [(py.encode_request(b, RESOURCE, SCOPE), 3) for b in expected[:2]]
    assert q.pop(False) == (py.encode_request(expected[0], RESOURCE, SCOPE), 3)
    assert q.waiting == 4
    assert q.pop(True) == (py.encode_request(expected[1], RESOURCE, SCOPE), 3)
    assert q.pop(False) is None and q.waiting == 1  # the batch being built: only when partial
    assert q.pop(True) == (py.encode_request(expected[2], RESOURCE, SCOPE), 1)
    assert q.waiting == 0 and q.pop(True) is None and not q.ready
    assert calls.drops == []


def test_the_queue_bound_drops_and_calls_back(om) -> None:
    calls = _Calls()
    q = calls.make(om, 2, 3)  # a full batch waits too: the bound counts both
    for i in range(5):
        q.put(_rec(i))
    assert calls.drops == [None, None]
    assert q.waiting == 3 and len(q.ready) == 1 and q.encoder.pending == 1
    q.pop(True)
    q.put(_rec(9))  # room again
    assert calls.drops == [None, None] and q.waiting == 2


@pytest.mark.parametrize("bad", [
    None,  # not a record
    ("s", 1, -2, 0, "internal", 1, 2, {}, None),  # a negative span id
    ("s", 1, 2, 0, "internal", 1, 2, {"a": 1}),  # eight fields
])
def test_an_unencodable_record_is_dropped_and_reported_not_raised(om, bad) -> None:
    calls = _Calls()
    q = calls.make(om, 10, 100)
    q.put(_rec(0))
    q.put(bad)
    q.put(_rec(1))
    assert len(calls.drops) == 1 and isinstance(calls.drops[0], Exception)
    assert q.waiting == 2
    py = twin("otlp", "python")
    assert q.pop(True) == (py.encode_request([_rec(0), _rec(1)], RESOURCE, SCOPE), 2)


def test_the_queue_wakes_the_exporter_only_when_something_is_to_be_scheduled(om) -> None:
    calls = _Calls()
    q = calls.make(om, 3, 100)
    q.put(_rec(0))
    assert calls.wakes == [(False, "the loop")] and q.armed  # the first span: a timer
    q.put(_rec(1))
    assert len(calls.wakes) == 1  # armed: nothing to do
    q.put(_rec(2))
    assert calls.wakes[1:] == [(True, "the loop")]  # a full batch, armed or not
    q.put(_rec(3))
    assert len(calls.wakes) == 2
    q.armed = False  # the exporter's callback ran (a POST, a timer fired)
    q.put(_rec(4))
    assert calls.wakes[2:] == [(False, "the loop")]


def test_without_a_running_loop_the_queue_wakes_nobody(om) -> None:
    calls = _Calls(loop=None)
    q = calls.make(om, 2, 100)
    for i in range(5):
        q.put(_rec(i))
    assert calls.wakes == [] and not q.armed and q.waiting == 5 and len(q.ready) == 2


def test_the_queue_is_shared_safely_with_a_thread_that_pops(om) -> None:
    """A flush takes batches from another thread while spans are put: every span
    is in exactly one batch (the secrets callable lets go of the GIL mid-encode)."""
    import threading
    import time

    def secrets():
        time.sleep(0)
        return ()

    q = om.SpanQueue(om.SpanEncoder(RESOURCE, SCOPE, secrets), 5, 1 << 20,
                     lambda full, loop: None, lambda exc: None, lambda: None)
    taken: list[int] = []
    done = threading.Event()

    def popper() -> None:
        while not done.is_set() or q.waiting:
            got = q.pop(True)
            if got is not None:
                taken.append(got[1])

    thread = threading.Thread(target=popper)
    thread.start()
    for i in range(3000):
        q.put(_rec(i))
    done.set()
    thread.join(10)
    assert sum(taken) == 3000 and q.waiting == 0 and q.encoder.pending == 0


def test_the_exporter_uses_this_encoder() -> None:
    import agentd.obs.otlp as exporter
    import agentd_native.otlp

    assert exporter.SpanEncoder is agentd_native.otlp.SpanEncoder
    assert exporter.SpanQueue is agentd_native.otlp.SpanQueue
    assert exporter.encode_request is agentd_native.otlp.encode_request
    assert {"SpanEncoder", "encode_request"} <= set(exporter.__all__)
