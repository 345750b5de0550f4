"""The self-MCP over the real subagent tree: `Supervisor` children (re-exec'd
agentd processes with playback intelligence), driven by the official SDK client
through `selfmcp.serve(config, ...)` -- the entry `agentd --serve-mcp` uses."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

try:  # the official MCP Python SDK: a real peer (test dependency)
    from mcp import Client
except ImportError:  # pragma: no cover
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("the official MCP Python SDK (mcp) is not installed", allow_module_level=True)
from tree_helpers import make_config

from agentd.config import parse_serve
from agentd.tree import selfmcp
from agentd.tree.supervisor import Supervisor

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


async def test_sync_and_async_spawn_with_subscription(tmp_path):
    config = make_config(tmp_path, serve=parse_serve("http://127.0.0.1:0", None, None, None,
                                                     None))
    got: list[str] = []
    arrived = asyncio.Event()

    async def on_message(msg):
        if getattr(msg, "method", None) == "notifications/resources/updated":
            got.append(str(msg.params.uri))
            arrived.set()

    async with Supervisor(config, run_id="r") as sup, \
            selfmcp.serve(config, run_id="r", backend=sup) as runner, \
            Client(runner.url, mode="legacy", message_handler=on_message) as c:
        r = await c.call_tool("subagent.spawn", {"instruction": "say ok"})
        sc = r.structured_content
        assert not r.is_error and sc["handle"] == "served.1" and sc["done"] is True
        assert sc["status"] == "completed" and json.loads(sc["result"]) == {"ok": True}
        assert r.content[0].text == sc["result"]

        r = await c.call_tool("subagent.spawn", {"instruction": "say ok later", "async": True})
        handle = r.structured_content["handle"]
        assert handle == "served.2"
        uri = f"agent://subagent/{handle}"
        await c.subscribe_resource(uri)  # running, or already terminal: fires either way
        async with asyncio.timeout(60):
            await arrived.wait()
        assert got == [uri]
        body = json.loads((await c.read_resource(uri)).contents[0].text)
        assert body["handle"] == handle and body["done"] is True and json.loads(body["result"]) == {"ok": True}
        status = json.loads((await c.read_resource("agent://status")).contents[0].text)
        assert status["spawns"]["spawned"] >= 2

        r = await c.call_tool("subagent.spawn", {"instruction": "x", "tool_scope": ["nope"]})
        assert r.is_error and r.content[0].text.startswith("spawn refused: ")
