"""How many POSTs one model-visible tool call costs a server that keeps faulting.

    python benchmarks/bench_fault_posts.py

A misbehaving MCP server on loopback (aiohttp; it answers the handshake and
``tools/list``, then faults every ``tools/call``) and agentd's ``Toolbox``,
the root's call path (the broker's calls use the same client).  For each
fault, one ``Toolbox.call`` (what the agent loop makes of one tool call the
model asked for) and the number of ``tools/call`` POSTs the server read:

* ``503``   -- HTTP 503 without Retry-After (the fault "proves not processed":
  re-sent by the policy);
* ``reset`` -- the connection reset after the request was read (it may have
  run: a non-idempotent call must not be re-sent);
* ``500``   -- HTTP 500 (re-sent for idempotent requests only).

Backoff waits are shortened (``RetryPolicy`` with millisecond delays); the
count does not depend on them.  Prints one JSON line per fault.  Figures
only; nothing asserts.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

from aiohttp import web

from agentd.config.model import ServerSpec
from agentd.errors import AgentdError
from agentd.mcp import RetryPolicy, Toolbox

TOOL = {"name": "t", "inputSchema": {"type": "object"}}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Faulting:
    """A deliberately misbehaving MCP endpoint: every tools/call gets ``fault``."""

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.calls = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=405)
        msg = json.loads(await request.read())
        method = msg.get("method")
        if "id" not in msg:
            return web.Response(status=202)
        if method == "initialize":
            return self._result(msg, {"protocolVersion": "2025-11-25", "capabilities":
                                      {"tools": {}}, "serverInfo": {"name": "f", "version": "0"}})
        if method == "tools/list":
            return self._result(msg, {"tools": [TOOL]})
        if method == "tools/call":
            self.calls += 1
            if self.fault == "reset":
                assert request.transport is not None
                request.transport.abort()
                return web.Response(status=200)
            return web.Response(status=int(self.fault), text="no")
        if method == "ping":
            return self._result(msg, {})
        return web.Response(status=400, text="Bad Request: Missing session ID")

    @staticmethod
    def _result(msg: dict, result: dict) -> web.Response:
        return web.json_response({"jsonrpc": "2.0", "id": msg["id"], "result": result})


async def one(fault: str) -> dict[str, Any]:
    srv = Faulting(fault)
    app = web.Application()
    app.router.add_route("*", "/mcp", srv.handle)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    port = _port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    policy = RetryPolicy(base=0.001, cap=0.001, reconnect_base=0.001, reconnect_cap=0.01,
                         reconnect_wait=5)
    outcome = "answer"
    try:
        async with Toolbox([ServerSpec(name="f", url=f"http://127.0.0.1:{port}/mcp",
                                       required=False)],
                           ping_interval=None, policy=policy) as tb:
            try:
                obs = await tb.call("f__t", {})
                outcome = "observation" + (" (error)" if obs.is_error else "")
            except AgentdError as exc:
                outcome = type(exc).__name__
    finally:
        await runner.cleanup()
    return {"bench": "fault_posts", "fault": fault, "posts": srv.calls, "outcome": outcome}


async def main() -> None:
    for fault in ("503", "reset", "500"):
        print(json.dumps(await one(fault)), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
