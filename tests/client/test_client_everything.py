"""agentd's client against @modelcontextprotocol/server-everything (npm, streamable HTTP)."""

from __future__ import annotations

import asyncio

import pytest
from peers import PeerProcess, ensure_npm_peers, free_port, npm_env

from agentd.config.model import ServerSpec
from agentd.mcp import MCPClient, Toolbox


@pytest.fixture(scope="module")
def everything():
    bin_dir = ensure_npm_peers("mcp-server-everything", "node")
    port = free_port()
    peer = PeerProcess([str(bin_dir / "mcp-server-everything"), "streamableHttp"], port,
                       env=npm_env({"PORT": str(port)}))
    with peer:
        yield peer


async def test_everything_catalogue_and_calls(everything):
    async with MCPClient(ServerSpec(name="everything", url=everything.url), run_id="r",
                         ping_interval=None) as c:
        assert c.protocol_version == "2025-11-25"
        assert c.capabilities.resources_subscribe and c.capabilities.tools_list_changed
        assert c.instructions  # kept (untrusted) for the prompt material
        assert {"echo", "get-sum", "get-structured-content"} <= set(c.tools)
        assert (await c.call_tool("echo", {"message": "hi"})).text == "Echo: hi"
        sc = await c.call_tool("get-structured-content", {"location": "New York"})
        assert not sc.is_error and isinstance(sc.structured, dict)  # validated vs outputSchema
        bad = await c.call_tool("get-sum", {"a": "one", "b": 2})
        assert bad.is_error and "input schema" in bad.text  # never sent
        assert c.resources and all(r.uri for r in c.resources)
        assert any("{" in t.uriTemplate for t in c.resource_templates)
        text = await c.read_resource(c.resources[0].uri)
        assert text.text and not text.is_error
        blob = await c.read_resource("demo://resource/dynamic/blob/1")
        assert not blob.is_error and blob.content[0].blob
        # server-everything answers an unknown URI with a JSON-RPC error; it must
        # stay a fault or an observation, never look like a resource body
        try:
            missing = await c.read_resource("demo://resource/nope")
        except Exception as exc:
            assert type(exc).__name__ == "ToolFault"
        else:
            assert missing.is_error


async def test_everything_subscription_notify_then_read(everything):
    async with Toolbox([ServerSpec(name="everything", url=everything.url)],
                       ping_interval=None) as tb:
        uri = tb.resources[0].uri
        assert await tb.subscribe(uri)
        await tb.call("everything__toggle-subscriber-updates", {})
        async with asyncio.timeout(30):
            server, got, obs = await tb.next_update()
        assert (server, got) == ("everything", uri)
        assert obs.text and not obs.is_error
        await tb.call("everything__toggle-subscriber-updates", {})
