"""The HTTP+SSE client transport (MCP 2024-11-05) against the official MCP Python
SDK's ``sse_app()`` (tests/support/sdk_mcpserver.py ``--sse``), through the real CLI and
the client; hostile SSE peers refused with the bound named; and the harness
convention: a server that answers ``server/discover`` with -32601 over HTTP 200,
speaks 2025-03-26 and refuses GET works without a warning-level line."""

from __future__ import annotations

import json

import pytest
from agentd_proc import run_agentd
from legacy_sse_peers import bridged_like, hostile_sse, serve
from peers import python_peer, require_modules
from waiting import until

from agentd.config.model import ServerSpec, StreamBounds
from agentd.errors import HandshakeError, ToolFault
from agentd.mcp.client.facade import MCPClient

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sdk_sse():
    require_modules("mcp", "uvicorn", "starlette")
    with python_peer("sdk_mcpserver.py", "--sse") as server:
        yield f"http://127.0.0.1:{server.port}/sse"


def _playback(path, tool: str, args: dict, expect: str):
    path.write_text(json.dumps({"playback": 1, "scripts": [{"name": "s", "match": "go", "turns": [
        {"tool_calls": [{"name": tool, "arguments": args}]},
        {"expect": expect, "content": f"got {expect}"}]}]}))
    return path


async def test_the_cli_calls_a_tool_of_an_sse_server(tmp_path, agentd_bin, sdk_sse):
    conf = tmp_path / "agentd.toml"
    conf.write_text(f'[[mcp_servers]]\nname = "sdk"\nurl = "{sdk_sse}"\ntransport = "sse"\n')
    script = _playback(tmp_path / "p.json", "sdk__echo", {"text": "over sse"}, "over sse")
    done = await run_agentd(agentd_bin, ["--instruction", "go", "--config", str(conf),
                                         "--intelligence", f"playback:{script}"])
    assert done.rc == 0, done.stderr[-3000:]
    assert done.result["result"] == "got over sse"
    (hs,) = done.events("mcp.handshake")
    assert (hs["protocol_version"], hs["negotiated_by"]) == ("2024-11-05", "initialize")
    assert not done.events("mcp.discover.fallback")  # 2024-11-05 has no server/discover


async def test_the_client_lists_calls_and_reads_over_sse(sdk_sse):
    spec = ServerSpec(name="sdk", url=sdk_sse, transport="sse")
    async with MCPClient(spec, ping_interval=None) as c:
        assert (c.protocol_version, c.era) == ("2024-11-05", "legacy-sse")
        assert "echo" in {t.name for t in await c.list_tools()}
        obs = await c.call_tool("echo", {"text": "hello"})
        assert (obs.text, obs.is_error) == ("hello", False)
        assert (await c.call_tool("fail", {})).is_error
        assert (await c.read_resource("mem://notes/1")).text == "note one"


async def test_a_dropped_stream_is_reconnected(tmp_path):
    require_modules("mcp", "uvicorn", "starlette")
    server = python_peer("sdk_mcpserver.py", "--sse").start()
    try:
        spec = ServerSpec(name="sdk", url=f"http://127.0.0.1:{server.port}/sse", transport="sse")
        async with MCPClient(spec, ping_interval=None) as c:
            assert (await c.call_tool("echo", {"text": "one"})).text == "one"
            first = c.generation
            server.kill()  # the stream, and the session with it, is gone
            await until(lambda: not c.connected, what="the lost stream noticed")
            server.start()  # the same port: the fault policy's reconnect finds it
            assert (await c.call_tool("echo", {"text": "two"})).text == "two"
            assert c.generation > first
    finally:
        server.stop()


async def test_an_endpoint_on_another_origin_is_refused():
    app, seen = hostile_sse("origin")
    async with serve(app) as base:
        spec = ServerSpec(name="bad", url=f"{base}/sse", transport="sse")
        with pytest.raises(HandshakeError, match="another origin") as info:
            async with MCPClient(spec, ping_interval=None, init_timeout=5):
                pass
    assert "origin of the declared url" in str(info.value)
    assert seen["posts"] == 0  # nothing was sent anywhere


async def test_an_oversized_event_drops_the_stream_naming_the_bound():
    app, _ = hostile_sse("flood", flood=64 * 1024)
    async with serve(app) as base:
        spec = ServerSpec(name="flood", url=f"{base}/sse", transport="sse")
        # the answer to tools/list (the catalogue read at connect) is past the bound
        with pytest.raises(ToolFault, match="sse_event_bytes"):
            async with MCPClient(spec, ping_interval=None, init_timeout=5,
                                 stream_bounds=StreamBounds(event_bytes=16 * 1024)) as c:
                await c.list_tools()


async def test_a_streamable_http_server_declared_sse_is_named(sdk_sse):
    require_modules("mcp", "uvicorn", "starlette")
    with python_peer("sdk_mcpserver.py", "--legacy-only") as server:
        spec = ServerSpec(name="sdk", url=server.url, transport="sse")
        with pytest.raises(HandshakeError, match='transport = "streamable-http"'):
            async with MCPClient(spec, ping_interval=None, init_timeout=5):
                pass


async def test_a_bridged_like_server_works_without_a_warning(tmp_path, agentd_bin):
    app, seen = bridged_like()
    async with serve(app) as base:
        conf = tmp_path / "agentd.toml"
        conf.write_text(f'[[mcp_servers]]\nname = "host"\nurl = "{base}/mcp"\n')
        script = _playback(tmp_path / "p.json", "host__add", {"a": 2, "b": 3}, "5")
        done = await run_agentd(agentd_bin, ["--instruction", "go", "--config", str(conf),
                                             "--intelligence", f"playback:{script}"])
    assert done.rc == 0, done.stderr[-3000:]
    assert done.result["result"] == "got 5"
    assert done.events("mcp.handshake")[0]["protocol_version"] == "2025-03-26"
    assert seen["methods"][0] == "server/discover" and "tools/call" in seen["methods"]
    warned = [e for e in done.logs if e.get("level") in ("warning", "error", "critical")]
    assert warned == []
