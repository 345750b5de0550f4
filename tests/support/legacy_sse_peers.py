"""Small hostile MCP peers (they misbehave on purpose) for the HTTP+SSE transport
and the harness conventions, on a real loopback socket (aiohttp.web).

:func:`hostile_sse` serves, at ``/sse``, the HTTP+SSE transport of 2024-11-05
gone wrong in one of two ways (``mode``):

* ``"origin"``: the ``endpoint`` event names another origin
  (``http://127.0.0.2:PORT/messages``); any POST that arrives is counted.
* ``"flood"``: a well-formed endpoint and ``initialize`` answer, then every
  other request is answered on the stream with one ``message`` event of
  ``flood`` bytes.

:func:`bridged_like` behaves exactly as inspect's bridged MCP server does
(inspect_ai's ``sandbox_agent_bridge``; see docs/harnesses.md): JSON answers
only, revision 2025-03-26, HTTP 405 on GET, and -32601 with HTTP 200 to
anything but ``initialize``, ``tools/list`` and ``tools/call`` (so
``server/discover`` gets -32601).  It has one tool, ``add{a, b}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Run ``app`` on a free loopback port; yields ``http://127.0.0.1:PORT``."""
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _result(rid: Any, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()


def hostile_sse(mode: str, *, flood: int = 0) -> tuple[web.Application, dict[str, int]]:
    """The app and its counters (``posts``)."""
    seen = {"posts": 0}
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        port = request.url.port
        where = (f"http://127.0.0.2:{port}/messages" if mode == "origin"
                 else "/messages?session_id=1")
        await resp.write(f"event: endpoint\ndata: {where}\n\n".encode())
        with contextlib.suppress(ConnectionResetError):
            while body := await queue.get():  # b"": the server is shutting down
                await resp.write(b"event: message\ndata: " + body + b"\n\n")
        return resp

    async def post(request: web.Request) -> web.Response:
        seen["posts"] += 1
        msg = await request.json()
        if "id" in msg and msg.get("method") == "initialize":
            queue.put_nowait(_result(msg["id"], {
                "protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile-sse", "version": "0"}}))
        elif "id" in msg:
            queue.put_nowait(_result(msg["id"], {"tools": [], "pad": "x" * flood}))
        return web.Response(status=202)

    async def shutdown(_: web.Application) -> None:
        queue.put_nowait(b"")

    app = web.Application()
    app.on_shutdown.append(shutdown)
    app.router.add_get("/sse", stream)
    app.router.add_post("/messages", post)
    return app, seen


def bridged_like() -> tuple[web.Application, dict[str, list[str]]]:
    """The app and what it was asked (``methods``, ``gets``)."""
    seen: dict[str, list[str]] = {"methods": [], "gets": []}
    tool = {"name": "add", "description": "Add two numbers.",
            "inputSchema": {"type": "object", "properties": {"a": {"type": "number"},
                                                              "b": {"type": "number"}},
                            "required": ["a", "b"]}}

    async def post(request: web.Request) -> web.Response:
        msg = await request.json()
        method = msg.get("method", "")
        seen["methods"].append(method)
        if "id" not in msg:
            return web.Response(status=202)
        rid = msg["id"]
        if method == "initialize":
            body = _result(rid, {"protocolVersion": "2025-03-26",
                                 "capabilities": {"tools": {"listChanged": False}},
                                 "serverInfo": {"name": "bridged-like", "version": "0"}})
        elif method == "tools/list":
            body = _result(rid, {"tools": [tool]})
        elif method == "tools/call":
            args = msg["params"]["arguments"]
            body = _result(rid, {"content": [{"type": "text",
                                              "text": str(args["a"] + args["b"])}]})
        else:
            body = json.dumps({"jsonrpc": "2.0", "id": rid, "error": {
                "code": -32601, "message": f"Method not found: {method}"}}).encode()
        return web.Response(body=body, content_type="application/json")

    async def get(request: web.Request) -> web.Response:
        seen["gets"].append(request.path)
        return web.Response(status=405)

    app = web.Application()
    app.router.add_post("/mcp", post)
    app.router.add_get("/mcp", get)
    return app, seen
