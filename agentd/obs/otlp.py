"""OTLP/HTTP trace export: spans encoded as protobuf by hand, POSTed from a thread.

Why not the OpenTelemetry SDK's exporter: its Python-side encoder builds a
message object per span, attribute and value, and costs a large multiple of
what the agent loop spends on a whole step (`benchmarks/bench_obs.py`); the
OTLP trace message is small and stable, so agentd writes its bytes directly
(field numbers from `opentelemetry/proto/trace/v1/trace.proto`). The tests
decode every export with the official `opentelemetry-proto` types, the way a
collector does.

The standard environment is honoured (each also in its `_TRACES_` form, which
wins): `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is appended) or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is); `..._HEADERS`
(`k=v,k2=v2`, URL-encoded values); `..._TIMEOUT` (milliseconds, default
10000); `..._COMPRESSION` (`gzip` or `none`); `..._CERTIFICATE` (a CA file),
`..._CLIENT_CERTIFICATE` and `..._CLIENT_KEY` (mTLS to the collector).
Batching: `OTEL_BSP_SCHEDULE_DELAY` (ms, default 5000),
`OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512), `OTEL_BSP_MAX_QUEUE_SIZE` (2048; past
it the oldest spans are dropped and counted). Failed posts (connection
errors, 429, 502, 503, 504) are retried with backoff within the timeout;
anything else drops the batch with one `obs.otel.export_failed` log line. The
run never waits for, nor fails because of, the collector.

A record is `(name, trace_id, span_id, parent_id, kind, start_ns, end_ns,
attrs, error)` with integer ids (`parent_id` 0 for a root) and `kind` one of
internal, client, server.
"""

from __future__ import annotations

import gzip
import os
import ssl
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["Exporter", "encode_request", "resource_attributes"]

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


_KEYS: dict[str, bytes] = {}  # attribute name -> its encoded `key` field (names repeat)


def _attributes(field: int, attrs: Mapping[str, Any]) -> bytes:
    keys = _KEYS
    out = []
    for k, v in attrs.items():
        key = keys.get(k)
        if key is None:
            key = _str(1, str(k))
            if len(keys) < 4096:
                keys[k] = key
        out.append(_len(field, key + _len(2, _any(v))))
    return b"".join(out)


_PACK_Q = struct.Struct("<Q").pack
_FLAGS = b"\x85\x01" + struct.pack("<I", 0x01)  # flags = 16 (fixed32): sampled


def _span(rec: tuple) -> bytes:
    name, trace_id, span_id, parent_id, kind, start_ns, end_ns, attrs, error = rec
    out = [_len(1, trace_id.to_bytes(16, "big")), _len(2, span_id.to_bytes(8, "big"))]
    if parent_id:
        out.append(_len(4, parent_id.to_bytes(8, "big")))
    out.append(_str(5, name))
    out.append(b"\x30" + _varint(_KIND.get(kind, 1)))  # kind = 6
    out.append(b"\x39" + _PACK_Q(start_ns))  # start_time_unix_nano = 7, fixed64
    out.append(b"\x41" + _PACK_Q(end_ns))  # end_time_unix_nano = 8, fixed64
    if attrs:
        out.append(_attributes(9, attrs))
    if error:
        out.append(_len(15, _str(2, error) + b"\x18\x02"))  # status {message, code ERROR}
    out.append(_FLAGS)
    return b"".join(out)


def encode_request(records: list[tuple], resource: Mapping[str, Any],
                   scope: tuple[str, str]) -> bytes:
    """An `ExportTraceServiceRequest` holding `records` under one resource and scope."""
    spans = b"".join(_len(2, _span(r)) for r in records)
    scope_msg = _str(1, scope[0]) + _str(2, scope[1])
    scope_spans = _len(1, scope_msg) + spans
    resource_spans = _len(1, _attributes(1, resource)) + _len(2, scope_spans)
    return _len(1, resource_spans)


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

    def __init__(self, resource: Mapping[str, Any], scope: tuple[str, str]) -> None:
        traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if traces:
            self.endpoint = traces
        else:
            base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
            self.endpoint = base.rstrip("/") + "/v1/traces"
        if urllib.parse.urlsplit(self.endpoint).scheme not in ("http", "https"):
            raise ValueError(f"OTLP endpoint {self.endpoint!r} is not http(s)")
        self._headers = {**_pairs(_env("HEADERS")),
                         "Content-Type": "application/x-protobuf",
                         "User-Agent": f"agentd/{scope[1]}"}
        self._gzip = (_env("COMPRESSION", "none") or "none").strip().lower() == "gzip"
        if self._gzip:
            self._headers["Content-Encoding"] = "gzip"
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
        self._resource = dict(resource)
        self._scope = scope
        self._delay = _int_env("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._batch = max(_int_env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), 1)
        self._queue: deque[tuple] = deque(maxlen=max(_int_env("OTEL_BSP_MAX_QUEUE_SIZE",
                                                              2048), 1))
        self.dropped = 0
        self.exported = 0
        self.failures = 0
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="agentd-otlp", daemon=True)
        self._thread.start()

    def put(self, record: tuple) -> None:
        q = self._queue
        if len(q) == q.maxlen:
            self.dropped += 1
        q.append(record)
        if len(q) >= self._batch:
            self._wake.set()

    def flush(self, timeout_s: float = 5.0) -> None:
        """Send what waits now (bounded: the caller never hangs on a dead collector)."""
        if not self._queue:
            return
        self._idle.clear()
        self._wake.set()
        self._idle.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay)
            self._wake.clear()
            while self._queue:
                batch = []
                while self._queue and len(batch) < self._batch:
                    batch.append(self._queue.popleft())
                self._send(batch)
            self._idle.set()
            if self._stop:
                return

    def _send(self, batch: list[tuple]) -> None:
        try:
            body = encode_request(batch, self._resource, self._scope)
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
        req = urllib.request.Request(self.endpoint, data=body, headers=self._headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._ssl) as resp:
                resp.read()
                return None
        except urllib.error.HTTPError as exc:
            return exc.code in _RETRY_STATUS, f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return True, f"{type(reason).__name__}: {reason}"

    def _failed(self, count: int, why: str) -> None:
        self.failures += 1
        from agentd.log import log

        log.warning("obs.otel.export_failed", spans=count, error=why[:300],
                    endpoint_scheme=urllib.parse.urlsplit(self.endpoint).scheme)
