"""OTLP/HTTP trace export: spans encoded as protobuf, POSTed by the event loop.

Why not the OpenTelemetry SDK's exporter: its Python-side encoder builds a
message object per span, attribute and value, and its span and batch
processor cost a large multiple of agentd's per span (`benchmarks/bench_obs.py`,
the `obs_span_cost` line); the OTLP trace message is small and stable, so
agentd writes its bytes directly (field numbers from
`opentelemetry/proto/trace/v1/trace.proto`). The encoder, `SpanEncoder`, lives
in `agentd_native.otlp` (re-exported here), a compiled twin of the byte layer
(`docs/native.md`) that writes each span into one buffer, about a tenth of
what its interpreted fallback costs. The tests decode every export with the
official `opentelemetry-proto` types, the way a collector does.

Where the cost goes: a finished span is encoded at once into the
batch being built (`Exporter.put`, which is `SpanQueue.put` of the same
compiled twin: bounded, encoded and batched in C, the exporter's Python called
back only when a batch fills, a span is dropped, or nothing is scheduled yet).
When a batch is full, or the schedule delay has passed since the first span
of one, the loop that put it POSTs the batch with aiohttp on one kept-alive
connection, in a task of the exporter's own (one POST in flight; the spans
that end meanwhile wait, encoded, and their timer starts when it ends), and
goes on: the loop never waits for the collector. Why not a thread: the
loop holds the GIL while it runs, and a thread gets it back after every
wake-up and socket call only when it happens to win it from a busy loop
(measured: tens of milliseconds), while each of the loop's hand-overs in the
meantime wakes it for nothing; that cost a busy process more than encoding
did. A span that ends where no loop runs waits for the next put on a loop,
or for a flush. `flush()` (from code that cannot await) sends on a private
loop, `aflush()` on the exporting one.

The standard environment is honoured (each also in its `_TRACES_` form, which
wins): `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is appended) or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is); `..._HEADERS`
(`k=v,k2=v2`, URL-encoded values); `..._TIMEOUT` (milliseconds, default
10000); `..._COMPRESSION` (`gzip` or `none`); `..._CERTIFICATE` (a CA file),
`..._CLIENT_CERTIFICATE` and `..._CLIENT_KEY` (mTLS to the collector).
Batching: `OTEL_BSP_SCHEDULE_DELAY` (ms, default 5000),
`OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512), `OTEL_BSP_MAX_QUEUE_SIZE` (2048 spans
waiting to be sent; past it a span that ends is dropped, as the OTel SDK
drops it, never waited for, and counted in
`agentd_trace_spans_dropped_total{reason="queue_full"}`). Failed posts
(connection errors, 429, 502, 503, 504) are retried with backoff within the
timeout; anything else drops the batch with one `obs.otel.export_failed` log
line (and counts it, `reason="export_failed"`). The run never waits for, nor
fails because of, the collector.

A record is a finished span (`agentd_native.span.Span`, what the tracing sink
is given) or, for a subagent's relayed spans, the tuple `(name, trace_id,
span_id, parent_id, kind, start_ns, end_ns, attrs, error)` with integer ids
(`parent_id` 0 for a root) and `kind` one of internal, client, server;
`attrs` as the span collected them (the encoder skips None values and scrubs
strings of the registered secrets).
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import os
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Collection, Mapping
from typing import Any

from agentd.obs import metrics
from agentd_native.otlp import SpanEncoder, SpanQueue, encode_request

__all__ = ["Exporter", "SpanEncoder", "SpanQueue", "encode_request", "resource_attributes"]

Timer = Callable[[asyncio.AbstractEventLoop, float, Callable[[], object]], asyncio.TimerHandle]
"""Starts the schedule delay's timer: `(loop, delay_s, due)` -> its handle."""


def _call_later(loop: asyncio.AbstractEventLoop, delay: float,
                due: Callable[[], object]) -> asyncio.TimerHandle:
    """The default `Timer`: the loop's own."""
    return loop.call_later(delay, due)


_RETRY_STATUS = frozenset({429, 502, 503, 504})
_ANSWER_READ_MAX = 64 * 1024  # bytes of a collector's answer read (its status is what counts)


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
    """A batch exporter driven by the event loop: records in (`put`), OTLP out.

    A finished span is encoded at once into the batch being built.
    When a batch is full, or the schedule delay has passed since the first
    span of one, the loop that put it POSTs it (aiohttp, one kept-alive
    connection, one POST in flight); the loop never waits for the collector.
    `flush()` and `aflush()` send what was put until then; `stop()` ends it.

    `put(record)` (the tracing sink) never blocks and never raises: past
    `OTEL_BSP_MAX_QUEUE_SIZE` spans waiting, a span is dropped, as the OTel
    SDK's batch processor drops it, and counted
    (`agentd_trace_spans_dropped_total{reason="queue_full"}`); a record that
    cannot be encoded is dropped and logged. It is the bound `put` of a
    `SpanQueue` (why: it runs once per span, in C when compiled), which calls
    `_wake` only when a batch is full or no POST, kick or timer is due (its
    `armed` flag, kept in step by `_rearm` wherever those change).

    `timer` starts the schedule delay's timer (the loop's `call_later` unless
    injected): the seam a test uses to fire it at the moment it chooses.
    """

    put: Callable[[Any], None]  # a finished span, or a relayed record's tuple

    def __init__(self, resource: Mapping[str, Any], scope: tuple[str, str], *,
                 secrets: Callable[[], Collection[str]] = tuple,
                 timer: Timer = _call_later) -> None:
        traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if traces:
            self.endpoint = traces
        else:
            base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
            self.endpoint = base.rstrip("/") + "/v1/traces"
        url = urllib.parse.urlsplit(self.endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"OTLP endpoint {self.endpoint!r} is not http(s)")
        _ = url.port  # ValueError: a bad port
        headers = {**_pairs(_env("HEADERS")), "Content-Type": "application/x-protobuf",
                   "User-Agent": f"agentd/{scope[1]}"}
        for name, value in headers.items():
            if any(c in name or c in value for c in "\r\n\0") or ":" in name or not name:
                raise ValueError(f"an OTLP header that cannot be sent: {name!r}")
        self._gzip = (_env("COMPRESSION", "none") or "none").strip().lower() == "gzip"
        if self._gzip:
            headers["Content-Encoding"] = "gzip"
        self._headers = headers
        try:
            self._timeout = max(float(_env("TIMEOUT", "10000") or 10000) / 1000, 0.1)
        except ValueError:
            self._timeout = 10.0
        self._ssl: ssl.SSLContext | bool = True
        if url.scheme == "https":
            self._ssl = ssl.create_default_context(cafile=_env("CERTIFICATE"))
            cert, key = _env("CLIENT_CERTIFICATE"), _env("CLIENT_KEY")
            if cert:
                self._ssl.load_cert_chain(cert, key)
        self._encoder = SpanEncoder(resource, scope, secrets)
        self._delay = max(_int_env("OTEL_BSP_SCHEDULE_DELAY", 5000), 1) / 1000
        self._max_queue = max(_int_env("OTEL_BSP_MAX_QUEUE_SIZE", 2048), 1)
        self._batch = min(max(_int_env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), 1),
                          self._max_queue)  # as the OTel SDK
        # the spans waiting (`waiting`): in the encoder, and encoded batches (`ready`);
        # a flush from another thread takes them too (`pop`, under the queue's lock)
        self._queue = SpanQueue(self._encoder, self._batch, self._max_queue, self._wake,
                                self._drop, asyncio._get_running_loop)
        self.put = self._queue.put
        self.dropped = 0
        self.exported = 0
        self.failures = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that exports
        self._session: Any = None  # its aiohttp session
        self._sending: asyncio.Task | None = None  # the one POST in flight there
        self._timer: asyncio.TimerHandle | None = None
        self._start_timer = timer
        self._due = functools.partial(self._pump, True)  # what the timer calls
        self._kicked = False
        self._stopped = False

    # ------------------------------------------------------------ the loop's side

    def _wake(self, full: bool, loop: asyncio.AbstractEventLoop) -> None:
        """From `put` on `loop`: a batch became full (POST it soon), or a span waits
        and nothing was due (`armed` False): start the schedule delay's timer."""
        if self._kicked or self._sending is not None or (self._timer is not None and not full):
            self._rearm()
            return  # a callback is due already
        self._adopt(loop)
        if full:
            self._kicked = True
            loop.call_soon(self._pump, False)
        elif self._timer is None and not self._stopped:
            self._timer = self._start_timer(loop, self._delay, self._due)
        self._rearm()

    def _drop(self, exc: Exception | None) -> None:
        """From `put`: a span dropped, past the queue bound (None) or unencodable."""
        if exc is None:
            self.dropped += 1
            metrics.SPANS_DROPPED.inc("queue_full")
        else:
            self._failed(1, f"encode: {type(exc).__name__}: {exc}")

    def _rearm(self) -> None:
        """Tell the queue whether a callback is due (a kick, a POST in flight, a
        timer; or stopped: none will be): while one is, `put` stays in C."""
        self._queue.armed = (self._kicked or self._sending is not None
                             or self._timer is not None or self._stopped)

    def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Export on `loop` from now on, if the loop that did is gone (or none did)."""
        if self._loop is not loop and (self._loop is None or self._loop.is_closed()):
            self._loop, self._session, self._sending, self._timer = loop, None, None, None
            self._rearm()

    def _pump(self, due: bool) -> None:
        """Start the next POST: a full batch, or (the schedule delay passed) what
        there is; nothing while one is in flight (its end pumps again)."""
        self._kicked = False
        if due:
            self._timer = None
        if self._sending is None and not self._stopped:
            loop = asyncio.get_running_loop()
            batch = self._next(due)
            if batch is not None:
                self._sending = task = loop.create_task(self._send(*batch, loop))
                task.add_done_callback(self._sent)
            if self._queue.waiting and self._timer is None:
                self._timer = self._start_timer(loop, self._delay, self._due)
        self._rearm()

    def _sent(self, task: asyncio.Task) -> None:
        """The POST ended: the next full batch, or the timer for spans put meanwhile
        (`put` did not wake the exporter while the POST was in flight)."""
        self._sending = None
        if not task.cancelled() and self._queue.waiting:
            self._pump(False)
        else:
            self._rearm()

    def _next(self, partial: bool) -> tuple[bytes, int] | None:
        """The next encoded batch to send: a full one, else (`partial`) what the
        encoder holds; None when there is none."""
        return self._queue.pop(partial)

    # ------------------------------------------------------------ sending

    async def _send(self, body: bytes, count: int, loop: asyncio.AbstractEventLoop) -> None:
        """POST one encoded batch of `count` spans; retried with backoff (connection
        errors, 429, 502, 503, 504) within the timeout, else dropped and counted."""
        if self._gzip:
            body = gzip.compress(body)
        deadline = loop.time() + self._timeout
        delay = 0.5
        while True:
            why = await self._post(body, max(deadline - loop.time(), 0.1), loop)
            if why is None:
                self.exported += count
                return
            retry, text = why
            if not retry or self._stopped or loop.time() + delay >= deadline:
                self._failed(count, text)
                return
            await asyncio.sleep(delay)
            delay *= 2

    async def _post(self, body: bytes, limit_s: float,
                    loop: asyncio.AbstractEventLoop) -> tuple[bool, str] | None:
        """One POST; None when the collector took it, else (retry?, why). The
        exporting loop keeps its session (and connection); a flush's private
        loop uses one for the POST."""
        import aiohttp

        session = self._session if self._loop is loop else None
        if session is None or session.closed:
            session = aiohttp.ClientSession(
                cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
                connector=aiohttp.TCPConnector(limit=1, ssl=self._ssl))
            if self._loop is loop:
                self._session = session
        try:
            async with session.post(self.endpoint, data=body, headers=self._headers,
                                    timeout=aiohttp.ClientTimeout(total=limit_s),
                                    allow_redirects=False) as resp:
                # only the status counts: a bounded head of the answer is read (a
                # connection left with more unread is closed, never reused)
                await resp.content.read(_ANSWER_READ_MAX)
                status = resp.status
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return True, f"{type(exc).__name__}: {exc}"
        finally:
            if session is not self._session:
                await session.close()
        if 200 <= status < 300:
            return None
        return status in _RETRY_STATUS, f"HTTP {status}"

    # ------------------------------------------------------------ flushing

    async def aflush(self) -> None:
        """Send what was put until now (on this loop) and wait for it to be sent
        or dropped: the POST in flight first, then the rest, batch by batch."""
        loop = asyncio.get_running_loop()
        self._adopt(loop)
        if self._sending is not None and self._loop is loop:
            await asyncio.wait([self._sending])
        while (batch := self._next(True)) is not None:
            await self._send(*batch, loop)

    def flush(self, timeout_s: float = 5.0) -> None:
        """`aflush()` for code that cannot await: run on a private loop, in this
        thread or (when this thread runs a loop, which then waits) a short-lived
        one; bounded by `timeout_s`. A POST in flight on the exporting loop is
        left to it: `aflush()` there waits for it."""

        async def flush() -> None:
            async with asyncio.timeout(timeout_s):
                while (batch := self._next(True)) is not None:
                    await self._send(*batch, asyncio.get_running_loop())

        if not self._queue.waiting:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            _run_quietly(flush)
            return
        worker = threading.Thread(target=_run_quietly, args=(flush,), name="agentd-otlp-flush",
                                  daemon=True)
        worker.start()
        worker.join(timeout_s + 1)

    async def astop(self) -> None:
        """Flush, then close the connection; a span put after this is not sent."""
        await self.aflush()
        session = self._close()
        if session is not None and self._loop is asyncio.get_running_loop():
            await session.close()
        elif session is not None:
            self._close_elsewhere(session)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Flush (bounded) and stop; from any thread."""
        self.flush(timeout_s)
        session = self._close()
        if session is not None:
            self._close_elsewhere(session)

    def _close(self) -> Any:
        """Stopped: no timer, no more POSTs from the loop; the session to close."""
        self._stopped = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        self._rearm()
        session, self._session = self._session, None
        return session

    def _close_elsewhere(self, session: Any) -> None:
        """Close the exporting loop's session from outside it (or it is gone with it)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.create_task(session.close())
            return
        try:
            asyncio.run_coroutine_threadsafe(session.close(), loop)
        except RuntimeError:  # that loop is closing
            pass

    def _failed(self, count: int, why: str) -> None:
        self.failures += 1
        metrics.SPANS_DROPPED.inc("export_failed", n=count)
        from agentd.log import log

        log.warning("obs.otel.export_failed", spans=count, error=why[:300],
                    endpoint_scheme=urllib.parse.urlsplit(self.endpoint).scheme)


def _run_quietly(flush: Callable[[], Any]) -> None:
    """`asyncio.run(flush())`, a timeout being the end of it, not an error."""
    try:
        asyncio.run(flush())
    except TimeoutError:
        pass
