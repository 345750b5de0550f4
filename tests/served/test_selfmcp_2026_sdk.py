"""The official MCP Python SDK 2.3 in ``mode="auto"`` drives the self-MCP at 2026-07-28.

A real Supervisor (real subagent processes, scripted intelligence) behind the
self-MCP on loopback; the SDK ``Client`` negotiates by ``server/discover``, stays
stateless, spawns sync and async, ``Client.listen()``s on the async run's
``agent://subagent/{handle}``, gets exactly one update (tagged with its
subscription id), then reads the distillate.  ``mode="legacy"`` is covered,
unchanged, by tests/tree/test_tree_selfmcp_sdk.py and tests/served/test_selfmcp_sdk.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

import pytest
from peers import free_port
from tree_helpers import make_config, precompile

try:  # the official MCP Python SDK: a real peer (test dependency)
    from mcp import Client
    from mcp.client.subscriptions import ResourceUpdated
    from mcp.shared.exceptions import MCPError
except ImportError:  # pragma: no cover
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("the official MCP Python SDK (mcp) is not installed", allow_module_level=True)

from agentd import __version__
from agentd.app.compose import open_supervisor
from agentd.app.serving import serve_self_mcp
from agentd.config.model import ServeSpec

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


@contextlib.asynccontextmanager
async def served(tmp_path):
    cfg = make_config(tmp_path)
    port = free_port()
    spec = ServeSpec(url=f"http://127.0.0.1:{port}", scheme="http", host="127.0.0.1", port=port)
    async with open_supervisor(cfg) as sup:
        runner = await serve_self_mcp(spec, sup)
        try:
            yield runner
        finally:
            await runner.stop()


async def test_auto_mode_discover_spawn_listen_read(tmp_path):
    async with served(tmp_path) as runner, Client(runner.url) as c:
        assert c.protocol_version == "2026-07-28"
        assert c.session.initialize_result is None
        disc = c.session.discover_result
        assert "2026-07-28" in disc.supported_versions and "2025-11-25" in disc.supported_versions
        assert disc.capabilities.model_dump(exclude_none=True) == {"tools": {}, "resources": {"subscribe": True}}
        assert c.server_info.name == "agentd" and c.server_info.version == __version__

        tools = await c.list_tools()
        assert [t.name for t in tools.tools] == ["status", "subagent.spawn", "subagent.send",
                                                  "subagent.status", "subagent.cancel"]
        assert tools.ttl_ms == 3_600_000 and tools.cache_scope == "public"

        r = await c.call_tool("subagent.spawn", {"instruction": "hello"})
        assert not r.is_error
        assert r.structured_content == {"handle": "served.1", "status": "completed",
                                        "done": True, "partial": False,
                                        "result": '{"ok": true}'}

        r = await c.call_tool("subagent.spawn", {"instruction": "later", "async": True})
        assert r.structured_content == {"handle": "served.2", "status": "running",
                                        "done": False}
        uri = "agent://subagent/served.2"
        events = []
        async with c.listen(resource_subscriptions=[uri]) as sub:
            assert sub.honored.resource_subscriptions == [uri]
            async with asyncio.timeout(120):
                async for event in sub:  # the stream ends once its one update is out
                    events.append(event)
        assert events == [ResourceUpdated(uri=uri)]
        read = await c.read_resource(uri)
        body = json.loads(read.contents[0].text)
        assert body == {"handle": "served.2", "status": "completed", "done": True,
                        "partial": False, "result": '{"ok": true}'}
        assert read.cache_scope == "private" and read.ttl_ms > 0

        status = json.loads((await c.read_resource("agent://status")).contents[0].text)
        assert status["spawns"]["spawned"] == 2 and status["spawns"]["completed"] == 2


async def test_auto_mode_status_listen_and_errors(tmp_path):
    async with served(tmp_path) as runner, Client(runner.url) as c:
        async with c.listen(resource_subscriptions=["agent://status",
                                                    "agent://subagent/served.404"],
                            tools_list_changed=True) as sub:
            # only what is served and announced is honoured (the unlisted-URI rule)
            assert sub.honored.resource_subscriptions == ["agent://status"]
            assert not sub.honored.tools_list_changed
            r = await c.call_tool("subagent.spawn", {"instruction": "later", "async": True})
            assert r.structured_content["status"] == "running"
            async with asyncio.timeout(120):
                first = await anext(aiter(sub))
            assert first == ResourceUpdated(uri="agent://status")

        with pytest.raises(MCPError) as e:
            await c.read_resource("agent://subagent/served.404")
        assert e.value.error.code == -32602
        assert e.value.error.data == {"uri": "agent://subagent/served.404"}
        with pytest.raises(MCPError) as e:
            await c.call_tool("subagent.status", {})
        assert e.value.error.code == -32602
        r = await c.call_tool("subagent.status", {"handle": "served.404"})
        assert r.is_error and "unknown handle" in r.content[0].text
