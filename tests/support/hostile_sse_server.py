"""Hostile SSE peers that misbehave ON PURPOSE (issue 28): a tiny MCP server
(Streamable HTTP, 2025-11-25) and a chat-completions gateway, on aiohttp on
loopback, for tests and benchmarks that run the real `agentd` against them.

The MCP server answers the handshake and `tools/list` properly, then:

* `flood`: answers `tools/call` with one SSE event that never ends -- `data:`
  lines of `line_bytes` each, forever, no blank line -- until the client drops
  the stream;
* `cut`: answers `tools/call` with a priming event (`id: e1`, an absurd
  `retry:`, empty data) and cuts the stream; a `GET` carrying
  `Last-Event-ID` (the client's resumption) gets the real answer;
* `bigjson`: answers `tools/call` with a chunked JSON body that never ends;
* `bigerror`: answers `tools/call` with HTTP 400 and a chunked JSON body that
  never ends (what a stateless client reads for the JSON-RPC error);
* with `get_flood`, the standalone GET stream is one endless event too.

The gateway streams one endless event to a `stream: true` completion, and
answers any other with a chunked JSON body that never ends.

Each peer records what a test asserts on as events, never timings: the
baseline RSS of the agentd process (`pid`, set by the test) when it listed the
tools, its peak RSS (VmHWM, from /proc) at the moment it dropped the flood,
and the resumption GET (`resumed`, with the Last-Event-ID and the monotonic
time of the cut and of the GET, for the benchmark).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

PROTOCOL = "2025-11-25"
SESSION = "hostile-session-1"


def proc_kib(pid: int, field: str) -> int:
    """A /proc/PID/status field in KiB (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


class _Peer:
    """The loopback listener both hostile peers share."""

    def __init__(self) -> None:
        self.pid = 0  # the agentd process measured (set by the test once started)
        self.baseline_kib = 0  # its VmRSS before the flood
        self.peak_kib = 0  # its VmHWM when it dropped the flood
        self.flood_sent = 0  # bytes of the endless event written
        self.dropped = asyncio.Event()  # the client gave up on the flood
        self._runner: web.AppRunner | None = None
        self.port = 0

    def routes(self, app: web.Application) -> None:
        """Each peer adds its own."""

    async def __aenter__(self) -> Any:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]  # the port the OS gave
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _measure_baseline(self) -> None:
        if self.pid:
            self.baseline_kib = proc_kib(self.pid, "VmRSS")

    async def _flood(self, request: web.Request, line: bytes,
                     ctype: str = "text/event-stream") -> web.StreamResponse:
        """One event (or body) that never ends: `line` again and again until the
        client drops it."""
        resp = web.StreamResponse(headers={"Content-Type": ctype, "Cache-Control": "no-cache"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            while True:
                await resp.write(line)
                self.flood_sent += len(line)
        except (ConnectionError, RuntimeError):
            pass  # the client dropped the stream: what the bound should make it do
        if self.pid:
            try:
                self.peak_kib = proc_kib(self.pid, "VmHWM")
            except (OSError, AssertionError):
                pass  # already gone: the test reports it
        self.dropped.set()
        return resp


class HostileMCP(_Peer):
    """The MCP server (see the module docstring).  `retry` is the `retry:` value
    `cut` sends; `line_bytes` the size of each `data:` line `flood` sends."""

    def __init__(self, *, retry: bytes = b"100000000000000000000",
                 line_bytes: int = 256 * 1024, get_flood: bool = False) -> None:
        super().__init__()
        self.retry = retry
        self.get_flood = get_flood
        self.line = b"data: " + b"x" * (line_bytes - 7) + b"\n"
        self.resumed = asyncio.Event()
        self.last_event_id: str | None = None
        self._held: dict[str, Any] = {}  # the cut call's JSON-RPC id, answered on resumption

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/mcp", self._post)
        app.router.add_get("/mcp", self._get)
        app.router.add_delete("/mcp", self._delete)

    @staticmethod
    def _result(rid: Any, result: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    async def _post(self, request: web.Request) -> web.StreamResponse:
        msg = json.loads(await request.read())
        method, rid = msg.get("method"), msg.get("id")
        headers = {"Mcp-Session-Id": SESSION}
        if rid is None:  # a notification or a response
            return web.Response(status=202, headers=headers)
        if method == "initialize":
            return web.json_response(self._result(rid, {
                "protocolVersion": PROTOCOL, "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile-sse", "version": "1"}}), headers=headers)
        if method == "tools/list":
            self._measure_baseline()
            schema = {"type": "object"}
            return web.json_response(self._result(rid, {"tools": [
                {"name": "flood", "description": "floods", "inputSchema": schema},
                {"name": "cut", "description": "cuts", "inputSchema": schema}]}),
                headers=headers)
        if method == "ping":
            return web.json_response(self._result(rid, {}), headers=headers)
        if method == "tools/call":
            name = (msg.get("params") or {}).get("name")
            if name == "flood":
                return await self._flood(request, self.line)
            if name == "cut":
                return await self._cut(request, rid)
            if name == "bigjson":
                return await self._bigjson(request, rid)
            if name == "bigerror":
                return await self._bigjson(request, rid, status=400)
        return web.json_response({"jsonrpc": "2.0", "id": rid, "error": {
            "code": -32601, "message": f"no method {method}"}}, headers=headers)

    async def _cut(self, request: web.Request, rid: Any) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        self._held["e1"] = rid
        await resp.write(b"id: e1\nretry: " + self.retry + b"\ndata:\n\n")
        await resp.write_eof()
        return resp

    async def _bigjson(self, request: web.Request, rid: Any,
                       status: int = 200) -> web.StreamResponse:
        resp = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()  # no Content-Length to refuse it by
        await resp.prepare(request)
        head = json.dumps({"jsonrpc": "2.0", "id": rid}).encode()[:-1]
        try:
            await resp.write(head + b', "result": {"content": [{"type": "text", "text": "')
            while True:
                await resp.write(b"z" * 65536)
                self.flood_sent += 65536
        except (ConnectionError, RuntimeError):
            pass
        self.dropped.set()
        return resp

    async def _get(self, request: web.Request) -> web.StreamResponse:
        last = request.headers.get("Last-Event-ID")
        if last is None and self.get_flood:
            return await self._flood(request, self.line)
        if last is None or last not in self._held:
            return web.Response(status=405)  # no standalone GET stream offered
        self.last_event_id = last
        self.resumed.set()
        rid = self._held.pop(last)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        answer = self._result(rid, {"content": [{"type": "text", "text": "resumed"}],
                                    "isError": False})
        await resp.write(b"id: e2\ndata: " + json.dumps(answer).encode() + b"\n\n")
        await resp.write_eof()
        return resp

    async def _delete(self, request: web.Request) -> web.Response:
        return web.Response(status=200)


class HostileGateway(_Peer):
    """A chat-completions gateway whose streamed answer is one endless event."""

    def __init__(self, *, line_bytes: int = 256 * 1024) -> None:
        super().__init__()
        self.line = b"data: " + b"y" * (line_bytes - 7) + b"\n"
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._post)

    async def _post(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        self.requests += 1
        self._measure_baseline()
        if not body.get("stream"):
            return await self._flood(request, b'{"choices": [{"message": {"content": "'
                                     + self.line, "application/json")
        return await self._flood(request, self.line)
