"""OTLP/HTTP trace export: spans encoded as protobuf by hand, POSTed from a thread.

Why not the OpenTelemetry SDK's exporter: its Python-side encoder builds a
message object per span, attribute and value, and its span and batch
processor cost a large multiple of agentd's per span (`benchmarks/bench_obs.py`,
the `obs_span_cost` line); the OTLP trace message is small and stable, so
agentd writes its bytes directly (field numbers from
`opentelemetry/proto/trace/v1/trace.proto`). The tests decode every export
with the official `opentelemetry-proto` types, the way a collector does.

Where the cost goes: the event loop only appends a finished span's tuple to a
bounded deque (`Exporter.put`). The exporter thread wakes when a batch is
full or the schedule delay has passed, encodes the batch (`SpanEncoder`:
what repeats is encoded once and cached) and POSTs it on one kept-alive
connection (`agentd.obs.otlp_http`). Why a thread rather than idle slices of
the loop: a busy loop has no idle slices to give, and the thread also waits
out a slow collector without the loop noticing. Its price is the GIL: the
encoding holds it, which is why the encoder's work per span is kept to a
few byte joins, and each time the thread wants it back (after a wake-up or
a socket call) a busy loop pays for the hand-over, which is why a POST is as
few socket calls as HTTP allows.

The standard environment is honoured (each also in its `_TRACES_` form, which
wins): `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is appended) or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is); `..._HEADERS`
(`k=v,k2=v2`, URL-encoded values); `..._TIMEOUT` (milliseconds, default
10000); `..._COMPRESSION` (`gzip` or `none`); `..._CERTIFICATE` (a CA file),
`..._CLIENT_CERTIFICATE` and `..._CLIENT_KEY` (mTLS to the collector).
Batching: `OTEL_BSP_SCHEDULE_DELAY` (ms, default 5000),
`OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512), `OTEL_BSP_MAX_QUEUE_SIZE` (2048; past
it the oldest spans are dropped, never waited for, and counted in
`agentd_trace_spans_dropped_total{reason="queue_full"}`). Failed posts
(connection errors, 429, 502, 503, 504) are retried with backoff within the
timeout; anything else drops the batch with one `obs.otel.export_failed` log
line (and counts it, `reason="export_failed"`). The run never waits for, nor
fails because of, the collector.

A record is `(name, trace_id, span_id, parent_id, kind, start_ns, end_ns,
attrs, error)` with integer ids (`parent_id` 0 for a root) and `kind` one of
internal, client, server; `attrs` as the span collected them (the encoder
skips None values and scrubs strings of the registered secrets).
"""

from __future__ import annotations

import gzip
import os
import ssl
import struct
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Collection, Mapping
from typing import Any

from agentd.obs import metrics
from agentd.obs.otlp_http import Poster

__all__ = ["Exporter", "SpanEncoder", "encode_request", "resource_attributes"]

_KIND = {"internal": 1, "server": 2, "client": 3}
_RETRY_STATUS = frozenset({429, 502, 503, 504})


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
        return b"\x21" + struct.pack("<d", value)  # double_value = 4
    if isinstance(value, list | tuple):
        return _len(5, b"".join(_len(1, _any(v)) for v in value))  # array_value
    return _str(1, str(value))


def _kv(field: int, key: bytes, value: bytes) -> bytes:
    """A `KeyValue` (its `key` field already encoded) as field `field`."""
    return _len(field, key + _len(2, value))


def _attributes(field: int, attrs: Mapping[str, Any]) -> bytes:
    return b"".join(_kv(field, _str(1, str(k)), _any(v)) for k, v in attrs.items()
                    if v is not None)


# start_time_unix_nano = 7, end = 8 (fixed64), then flags = 16 (fixed32, tag 0x85 0x01):
# sampled. Protobuf fields may come in any order: the flags ride with the times.
_TIMES_FLAGS = struct.Struct("<BQBQBBI").pack
_ID = struct.Struct(">BBQ").pack  # a tag, length 8, an 8-byte id
_IDS = struct.Struct(">BBQBBQ").pack
_SPAN_HEADS = [b"\x12" + _varint(n) for n in range(2048)]  # `spans = 2` and a length
_CACHE_MAX = 4096  # entries per cache: names and attribute values repeat, but a bound


class SpanEncoder:
    """Records to `ExportTraceServiceRequest` bytes, with what repeats encoded once.

    Why caches: the exporter thread holds the GIL while it encodes, so its cost
    per span is what the event loop loses. The resource and scope are encoded
    once; a span's name and kind, an attribute's key, and whole attributes whose
    value is a string or a bool (a model, a server, a tool, an outcome) are
    encoded the first time they are seen; trace ids repeat within a batch. What
    is left per span is a few byte joins. String values are scrubbed of the
    registered secrets (`secrets()`) when first encoded; the caches are emptied
    when that set changes.
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

    def request(self, records: list[tuple]) -> bytes:
        secrets = tuple(self._secrets_of())  # a snapshot: the loop thread may add one
        if secrets != self._secrets:
            self._secrets = secrets
            self._values.clear()
            self._nvalues = 0
        traces: dict[int, bytes] = {}
        parts: list[bytes] = []
        span = self._span
        for r in records:
            span(r, traces, parts)
        return _len(1, self._resource + _len(2, self._scope + b"".join(parts)))

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

    def _span(self, rec: tuple, traces: dict[int, bytes], parts: list[bytes]) -> None:
        """Append one `Span` (field `spans = 2` of ScopeSpans) to `parts`.

        The dictionaries are keyed by plain strings (no tuple to build and
        hash per span) and the times and flags are one struct.
        """
        name, trace_id, span_id, parent_id, kind, start_ns, end_ns, attrs, error = rec
        tid = traces.get(trace_id)
        if tid is None:
            tid = traces[trace_id] = b"\x0a\x10" + trace_id.to_bytes(16, "big")
        heads = self._heads.get(kind)
        head = heads.get(name) if heads is not None else None
        if head is None:
            head = self._head(name, kind)
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
                elif tv is int and -(1 << 63) <= v < (1 << 63):  # a step, a token count
                    val = b"\x18" + _varint(v)  # int_value = 3: at most 11 bytes
                    inner = self._key(k) + b"\x12" + _SMALL[len(val)] + val
                    n = len(inner)
                    kv = b"\x4a" + _SMALL[n] if n < 128 else _TAG[9] + _varint(n)
                    kv += inner
                elif v is None:
                    continue
                else:
                    kv = _kv(9, self._key(k), self._value(v))
                out.append(kv)
        if error:  # status {message, code ERROR}
            out.append(_len(15, _str(2, self._scrub(str(error))) + b"\x18\x02"))
        body = b"".join(out)
        n = len(body)
        parts.append(_SPAN_HEADS[n] if n < 2048 else b"\x12" + _varint(n))
        parts.append(body)

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


def encode_request(records: list[tuple], resource: Mapping[str, Any],
                   scope: tuple[str, str]) -> bytes:
    """An `ExportTraceServiceRequest` holding `records` under one resource and scope."""
    return SpanEncoder(resource, scope).request(records)


# ------------------------------------------------------------------ configuration

def _env(name: str, default: str | None = None) -> str | None:
    """`OTEL_EXPORTER_OTLP_TRACES_{name}`, else `OTEL_EXPORTER_OTLP_{name}`."""
    env = os.environ
    return env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env.get(
        f"OTEL_EXPORTER_OTLP_{name}") or default


def _pairs(text: str | None) -> dict[str, str]:
    out = {}
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(value.strip())
    return out


def resource_attributes(service: str, version: str, extra: Mapping[str, Any]) -> dict:
    """service.name (`OTEL_SERVICE_NAME` wins), `OTEL_RESOURCE_ATTRIBUTES`, the SDK's."""
    attrs: dict[str, Any] = {"telemetry.sdk.name": "agentd", "telemetry.sdk.language": "python",
                             "telemetry.sdk.version": version}
    attrs.update(_pairs(os.environ.get("OTEL_RESOURCE_ATTRIBUTES")))
    attrs.update({k: v for k, v in extra.items() if v is not None})
    attrs["service.name"] = os.environ.get("OTEL_SERVICE_NAME") or attrs.get(
        "service.name") or service
    attrs.setdefault("service.version", version)
    return attrs


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except (TypeError, ValueError):
        return default


# ------------------------------------------------------------------ the exporter

class Exporter:
    """A batch exporter thread: records in (`put`, from the event loop), OTLP out."""

    def __init__(self, resource: Mapping[str, Any], scope: tuple[str, str], *,
                 secrets: Callable[[], Collection[str]] = tuple) -> None:
        traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if traces:
            self.endpoint = traces
        else:
            base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
            self.endpoint = base.rstrip("/") + "/v1/traces"
        url = urllib.parse.urlsplit(self.endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"OTLP endpoint {self.endpoint!r} is not http(s)")
        port = url.port or (443 if url.scheme == "https" else 80)  # ValueError: a bad port
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        headers = {**_pairs(_env("HEADERS")), "Content-Type": "application/x-protobuf",
                   "User-Agent": f"agentd/{scope[1]}"}
        self._gzip = (_env("COMPRESSION", "none") or "none").strip().lower() == "gzip"
        if self._gzip:
            headers["Content-Encoding"] = "gzip"
        try:
            self._timeout = max(float(_env("TIMEOUT", "10000") or 10000) / 1000, 0.1)
        except ValueError:
            self._timeout = 10.0
        self._ssl: ssl.SSLContext | None = None
        if self.endpoint.startswith("https:"):
            self._ssl = ssl.create_default_context(cafile=_env("CERTIFICATE"))
            cert, key = _env("CLIENT_CERTIFICATE"), _env("CLIENT_KEY")
            if cert:
                self._ssl.load_cert_chain(cert, key)
        # kept alive between batches; ValueError: a header that cannot be sent
        self._poster = Poster(url.hostname, port, path, url.netloc.rpartition("@")[2],
                              headers, self._ssl)
        self._encoder = SpanEncoder(resource, scope, secrets)
        self._delay = max(_int_env("OTEL_BSP_SCHEDULE_DELAY", 5000), 1) / 1000
        self._batch = max(_int_env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), 1)
        self._queue: deque[tuple] = deque(maxlen=max(_int_env("OTEL_BSP_MAX_QUEUE_SIZE",
                                                              2048), 1))
        self._batch = min(self._batch, self._queue.maxlen or 1)  # as the OTel SDK
        self.dropped = 0
        self.exported = 0
        self.failures = 0
        self._puts = 0  # records put (event loop) ...
        self._handled = 0  # ... and taken off the queue and sent or dropped (the thread)
        self._wake = threading.Event()
        self._flushing = False  # flush() asks for the partial batch too
        self._done = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="agentd-otlp", daemon=True)
        self._thread.start()

    def put(self, record: tuple) -> None:
        """Queue a finished span (the event loop's whole share of exporting).

        Never blocks: past `OTEL_BSP_MAX_QUEUE_SIZE` the oldest span is dropped
        and counted (`agentd_trace_spans_dropped_total{reason="queue_full"}`).
        """
        q = self._queue
        self._puts += 1
        if len(q) == q.maxlen:
            self.dropped += 1
            metrics.SPANS_DROPPED.inc("queue_full")
        q.append(record)
        if len(q) >= self._batch and not self._wake.is_set():
            self._wake.set()

    def flush(self, timeout_s: float = 5.0) -> None:
        """Send what was put until now, and wait until it is sent (or dropped);
        bounded: the caller never hangs on a dead collector."""
        target = self._puts

        def done() -> bool:
            return self._handled + self.dropped >= target or not self._thread.is_alive()

        if done():
            return
        with self._done:
            self._flushing = True
            self._wake.set()
            self._done.wait_for(done, timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        """Full batches when the queue fills one; the rest when the schedule delay
        passes quietly, or at a flush. Why not drain to empty after a full batch:
        the spans that arrive while it is posted would go out a few at a time,
        and one post costs as much as encoding a great many spans."""
        while True:
            timed_out = not self._wake.wait(self._delay)
            self._wake.clear()
            drain = timed_out or self._flushing or self._stop
            self._flushing = False
            q = self._queue
            while q and (drain or len(q) >= self._batch):
                batch: list[tuple] = []
                while q and len(batch) < self._batch:
                    batch.append(q.popleft())
                self._send(batch)
                with self._done:
                    self._handled += len(batch)
                    self._done.notify_all()
            if self._stop:
                self._close()
                return

    def _send(self, batch: list[tuple]) -> None:
        try:
            body = self._encoder.request(batch)
        except Exception as exc:  # a record we cannot encode: drop the batch, say so
            self._failed(len(batch), f"encode: {type(exc).__name__}: {exc}")
            return
        if self._gzip:
            body = gzip.compress(body)
        deadline = time.monotonic() + self._timeout
        delay = 0.5
        while True:
            why = self._post(body, max(deadline - time.monotonic(), 0.1))
            if why is None:
                self.exported += len(batch)
                return
            retry, text = why
            if not retry or self._stop or time.monotonic() + delay >= deadline:
                self._failed(len(batch), text)
                return
            time.sleep(delay)
            delay *= 2

    def _post(self, body: bytes, timeout: float) -> tuple[bool, str] | None:
        """One POST on the kept-alive connection (a new one if there is none, or if
        the collector closed the one kept); None when the collector took it."""
        poster = self._poster
        for _ in range(2):
            fresh = not poster.connected
            try:
                status = poster.post(body, timeout)
            except (OSError, ValueError) as exc:
                if fresh:
                    return True, f"{type(exc).__name__}: {exc}"
                continue  # a kept connection the collector had closed: once more, anew
            if 200 <= status < 300:
                return None
            return status in _RETRY_STATUS, f"HTTP {status}"
        return True, "connection closed"

    def _close(self) -> None:
        self._poster.close()

    def _failed(self, count: int, why: str) -> None:
        self.failures += 1
        metrics.SPANS_DROPPED.inc("export_failed", n=count)
        from agentd.log import log

        log.warning("obs.otel.export_failed", spans=count, error=why[:300],
                    endpoint_scheme=urllib.parse.urlsplit(self.endpoint).scheme)
