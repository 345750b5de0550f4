"""`GatedTools`: an official-SDK MCP server (a real peer) whose tools wait for the test.

    async with GatedTools() as srv:
        ... agentd --mcp gated={srv.url} ...
        await srv.arrived["charge"].wait()   # the call reached the server
        srv.calls["charge"]                  # how many times it was made
        srv.release.set()                    # every waiting call answers

The SDK's `MCPServer` over Streamable HTTP at ``http://127.0.0.1:PORT/mcp``, served by
uvicorn in the test's own event loop (so a tool waits on the test's `asyncio.Event`).
A restarted agentd connects to the same server, which keeps its counts.

tools
    ``charge{amount}`` (no annotations: it has an effect, a client never re-sends it),
    ``lookup{key}`` (``idempotentHint: true``: safe to re-send), both waiting for
    `release`; ``echo{text}`` answers at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from peers import free_port
from waiting import until


class _Server(uvicorn.Server):
    def capture_signals(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # the test process's signals stay pytest's


class GatedTools:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.arrived = {name: asyncio.Event() for name in ("charge", "lookup", "echo")}
        self.release = asyncio.Event()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._server: _Server | None = None
        self._task: asyncio.Task[Any] | None = None

    async def _gated(self, name: str, value: str) -> str:
        self.calls[name] += 1
        self.arrived[name].set()
        await self.release.wait()
        return f"{name} {value} done (call {self.calls[name]})"

    def _app(self) -> Any:
        mcp = MCPServer("gated-tools", version="1.0")

        @mcp.tool(description="Charge an amount (an effect: never re-sent).")
        async def charge(amount: int) -> str:
            return await self._gated("charge", str(amount))

        @mcp.tool(description="Look a key up (idempotent).",
                  annotations=ToolAnnotations(idempotentHint=True))
        async def lookup(key: str) -> str:
            return await self._gated("lookup", key)

        @mcp.tool(description="Echo the text back.")
        def echo(text: str) -> str:
            self.calls["echo"] += 1
            self.arrived["echo"].set()
            return f"echo: {text}"

        return mcp.streamable_http_app()

    async def __aenter__(self) -> GatedTools:
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="on")
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve())
        server, task = self._server, self._task
        await until(lambda: server.started or task.done(), what="the MCP server's start")
        if task.done():
            await task  # its failure, said
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        assert self._server is not None and self._task is not None
        self._server.should_exit = True
        self._server.force_exit = True  # calls of a killed agentd may still be open
        await self._task
