"""Fuzz targets: each native twin pair fed the same bytes (issue 28).

Every target takes one `bytes` input, derives what it needs from it (bounds,
chunk cuts, the stream itself), runs the compiled twin and the pure-Python one
(the `.py` loaded explicitly, as `tests/support/native_twins.py` does) and raises
AssertionError when they disagree -- in results or in the class of the error
-- or when either raises anything but the project's own error for that input
(`agentd_native.errors`).  Without the compiled extension both sides are the
pure twin, so the targets still check the invariants.

`python fuzz/run.py --seconds 600 sse` runs one at length; `tests/native/test_fuzz_corpus.py`
replays `fuzz/corpus/<target>/` with the suite.
"""

from __future__ import annotations

import importlib
import itertools
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from native_twins import load_pure  # tests/support is not a package: put on the path above

from agentd_native.errors import FrameTooLarge, SpanRecordInvalid, SSEEventTooLarge


def _pair(name: str) -> tuple[Any, Any]:
    """(compiled, pure) twins of agentd_native.<name> (pure twice without the build)."""
    return importlib.import_module(f"agentd_native.{name}"), load_pure(name)


class _Reader:
    """Parameters drawn from the front of the input; `rest()` is what is left."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def int(self, nbytes: int) -> int:
        chunk = self.data[self.pos:self.pos + nbytes]
        self.pos += nbytes
        return int.from_bytes(chunk, "big") if chunk else 0

    def rest(self) -> bytes:
        return self.data[self.pos:]


def _cuts(r: _Reader, stream_len: int) -> list[int]:
    return sorted(r.int(2) % (stream_len + 1) for _ in range(r.int(1) % 8))


def _chunks(stream: bytes, points: list[int]) -> list[bytes]:
    bounds = [0, *points, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


# ------------------------------------------------------------------------- SSE

def _sse_trace(module: Any, chunks: list[bytes], bounds: dict[str, int]) -> list[Any]:
    parser = module.SSEParser(**bounds)
    out: list[Any] = []
    for chunk in chunks:
        try:
            got: Any = [(e.event, e.data, e.id) for e in parser.feed(chunk)]
        except SSEEventTooLarge as err:
            got = ("too large", err.size, err.limit, [(e.event, e.data, e.id) for e in err.events])
        retry = parser.retry
        assert retry is None or bounds["retry_min"] <= retry <= bounds["retry_max"], retry
        out.append((got, parser.last_event_id, retry, parser.pending))
    out.append((parser.close(), parser.last_event_id, parser.retry, parser.pending))
    return out


def sse(data: bytes) -> None:
    """SSEParser: events, ids, the clamped retry, pending and the event bound."""
    r = _Reader(data)
    lo = r.int(2)
    bounds = {"max_event": r.int(2) % 4096, "retry_min": lo, "retry_max": lo + r.int(3)}
    stream = r.rest()
    chunks = _chunks(stream, _cuts(_Reader(data[-9:]), len(stream)))
    native, pure = _pair("sse")
    want = _sse_trace(pure, chunks, bounds)
    assert _sse_trace(native, chunks, bounds) == want
    # chunking never changes the outcome: the events, the error, the final state
    whole = _sse_trace(pure, [stream], bounds)
    assert _flat(whole) == _flat(want), (whole, want)


def _flat(trace: list[Any]) -> tuple[list[Any], Any, Any]:
    """A trace's events up to its first error, that error's limit, the final retry
    (the size an error reports depends on where the chunk ended; crossing does not)."""
    events: list[Any] = []
    for got, *_state in trace:
        if isinstance(got, tuple):  # ("too large", size, limit, events before it)
            return events + got[3], got[2], trace[-1][2]  # where it is caught may vary
        events.extend(got)
    return events, None, trace[-1][2]


# ------------------------------------------------------------------------ frames

def _frame_trace(module: Any, limit: int, chunks: list[bytes]) -> list[Any]:
    decoder = module.FrameDecoder(max_frame=limit)
    out: list[Any] = []
    for chunk in chunks:
        try:
            out.append(("ok", decoder.feed(chunk), decoder.pending))
        except FrameTooLarge as err:
            out.append(("err", err.size, err.limit, err.frames))
    return out


def framing(data: bytes) -> None:
    """FrameDecoder and encode_frame: frames, pending and FrameTooLarge alike."""
    r = _Reader(data)
    limit = r.int(2)
    stream = r.rest()
    chunks = _chunks(stream, _cuts(_Reader(data[-9:]), len(stream)))
    native, pure = _pair("framing")
    assert _frame_trace(native, limit, chunks) == _frame_trace(pure, limit, chunks)
    encoded = []
    for module in (native, pure):
        try:
            encoded.append(module.encode_frame(stream[:512], limit))
        except FrameTooLarge as err:
            encoded.append(("err", err.size, err.limit))
    assert encoded[0] == encoded[1]


# ------------------------------------------------------------------- traceparent

def traceparent(data: bytes) -> None:
    """parse_traceparent on the input as UTF-8 and as Latin-1 (the one-byte fast path)."""
    native, pure = _pair("traceparent")
    for text in (data.decode("utf-8", "replace"), data.decode("latin-1")):
        got = pure.parse_traceparent(text)
        assert native.parse_traceparent(text) == got, text
        if got is not None:  # only SP and HTAB may surround a valid value
            core = text.strip(" \t")
            assert len(core) >= 55 and core[0] not in " \t" and core[:55].isascii(), text


# -------------------------------------------------------------------------- OTLP

_RANGES = (0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, (1 << 128) - 1, 1 << 128)


def _value(r: _Reader) -> Any:
    """An id, time or attribute value: ints near every range edge, and other types."""
    kind = r.int(1) % 12
    if kind < 6:
        return _RANGES[r.int(1) % len(_RANGES)] + r.int(1) - 128
    if kind == 6:
        return r.int(8)
    if kind == 7:
        return r.int(2) / 7.0
    if kind == 8:
        return bool(r.int(1) & 1)
    if kind == 9:
        return None
    if kind == 10:
        return r.data[r.pos:r.pos + 6].decode("utf-8", "replace")
    return [r.int(1), "x"]


def _encode(module: Any, records: list[tuple]) -> Any:
    try:
        return module.encode_request(records, {"service.name": "fuzz"}, ("fuzz", "1"))
    except SpanRecordInvalid as err:
        return ("invalid", err.field)


def otlp(data: bytes) -> None:
    """encode_request of records with out-of-range and mistyped fields: same bytes or
    the same SpanRecordInvalid (the field named) from both twins."""
    r = _Reader(data)
    records = []
    for _ in range(1 + r.int(1) % 3):
        trace_id, span_id, parent_id, start_ns, end_ns = (_value(r) for _ in range(5))
        attrs = {f"k{i}": _value(r) for i in range(r.int(1) % 4)}
        kind = ("internal", "server", "client", "weird")[r.int(1) % 4]
        error = None if r.int(1) % 2 else "boom"
        records.append((f"span{r.int(1)}", trace_id, span_id, parent_id, kind, start_ns,
                        end_ns, attrs, error))
    native, pure = _pair("otlp")
    assert _encode(native, records) == _encode(pure, records)


# -------------------------------------------------------------------------- span

_configured: set[int] = set()


def _served(module: Any, parent: tuple[int, int, bool], tracestate: str | None) -> Any:
    if id(module) not in _configured:
        module.configure(None, True, 0, 0, random.Random(0).getrandbits, (GeneratorExit,))
        _configured.add(id(module))
    sp = module.served("fuzz", parent, tracestate, {})
    tp = sp.traceparent
    sid = tp[36:52]
    with sp:  # current for the block: the headers and `_meta` an outbound call gets
        hdrs = [(k, v.replace(sid, "<sid>")) for k, v in module.headers()]
        try:
            meta: Any = module.meta(b'{"a":1}', lambda m: m[:-1] + b",").replace(
                sid.encode(), b"<sid>")
        except TypeError as err:  # a tracestate orjson cannot encode (a lone surrogate)
            meta = ("unencodable", type(err))
    return (sp.trace_id, sp.parent_id, sp.sampled, sp.tracestate, tp.replace(sid, "<sid>"),
            hdrs, meta)


def span(data: bytes) -> None:
    """served() under a parsed traceparent: the same context, headers and `_meta`."""
    split = data.find(b"\n")
    head, state = (data, b"") if split < 0 else (data[:split], data[split + 1:])
    parent = load_pure("traceparent").parse_traceparent(head.decode("latin-1"))
    if parent is None:
        parent = (int.from_bytes(head[:16].ljust(16, b"\1"), "big"),
                  int.from_bytes(head[16:24].ljust(8, b"\1"), "big"), bool(head[-1:] == b"1"))
    tracestate = state.decode("utf-8", "surrogateescape") if state else None
    native, pure = _pair("span")
    assert _served(native, parent, tracestate) == _served(pure, parent, tracestate)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "sse": sse,
    "framing": framing,
    "traceparent": traceparent,
    "otlp": otlp,
    "span": span,
}
