"""The served endpoint's answers: plain statuses, JSON-RPC errors, SSE frames.

What every concern of ``agentd.mcp.server.http.server`` answers with, in one place,
so the guard, the sessions, the streams and the stateless exchanges write the
same bytes: a plain-text status (optionally closing the connection: its input
is not trusted), a JSON-RPC error body, one SSE event, and a POST answered as
an SSE stream when the handler sends messages ahead of its response.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from agentd.errors import RPCError
from agentd.wire import codec

__all__ = ["JSON", "SSE_HEADERS", "PostStream", "closing", "plain", "rpc_error", "sse_event"]

JSON: Final = {"Content-Type": "application/json"}
SSE_HEADERS: Final = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                      "X-Accel-Buffering": "no"}


def plain(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=text, headers=headers)


def closing(status: int, text: str) -> web.Response:
    """An answer after which the connection is closed (its input is not trusted)."""
    resp = plain(status, text)
    resp.force_close()
    return resp


def rpc_error(status: int, exc: RPCError) -> web.Response:
    return web.Response(status=status, body=codec.encode_error(exc.id, exc.code, exc.message,
                                                               exc.data), headers=JSON)


def sse_event(event_id: int | None, data: bytes) -> bytes:
    head = b"id: %d\nevent: message\ndata: " % event_id if event_id is not None \
        else b"event: message\ndata: "
    return head + data + b"\n\n"


class PostStream:
    """A POST answered as SSE: messages the handler sends first, then the response."""

    __slots__ = ("request", "resp")

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.resp: web.StreamResponse | None = None

    async def emit(self, data: bytes) -> None:
        if self.resp is None:
            self.resp = web.StreamResponse(headers=SSE_HEADERS)
            await self.resp.prepare(self.request)
        await self.resp.write(sse_event(None, data))

    async def finish(self, data: bytes) -> web.StreamResponse:
        await self.emit(data)
        assert self.resp is not None
        await self.resp.write_eof()
        return self.resp
