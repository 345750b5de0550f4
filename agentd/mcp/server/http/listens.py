"""The served endpoint's 2026-07-28 ``subscriptions/listen`` streams.

A listen's response is an SSE stream that stays open: the acknowledgement
first (written only once the handler's awaited ``admit`` and its subscribes
have run: ``agentd.mcp.server.handler.ListenSession.open_listen``), then each update the
stream holds, ``: keepalive`` comments while idle, and the listen's result
when nothing on it can fire any more or the server stops.  Streams are
bounded per principal (``429``) and in total (``503``); a stream whose client
stopped reading (``listen_buffer`` undelivered frames) or stalls a write
(``write_timeout``) ends abruptly -- 2026-07-28 has no replay, the client
re-listens and re-reads.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from agentd.errors import RPCError
from agentd.log import log
from agentd.log_bridge import throttled
from agentd.mcp.server.handler import Handler, ListenSession, ServerSession, current_principal
from agentd.mcp.server.http.limits import Limits
from agentd.mcp.server.http.responses import SSE_HEADERS, plain, rpc_error, sse_event
from agentd.mcp.server.rules import stateless
from agentd.wire.jsonrpc import INTERNAL_ERROR, Request

__all__ = ["Listens"]

_log = log.bind(component="mcp.http_server")


class Listens:
    """Every open listen of one listener (``open``: their sessions)."""

    def __init__(self, handler: Handler, limits: Limits, auth: str) -> None:
        self.handler = handler
        self.limits = limits
        self.auth = auth
        self.open: set[ListenSession] = set()  # built by ServerSession.listening
        self._per_client: dict[str, int] = {}
        self._seq = 0
        self._stopping = False
        self._wake: dict[ListenSession, asyncio.Event] = {}

    def close_all(self) -> None:
        """Shutdown: every open stream ends with its result."""
        self._stopping = True
        for wake in self._wake.values():
            wake.set()

    async def listen(self, request: web.Request, msg: Request, env: stateless.Envelope,
                     accept_sse: bool) -> web.StreamResponse:
        """``subscriptions/listen``: the response is an SSE stream that stays open,
        acknowledgement first; bounded per client and in total."""
        if not accept_sse:
            return plain(406, "Not Acceptable: a listen stream is text/event-stream")
        try:
            params = stateless.listen_params(msg)
        except RPCError as exc:
            return rpc_error(400, exc)
        client = current_principal.get() or "anonymous"  # bounded per principal, as sessions
        lim = self.limits
        if self._per_client.get(client, 0) >= lim.listen_per_client:
            throttled(_log, "warning", "mcp.serve.limit", key="listens_per_principal",
                      reason="listens_per_principal")
            return rpc_error(429, RPCError(
                stateless.LIMIT_EXCEEDED, "Too many open subscriptions/listen streams for this "
                f"principal (limit {lim.listen_per_client})", id=msg.id, side="local"))
        if len(self.open) >= lim.max_listens or self._stopping:
            throttled(_log, "warning", "mcp.serve.limit", key="max_listens",
                      reason="max_listens")
            return rpc_error(503, RPCError(
                stateless.LIMIT_EXCEEDED, "Too many open subscriptions/listen streams", id=msg.id,
                side="local"))
        self._seq += 1
        wake = asyncio.Event()  # set on every frame; the writer drains after the ack
        stream = stateless.Listen(self.handler, msg.id, max_frames=lim.listen_buffer)
        listener = ServerSession.listening(self.handler, env, stream,
                                           listen_id=f"listen:{self._seq}", auth=self.auth,
                                           client=client, outbox=lambda _data: wake.set())
        self.open.add(listener)
        self._per_client[client] = self._per_client.get(client, 0) + 1
        self._wake[listener] = wake
        resp = web.StreamResponse(headers=SSE_HEADERS)  # prepared once the listen is open
        try:
            try:
                ack = await listener.open_listen(params)
            except Exception as exc:  # a handler bug never kills the server
                _log.error("mcp.serve.internal_error", method=msg.method,
                           error=type(exc).__name__, detail=str(exc)[:500])
                return rpc_error(200, RPCError(INTERNAL_ERROR, "Internal error",
                                               id=msg.id, side="local"))
            _log.info("mcp.serve.listen", auth=self.auth, subscription=str(msg.id)[:32],
                      uris=len(listener.subscriptions))
            await resp.prepare(request)
            await self._run(request, resp, listener, stream, ack, wake)
        except (ConnectionError, TimeoutError, RuntimeError):
            pass  # the client went away or stalled: nothing to resume at 2026-07-28
        finally:
            listener.close()
            self.open.discard(listener)
            self._wake.pop(listener, None)
            n = self._per_client.get(client, 0) - 1
            if n > 0:
                self._per_client[client] = n
            else:
                self._per_client.pop(client, None)
        return resp

    async def _run(self, request: web.Request, resp: web.StreamResponse,
                   listener: ListenSession, stream: stateless.Listen, ack: bytes,
                   wake: asyncio.Event) -> None:
        """Write the stream: the acknowledgement, then frames and keepalives until it
        overflows (abrupt end), the client goes, or it ends with its result."""
        lim = self.limits
        frames = stream.frames
        async with asyncio.timeout(lim.write_timeout):
            await resp.write(sse_event(None, ack))
        idle = 0.0
        tick = min(lim.keepalive, 1.0)
        while True:
            if frames:
                data = b"".join(sse_event(None, f) for f in frames)
                frames.clear()
                async with asyncio.timeout(lim.write_timeout):
                    await resp.write(data)
                continue
            if stream.overflowed:
                _log.warning("mcp.serve.listen.overflow",
                             subscription=str(stream.request_id)[:32])
                break  # abrupt end: the client re-listens and re-reads
            if stream.exhausted(bool(listener.subscriptions)) or self._stopping:
                async with asyncio.timeout(lim.write_timeout):
                    await resp.write(sse_event(None, stream.result()))
                break
            transport = request.transport
            if transport is None or transport.is_closing():
                break  # the client went away
            wake.clear()
            try:
                async with asyncio.timeout(tick):
                    await wake.wait()
                idle = 0.0
            except TimeoutError:
                idle += tick
                if idle >= lim.keepalive:
                    idle = 0.0
                    async with asyncio.timeout(lim.write_timeout):
                        await resp.write(b": keepalive\n\n")
