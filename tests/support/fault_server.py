"""`FaultServer`: faults a real peer cannot be made to produce, from a tiny
in-process aiohttp server (a hostile peer written to misbehave on purpose).

A test programs it per method with the one misbehaviour it needs: garbage in an
SSE stream, the same cursor forever, session expiry, a stream cut mid-event,
unspeakable versions, a server that stops answering pings. `fault` is the
fixture that starts them and stops them after the test.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from peers import free_port

Handler = Callable[[dict, web.Request], Awaitable[Any]]
TOOL = {"name": "t", "inputSchema": {"type": "object"}}


def sse(*events: bytes) -> bytes:
    return b"".join(events)


def event(msg: dict, id_: str | None = None) -> bytes:
    head = f"id: {id_}\n".encode() if id_ else b""
    return head + b"event: message\ndata: " + orjson.dumps(msg) + b"\n\n"


class FaultServer:
    """An MCP-shaped HTTP endpoint whose answers a test programs per method."""

    def __init__(self, *, version: str = "2025-11-25", caps: dict | None = None,
                 session: str | None = "sess-1", ssl_context: Any = None) -> None:
        self.ssl_context = ssl_context
        self.version = version
        self.caps = caps if caps is not None else {"tools": {}}
        self.session = session
        self.handlers: dict[str, Handler] = {}
        self.get_handler: Handler | None = None
        self.seen: list[tuple[str, dict, dict]] = []  # (method, message, headers)
        self.deletes = 0
        self.probes = 0  # server/discover probes refused
        self.gets: list[dict] = []
        self.port = free_port()
        scheme = "https" if ssl_context is not None else "http"
        self.url = f"{scheme}://localhost:{self.port}/mcp"
        self._runner: web.AppRunner | None = None

    def methods(self) -> list[str]:
        return [m for m, _, _ in self.seen]

    def json(self, msg: dict, request_id: Any = None, **headers: str) -> web.Response:
        h = {"Mcp-Session-Id": self.session} if self.session else {}
        h.update(headers)
        return web.Response(body=orjson.dumps(msg), content_type="application/json", headers=h)

    def result(self, rid: Any, result: dict) -> web.Response:
        return self.json({"jsonrpc": "2.0", "id": rid, "result": result})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "DELETE":
            self.deletes += 1
            return web.Response(status=200)
        if request.method == "GET":
            self.gets.append(dict(request.headers))
            if self.get_handler is not None:
                return await self.get_handler({}, request)
            return web.Response(status=405)
        msg = orjson.loads(await request.read())
        method = msg.get("method", "<response>")
        if method == "server/discover" and method not in self.handlers:
            # agentd's 2026-07-28 era probe: this server predates the revision and
            # refuses it the way the SDK's 2025-11-25 transport does (no session)
            self.probes += 1
            return web.Response(status=400, text="Bad Request: Missing session ID")
        self.seen.append((method, msg, dict(request.headers)))
        handler = self.handlers.get(method)
        if handler is not None:
            out = await handler(msg, request)
            if isinstance(out, web.StreamResponse):
                return out
            return self.result(msg["id"], out)
        if "id" not in msg or "method" not in msg:
            return web.Response(status=202)
        if method == "initialize":
            return self.result(msg["id"], {"protocolVersion": self.version,
                                           "capabilities": self.caps,
                                           "serverInfo": {"name": "fault", "version": "0"}})
        if method == "tools/list":
            return self.result(msg["id"], {"tools": [TOOL]})
        if method in ("ping", "resources/subscribe"):
            return self.result(msg["id"], {})
        if method == "resources/list":
            return self.result(msg["id"], {"resources": []})
        if method == "resources/templates/list":
            return self.result(msg["id"], {"resourceTemplates": []})
        if method == "resources/read":
            uri = msg["params"]["uri"]
            return self.result(msg["id"], {"contents": [{"uri": uri, "text": "body"}]})
        if method == "tools/call":
            return self.result(msg["id"], {"content": [{"type": "text", "text": "ok"}]})
        return self.json({"jsonrpc": "2.0", "id": msg["id"],
                          "error": {"code": -32601, "message": "nope"}})

    async def start(self) -> FaultServer:
        app = web.Application()
        app.router.add_route("*", "/mcp", self.handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port,
                          ssl_context=self.ssl_context).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def fault():
    servers: list[FaultServer] = []

    async def make(**kw: Any) -> FaultServer:
        s = await FaultServer(**kw).start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        await s.stop()
