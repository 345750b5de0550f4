"""OTLP trace spans to protobuf bytes (`ExportTraceServiceRequest`), by hand.

Field numbers from `opentelemetry/proto/trace/v1/trace.proto` and
`collector/trace/v1/trace_service.proto`. `agentd.obs.otlp` (the exporter
thread) is the user; the tests decode the bytes with the official
`opentelemetry-proto` types, the way a collector does.

A record is a finished `agentd_native.span.Span` (the tracing sink's; the
compiled encoder reads its C fields: ids, times) or a tuple `(name,
trace_id, span_id, parent_id, kind, start_ns, end_ns, attrs, error)` (a
subagent's relayed spans) with integer ids (`parent_id` 0 for a root) and
`kind` one of internal, client, server; `attrs` as the span collected them
(None values are skipped, strings are scrubbed of the registered secrets).

This file is one source for two twins (Cython "pure Python mode"), like
`framing.py`: compiled with the C types of `otlp.pxd` into `otlp.<abi>.so`,
or run as-is when no extension was built. Why compiled: the exporter thread
holds the GIL while it encodes, so its time per span is taken from the event
loop. The twins differ only under `if _COMPILED:`: the compiled one writes
each span straight into one growing buffer (ids, times and integers as C
writes, cached pieces copied in), the interpreted one joins byte strings.
Both give the same bytes (`tests/test_native_otlp.py`).

`SpanQueue` is the exporter's sink itself (`Exporter.put` is its bound
`put`): every finished sampled span goes through it, so the bound, the lock,
the encoding, the batch cut and the "is a callback due?" test run in C in the
compiled twin, and the exporter's Python is called back only on the rare
events (a span dropped, a batch full, no POST or timer due yet).
"""

from __future__ import annotations

import struct
import types
from _thread import allocate_lock as _allocate_lock
from collections import deque

from agentd_native.errors import SpanRecordInvalid
from agentd_native.span import Span

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing this module stays cheap
    from collections.abc import Callable, Collection, Iterable, Mapping
    from typing import Any

__all__ = ["COMPILED", "SpanEncoder", "SpanQueue", "encode_request"]


def _probe() -> None:
    return None


#: True when this module is the compiled extension, False for the .py twin.
COMPILED: bool = type(_probe) is not types.FunctionType
_COMPILED = COMPILED  # a C bint in the extension (see otlp.pxd)

_KIND = {"internal": 1, "server": 2, "client": 3}


# ------------------------------------------------------------------ protobuf bytes

_SMALL = [bytes((i,)) for i in range(128)]


def _varint(n: int) -> bytes:
    if 0 <= n < 128:
        return _SMALL[n]
    if n < 0:
        n += 1 << 64  # int64: two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_TAG = [_varint(f << 3 | 2) for f in range(16)]  # length-delimited field tags


def _len(field: int, payload: bytes) -> bytes:
    n = len(payload)
    return _TAG[field] + (_SMALL[n] if n < 128 else _varint(n)) + payload


def _str(field: int, text: str) -> bytes:
    return _len(field, text.encode("utf-8", "replace"))


def _any(value: Any) -> bytes:
    if isinstance(value, str):
        return _str(1, value)  # string_value = 1
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"  # bool_value = 2
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            return b"\x18" + _varint(value)  # int_value = 3
        return _str(1, str(value))
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)  # double_value = 4
    if isinstance(value, list | tuple):
        items = [_len(1, _any(v)) for v in value]
        return _len(5, b"".join(items))  # array_value {values = 1}
    return _str(1, str(value))


def _kv(field: int, key: bytes, value: bytes) -> bytes:
    """A `KeyValue` (its `key` field already encoded) as field `field`."""
    return _len(field, key + _len(2, value))


def _attributes(field: int, attrs: Mapping[str, Any]) -> bytes:
    return b"".join([_kv(field, _str(1, str(k)), _any(v)) for k, v in attrs.items()
                     if v is not None])


# start_time_unix_nano = 7, end = 8 (fixed64), then flags = 16 (fixed32, tag 0x85 0x01):
# sampled. Protobuf fields may come in any order: the flags ride with the times.
_DOUBLE = struct.Struct("<d").pack
_TIMES_FLAGS = struct.Struct("<BQBQBBI").pack
_ID = struct.Struct(">BBQ").pack  # a tag, length 8, an 8-byte id
_IDS = struct.Struct(">BBQBBQ").pack
# `spans = 2` and a length (the interpreted twin's: the compiled one writes them)
_SPAN_HEADS = [] if _COMPILED else [b"\x12" + _varint(n) for n in range(2048)]
_CACHE_MAX = 4096  # entries per cache: names and attribute values repeat, but a bound
_INT64_MIN = -(1 << 63)
_INT64_END = 1 << 63
_U64_END = 1 << 64
_U128_END = 1 << 128
_NO_PARTS: list[bytes] = []  # the compiled twin's `parts` (it writes to its buffer)


def _check_record(trace_id: Any, span_id: Any, parent_id: Any, start_ns: Any,
                  end_ns: Any) -> None:
    """A tuple record's ids and times are ints in their protobuf ranges (128-bit
    trace id, 64-bit span ids, fixed64 times), or `SpanRecordInvalid` -- the same
    answer in both twins, before anything is written."""
    if not isinstance(trace_id, int) or not 0 <= trace_id < _U128_END:
        raise SpanRecordInvalid("trace_id", trace_id)
    for field, value in (("span_id", span_id), ("parent_id", parent_id),
                         ("start_ns", start_ns), ("end_ns", end_ns)):
        if not isinstance(value, int) or not 0 <= value < _U64_END:
            raise SpanRecordInvalid(field, value)


class SpanEncoder:
    """Records to `ExportTraceServiceRequest` bytes, with what repeats encoded once.

    Why caches: encoding holds the GIL (whichever thread runs it), so its cost
    per span is what the event loop loses. The resource and scope are encoded
    once; a span's name and kind, an attribute's key, and whole attributes whose
    value is a string or a bool (a model, a server, a tool, an outcome) are
    encoded the first time they are seen (the interpreted twin also keeps a
    batch's trace ids). What is left per span is copying those pieces and
    writing the ids, times and integer values. String values are scrubbed of
    the registered secrets (`secrets()`) when first encoded; the caches are
    emptied when that set changes. Not thread-safe: one encoder per exporter.
    """

    def __init__(self, resource: Mapping[str, Any], scope: tuple[str, str],
                 secrets: Callable[[], Collection[str]] = tuple) -> None:
        self._resource = _len(1, _attributes(1, resource))
        self._scope = _len(1, _str(1, scope[0]) + _str(2, scope[1]))
        self._secrets_of = secrets
        self._secrets: tuple[str, ...] = ()
        self._keys: dict[str, bytes] = {}
        self._values: dict[str, dict[Any, bytes]] = {}  # key -> value -> KeyValue bytes
        self._nvalues = 0
        self._heads: dict[str, dict[str, bytes]] = {}  # kind -> name -> name and kind bytes
        self._buf = bytearray()  # the compiled twin's output buffer (kept between batches)
        self._n = 0
        self._cap = 0
        self._front = 0  # where the compiled twin's spans start in it
        self._parts: list[bytes] = []  # the interpreted twin's spans
        self._traces: dict[int, bytes] = {}  # the interpreted twin's trace ids
        self.pending = 0  # spans added and not yet taken

    @property
    def cached(self) -> tuple[int, int, int]:
        """(keys, values, the largest kind's span heads) held in the caches, each
        bounded by `_CACHE_MAX`: readable in both twins, so the bound is checkable."""
        return (len(self._keys), self._nvalues,
                max((len(h) for h in self._heads.values()), default=0))

    def add(self, record: Any) -> None:
        """Encode one more span into the request being built (`take()` ends it).

        Why one at a time: an exporter that encodes each span as it ends keeps
        a few bytes per span instead of its record and attributes. A record
        that cannot be encoded raises and leaves the request as it was.
        """
        if not self.pending:
            self._begin()
        if _COMPILED:
            mark = self._n
            try:
                self._span(record, self._traces, _NO_PARTS)
            except BaseException:
                self._n = mark
                raise
        else:
            mark = len(self._parts)
            try:
                self._span(record, self._traces, self._parts)
            except BaseException:
                del self._parts[mark:]
                raise
        self.pending += 1

    def take(self) -> bytes:
        """The `ExportTraceServiceRequest` of the spans added since the last take
        (one resource, one scope; no spans if none was added)."""
        if not self.pending:
            self._begin()
        self.pending = 0
        self._traces = {}
        if _COMPILED:
            # the spans were written after room for the two headers in front of them
            # (their lengths known only now): the headers go just before the spans,
            # then one copy of the whole into the result
            return _finish(self, self._front)  # type: ignore[name-defined]  # noqa: F821
        parts, self._parts = self._parts, []
        return _len(1, self._resource + _len(2, self._scope + b"".join(parts)))

    def request(self, records: Iterable[tuple]) -> bytes:
        """An `ExportTraceServiceRequest` of `records` alone (nothing may be pending)."""
        if self.pending:
            raise RuntimeError("spans are pending: take() them first")
        try:
            for r in records:
                self.add(r)
        except BaseException:
            self.pending = 0
            self._begin()
            raise
        return self.take()

    def _begin(self) -> None:
        """A new request: the secrets read again, an empty buffer."""
        secrets = tuple(self._secrets_of())  # a snapshot: the loop thread may add one
        if secrets != self._secrets:
            self._secrets = secrets
            self._values.clear()
            self._nvalues = 0
        self._traces = {}
        if _COMPILED:
            self._front = len(self._resource) + len(self._scope) + 22
            self._n = 0
            _reserve(self, self._front + 192)  # type: ignore[name-defined]  # noqa: F821
            self._n = self._front
        else:
            self._parts = []

    def _scrub(self, text: str) -> str:
        for s in self._secrets:
            if s in text:
                text = text.replace(s, "***")
        return text

    def _key(self, k: str) -> bytes:
        key = self._keys.get(k)
        if key is None:
            key = _str(1, str(k))
            if len(self._keys) < _CACHE_MAX:
                self._keys[k] = key
        return key

    def _value(self, v: Any) -> bytes:
        if isinstance(v, str):
            return _str(1, self._scrub(v))
        if isinstance(v, bool | int | float):
            return _any(v)
        if isinstance(v, list | tuple):
            return _any([self._scrub(str(x)) for x in v])
        return _str(1, self._scrub(str(v)))

    def _span(self, rec: Any, traces: dict[int, bytes], parts: list[bytes]) -> int:
        """One `Span` (field `spans = 2` of ScopeSpans): appended to `parts`, or
        (compiled) written to the buffer.

        The dictionaries are keyed by plain strings (no tuple to build and
        hash per span).
        """
        if type(rec) is Span:  # the sink's: read in place (C fields when compiled)
            sp = rec
            name, kind, attrs, error = sp.name, sp.kind, sp.attrs, sp.error
        else:
            sp = None
            if type(rec) is not tuple:
                rec = rec.record()  # a span of the other twin (tests load both)
            name, trace_id, span_id, parent_id, kind, start_ns, end_ns, attrs, error = rec
            _check_record(trace_id, span_id, parent_id, start_ns, end_ns)
        heads = self._heads.get(kind)
        head = heads.get(name) if heads is not None else None
        if head is None:
            head = self._head(name, kind)
        if _COMPILED:
            # room for the tag and a 2-byte length, the fixed fields written in place
            # (the trace id too: cheaper than a cache of its bytes)
            if sp is not None:
                start = _open_span(self, sp._hi, sp._lo, sp._sid, sp._pid, head, sp.start_ns,  # type: ignore[name-defined]  # noqa: F821
                                   sp.end_ns)
            else:
                start = _open_record(self, trace_id, span_id, parent_id, head, start_ns,  # type: ignore[name-defined]  # noqa: F821
                                     end_ns)
            out = _NO_PARTS
        else:
            start = 0
            if sp is not None:
                trace_id, span_id, parent_id = sp.trace_id, sp.span_id, sp.parent_id
                start_ns, end_ns = sp.start_ns, sp.end_ns
            tid = traces.get(trace_id)
            if tid is None:
                tid = traces[trace_id] = b"\x0a\x10" + trace_id.to_bytes(16, "big")
            out = [tid, _IDS(0x12, 8, span_id, 0x22, 8, parent_id) if parent_id  # span_id = 2,
                   else _ID(0x12, 8, span_id),  # parent_span_id = 4 (bytes, big-endian)
                   head, _TIMES_FLAGS(0x39, start_ns, 0x41, end_ns, 0x85, 0x01, 0x01)]
        if attrs:
            values = self._values
            for k, v in attrs.items():
                tv = type(v)
                if tv is str or tv is bool:
                    by_value = values.get(k)
                    kv = by_value.get(v) if by_value is not None else None
                    if kv is None:
                        kv = self._cached_kv(k, v)
                elif tv is int:  # a step, a token count
                    if _COMPILED:  # written in place when it is an int64 (checked in C)
                        if _put_int_kv(self, self._key(k), v):  # type: ignore[name-defined]  # noqa: F821
                            continue
                        kv = _kv(9, self._key(k), self._value(v))  # beyond: a string
                    elif _INT64_MIN <= v < _INT64_END:
                        val = b"\x18" + _varint(v)  # int_value = 3: at most 11 bytes
                        inner = self._key(k) + b"\x12" + _SMALL[len(val)] + val
                        n = len(inner)
                        kv = b"\x4a" + _SMALL[n] if n < 128 else _TAG[9] + _varint(n)
                        kv += inner
                    else:
                        kv = _kv(9, self._key(k), self._value(v))  # beyond int64: a string
                elif v is None:
                    continue
                else:
                    kv = _kv(9, self._key(k), self._value(v))
                if _COMPILED:
                    _put(self, kv)  # type: ignore[name-defined]  # noqa: F821
                else:
                    out.append(kv)
        if error:  # status {message, code ERROR}
            status = _len(15, _str(2, self._scrub(str(error))) + b"\x18\x02")
            if _COMPILED:
                _put(self, status)  # type: ignore[name-defined]  # noqa: F821
            else:
                out.append(status)
        if _COMPILED:
            _close_span(self, start)  # type: ignore[name-defined]  # noqa: F821
            return 0
        body = b"".join(out)
        n = len(body)
        parts.append(_SPAN_HEADS[n] if n < 2048 else b"\x12" + _varint(n))
        parts.append(body)
        return 0

    def _head(self, name: str, kind: str) -> bytes:
        """The name and kind fields of a span, cached (a bounded number of names)."""
        head = _str(5, name) + b"\x30" + _varint(_KIND.get(kind, 1))  # name, kind
        heads = self._heads.setdefault(kind, {})
        if len(heads) < _CACHE_MAX:
            heads[name] = head
        return head

    def _cached_kv(self, k: str, v: str | bool) -> bytes:
        """A KeyValue whose value is a string or a bool, encoded (and scrubbed) once."""
        kv = _kv(9, self._key(k), self._value(v))
        if self._nvalues < _CACHE_MAX:
            self._values.setdefault(k, {})[v] = kv
            self._nvalues += 1
        return kv


class SpanQueue:
    """The spans waiting to be sent: a `SpanEncoder`'s batch being built, and the
    full batches encoded (`ready`, `(bytes, spans)` pairs, oldest first).

    Why a class of its own: `put` is the tracing sink, called once per finished
    sampled span, and the exporter's scheduling is Python (a loop, its tasks and
    timers). Here the common case is decided without it: the bound checked, the
    span encoded under the queue's lock, the batch cut when full; then
    `wake(full, loop)` is called only when the batch became full or nothing is
    due (`armed` False: no POST, kick or timer pending, which the exporter keeps
    in step) and a loop runs here (`running_loop()`, asyncio's, None outside
    one: the span then waits for a later put or a flush). `dropped(None)`: the
    bound dropped a span; `dropped(exc)`: a record could not be encoded (dropped
    too). `put` never raises an `Exception` into the span's end.

    The lock: `pop` (the exporter's, from any thread: a flush runs in a thread
    of its own when its caller's loop must wait) takes batches while `put` may
    be encoding (which can let go of the GIL: it calls `secrets()`, `str()` of
    a value). The compiled twin's is a C lock (`PyThread_*`), taken with the
    GIL held and, only when another thread holds it, waited for without: a
    `threading.Lock` would cost two Python calls per span from C (its
    `acquire` parsing its arguments each time), more than the rest of `put`
    but the encoding.
    """

    def __init__(self, encoder: SpanEncoder, batch: int, max_queue: int,
                 wake: Callable[[bool, Any], None], dropped: Callable[[Exception | None], None],
                 running_loop: Callable[[], Any]) -> None:
        self.encoder = encoder
        self.ready: deque[tuple[bytes, int]] = deque()
        self.batch = max(batch, 1)
        self.max_queue = max_queue
        self.waiting = 0  # spans in the encoder and in `ready`
        self.armed = False  # a callback is due already: `wake` only for a full batch
        self._wake = wake
        self._dropped = dropped
        self._running_loop = running_loop
        self._lock = None if _COMPILED else _allocate_lock()  # the interpreted twin's
        if _COMPILED:
            _new_lock(self)  # type: ignore[name-defined]  # noqa: F821

    def __dealloc__(self) -> None:
        """The compiled twin's C lock freed (never called in the interpreted one)."""
        if _COMPILED:
            _free_lock(self)  # type: ignore[name-defined]  # noqa: F821

    def _hold(self) -> int:
        """Take the queue's lock: the compiled twin's C lock, the interpreted one's."""
        if _COMPILED:
            _acquire(self)  # type: ignore[name-defined]  # noqa: F821
        else:
            self._lock.acquire()  # type: ignore[union-attr]
        return 0

    def _let_go(self) -> int:
        if _COMPILED:
            _release(self)  # type: ignore[name-defined]  # noqa: F821
        else:
            self._lock.release()  # type: ignore[union-attr]
        return 0

    def put(self, record: Any) -> None:
        """Encode a finished span into the batch being built (a few bytes kept, not
        its record); past `max_queue` spans waiting, drop it instead."""
        if self.waiting >= self.max_queue:
            self._dropped(None)
            return
        enc = self.encoder
        failed = None
        full = False
        self._hold()
        try:
            try:
                enc.add(record)
            except Exception as exc:
                failed = exc
            else:
                self.waiting += 1
                n = enc.pending
                if n >= self.batch:
                    self.ready.append((enc.take(), n))
                    full = True
        finally:
            self._let_go()
        if failed is not None:
            self._dropped(failed)
            return
        if self.armed and not full:
            return
        loop = self._running_loop()
        if loop is not None:
            self._wake(full, loop)

    def pop(self, partial: bool) -> tuple[bytes, int] | None:
        """The next encoded batch to send and its spans, no longer waiting: a full
        one, else (`partial`) what the encoder holds; None when there is none."""
        enc = self.encoder
        self._hold()
        try:
            if self.ready:
                body, n = self.ready.popleft()
            elif partial and enc.pending:
                n = enc.pending
                body = enc.take()
            else:
                return None
            self.waiting -= n
            return body, n
        finally:
            self._let_go()


def encode_request(records: Iterable[Any], resource: Mapping[str, Any],
                   scope: tuple[str, str]) -> bytes:
    """An `ExportTraceServiceRequest` holding `records` under one resource and scope."""
    return SpanEncoder(resource, scope).request(records)
