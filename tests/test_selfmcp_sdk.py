"""The self-MCP (spec §2) driven by the official MCP Python SDK client over Streamable HTTP."""

from __future__ import annotations

import asyncio
import os

import jsonschema_rs
import pytest

try:  # the official MCP Python SDK: a real peer (test dependency)
    from mcp import Client
    from mcp.shared.exceptions import MCPError
except ImportError:  # pragma: no cover
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("the official MCP Python SDK (mcp) is not installed", allow_module_level=True)

from agentd import __version__
from agentd.mcp.http_server import serve
from agentd.tree.selfmcp import TOOL_SCHEMAS, SelfMCP

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SPAWN_SCHEMA = {
    "type": "object",
    "properties": {
        "instruction": {"type": "string"},
        "output_contract": {"type": "string"},
        "tool_scope": {"type": "array", "items": {"type": "string"}},
        "async": {"type": "boolean", "default": False},
        "warm": {"type": "boolean", "default": False},
    },
    "required": ["instruction"],
}


@pytest.fixture
async def served():
    runner = await serve(SelfMCP(run_id="run-42", mode="task"), port=0)
    yield runner
    await runner.stop()


async def test_handshake_tools_and_errors(served):
    async with Client(served.url, mode="legacy") as c:
        assert c.protocol_version == "2025-11-25"
        caps = c.session.initialize_result.capabilities.model_dump(exclude_none=True)
        assert caps == {"tools": {}, "resources": {"subscribe": True}}
        assert c.server_info.name == "agentd" and c.server_info.version == __version__

        tools = (await c.list_tools()).tools
        assert [x.name for x in tools] == ["status", "subagent.spawn", "subagent.send",
                                           "subagent.status", "subagent.cancel"]
        by_name = {x.name: x for x in tools}
        assert by_name["subagent.spawn"].input_schema == SPAWN_SCHEMA
        for x in tools:
            assert x.input_schema == TOOL_SCHEMAS[x.name] and x.description
            assert jsonschema_rs.meta.is_valid(x.input_schema)
            jsonschema_rs.Draft202012Validator(x.input_schema)

        r = await c.call_tool("status", {})
        assert not r.is_error
        body = r.structured_content
        assert body["run_id"] == "run-42" and body["mode"] == "task"
        assert body["version"] == __version__ and body["pid"] == os.getpid()
        assert isinstance(body["uptime_ms"], int)

        r = await c.call_tool("subagent.spawn", {"instruction": "do it"})
        assert r.is_error and r.content[0].text == \
            "spawn refused: subagents are not available in this build"
        r = await c.call_tool("subagent.status", {"handle": "served.1"})
        assert r.is_error and "unknown handle" in r.content[0].text

        res = await c.list_resources()
        assert [str(x.uri) for x in res.resources] == ["agent://status"]
        read = await c.read_resource("agent://status")
        item = read.contents[0]
        assert item.mime_type == "application/json"
        import json
        status = json.loads(item.text)
        assert status["run_id"] == "run-42" and "spawns" in status

        with pytest.raises(MCPError) as e:
            await c.read_resource("agent://subagent/served.7")
        assert e.value.error.code == -32002
        assert e.value.error.data == {"uri": "agent://subagent/served.7"}
        with pytest.raises(MCPError) as e:
            await c.call_tool("shell.exec", {})
        assert e.value.error.code == -32601
        with pytest.raises(MCPError) as e:
            await c.call_tool("subagent.spawn", {"instruction": 42})
        assert e.value.error.code == -32602
        with pytest.raises(MCPError) as e:
            await c.call_tool("subagent.send", {"handle": "served.1"})
        assert e.value.error.code == -32602

        assert (await c.subscribe_resource("agent://subagent/served.1")) is not None
        assert (await c.unsubscribe_resource("agent://subagent/served.1")) is not None
        await c.send_ping()


async def test_auto_mode_probe_is_answered(served):
    """The SDK's default mode probes server/discover first: answered, so it stays at
    2026-07-28 (the stateless revision: tests/test_selfmcp_2026_sdk.py)."""
    async with Client(served.url) as c:
        assert c.protocol_version == "2026-07-28"
        assert (await c.call_tool("status", {})).structured_content["run_id"] == "run-42"


async def test_many_sdk_clients_at_once(served):
    async def one(i):
        async with Client(served.url, mode="legacy") as c:
            return (await c.call_tool("status", {})).structured_content["pid"]

    pids = await asyncio.gather(*(one(i) for i in range(8)))
    assert set(pids) == {os.getpid()}
