"""agentd's client against the official MCP Python SDK server (a real peer).

Servers are ``tests/support/sdk_servers.py`` (the SDK's low-level ``Server`` over
Streamable HTTP) in subprocesses on free loopback ports.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from peers import python_peer, require_modules
from waiting import until

from agentd.agent import prompt as P
from agentd.config.model import ServerSpec
from agentd.mcp import MCPClient, RequiredServerLost, Toolbox, ToolFault


@pytest.fixture(scope="module", autouse=True)
def _sdk_available():
    require_modules("mcp", "uvicorn", "starlette")


@pytest.fixture(scope="module")
def sdk_server():
    with python_peer("sdk_servers.py", "--page-size", "3") as peer:
        yield peer


@pytest.fixture(scope="module")
def sdk_json_server():
    with python_peer("sdk_servers.py", "--json") as peer:
        yield peer


def stats(peer) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{peer.port}/stats", timeout=10) as r:
        return json.loads(r.read())


def post(peer, path: str) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{peer.port}{path}", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def spec(peer, name="sdk", **kw) -> ServerSpec:
    return ServerSpec(name=name, url=peer.url, **kw)


async def test_handshake_catalogue_and_pagination(sdk_server):
    async with MCPClient(spec(sdk_server), run_id="run-1", ping_interval=None) as c:
        assert c.protocol_version == "2025-11-25"
        assert c.server_info.name == "sdk-test-server"
        assert c.instructions == "Be kind to the tools."
        assert c.capabilities.tools_list_changed and c.capabilities.resources_subscribe
        # 11 tools over pages of 3: the cursor was followed to exhaustion
        assert {"echo", "add", "fail", "weather", "slow", "whoami"} <= set(c.tools)
        assert len(c.tools) == 11
        uris = {r.uri for r in c.resources}
        assert uris == {"mem://greeting", "mem://blob", "mem://watched"}
        greeting = next(r for r in c.resources if r.uri == "mem://greeting")
        assert (greeting.mime_type, greeting.size, greeting.description) == (
            "text/plain", 5, "A friendly greeting")
        assert [t.uriTemplate for t in c.resource_templates] == ["mem://items/{id}"]


@pytest.mark.parametrize("server", ["sdk_server", "sdk_json_server"])
async def test_tool_calls(server, request):
    peer = request.getfixturevalue(server)
    async with MCPClient(spec(peer), run_id="run-42", ping_interval=None) as c:
        obs = await c.call_tool("echo", {"text": "hi"})
        assert (obs.text, obs.is_error) == ("hi", False)
        assert (await c.call_tool("add", '{"a": 2, "b": 40}')).text == "42"
        # run id in every call's _meta
        meta = json.loads((await c.call_tool("whoami")).text)
        assert meta["io.modelcontextprotocol/run-id"] == "run-42"
        # isError is an observation for the model
        fail = await c.call_tool("fail")
        assert fail.is_error and "no such file" in fail.text
        # structured output, validated against the outputSchema
        w = await c.call_tool("weather", {"city": "NYC"})
        assert w.structured == {"temperature": 22.5, "city": "NYC"}
        with pytest.raises(ToolFault) as bad:
            await c.call_tool("bad_weather")
        assert not bad.value.retryable and "outputSchema" in bad.value.message


async def test_argument_mismatch_is_an_observation_and_nothing_is_sent(sdk_server):
    async with MCPClient(spec(sdk_server), ping_interval=None) as c:
        before = stats(sdk_server)["calls"]
        obs = await c.call_tool("add", {"a": "two", "b": 2})
        assert obs.is_error and "input schema" in obs.text
        obs = await c.call_tool("echo", {})
        assert obs.is_error and "text" in obs.text
        assert (await c.call_tool("echo", "not json")).is_error
        assert stats(sdk_server)["calls"] == before


async def test_jsonrpc_error_is_a_classified_fault(sdk_server):
    async with MCPClient(spec(sdk_server), ping_interval=None) as c:
        with pytest.raises(ToolFault) as err:
            await c.call_tool("no_such_tool", {})
        assert err.value.code == -32602 and not err.value.retryable


async def test_server_requests_ping_roots_and_sampling_refused(sdk_server):
    async with MCPClient(spec(sdk_server), ping_interval=None) as c:
        assert (await c.call_tool("ask_ping")).text == "client answered ping"
        assert (await c.call_tool("ask_roots")).text == "roots=0"
        obs = await c.call_tool("ask_sampling")
        assert obs.is_error and "-32601" in obs.text
        assert stats(sdk_server)["sampling_error"] == "-32601"


async def test_resources_read_text_blob_and_missing(sdk_server):
    async with MCPClient(spec(sdk_server), ping_interval=None) as c:
        obs = await c.read_resource("mem://greeting")
        assert obs.text == "hello" and not obs.is_error
        blob = await c.read_resource("mem://blob")
        assert c.blob_bytes(blob.content[0]) == b"\x00\x01\x02"
        missing = await c.read_resource("mem://nope")
        assert missing.is_error and "mem://nope" in missing.text


async def test_subscription_notify_then_read(sdk_server):
    async with Toolbox([spec(sdk_server)], ping_interval=None) as tb:
        assert await tb.subscribe("mem://watched")
        with pytest.raises(ValueError):
            await tb.subscribe("mem://items/{id}")  # a template is never subscribed
        await asyncio.to_thread(post, sdk_server, "/update?value=v-new")
        async with asyncio.timeout(20):
            server, uri, obs = await tb.next_update()
        assert (server, uri, obs.text) == ("sdk", "mem://watched", "v-new")
        await tb.unsubscribe("mem://watched")


async def test_tools_list_changed_relists(sdk_server):
    async with Toolbox([spec(sdk_server)], ping_interval=None) as tb:
        assert not any(q.startswith("sdk__grown_") for q in tb.tools)
        grown = (await tb.call("sdk__grow")).text
        await until(lambda: f"sdk__{grown}" in tb.tools, what="re-listed tools")
        assert (await tb.call(f"sdk__{grown}")).text == grown


async def test_abandoned_call_sends_cancelled(sdk_server):
    async with MCPClient(spec(sdk_server), ping_interval=None) as c:
        before = stats(sdk_server)["cancelled"]
        with pytest.raises(ToolFault) as err:
            await c.call_tool("slow", {"seconds": 60}, time_limit=0.5)
        assert err.value.retryable
        await until(lambda: stats(sdk_server)["cancelled"] > before, what="server-side cancel")
        # cancelling the calling task is an abandonment too
        calls = stats(sdk_server)["calls"]
        task = asyncio.create_task(c.call_tool("slow", {"seconds": 60}))
        await until(lambda: stats(sdk_server)["calls"] > calls, what="the slow call in flight")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: stats(sdk_server)["cancelled"] > before + 1, what="second cancel")
        assert (await c.call_tool("echo", {"text": "still fine"})).text == "still fine"


async def test_toolbox_qualified_names_across_servers(sdk_server, sdk_json_server):
    specs = [spec(sdk_server, "a.b"), spec(sdk_json_server, "a_b")]
    async with Toolbox(specs, ping_interval=None) as tb:
        names = set(tb.tools)
        echoes = [n for n, e in tb.tools.items() if e.name == "echo"]
        assert "a_b__echo" in echoes and len(echoes) == 2  # a collision made unique
        assert all(len(n) <= 64 for n in names)
        assert {tb.tools[n].server for n in echoes} == {"a.b", "a_b"}
        for q, entry in tb.tools.items():
            if entry.name == "echo":
                assert (await tb.call(q, {"text": entry.server})).text == entry.server
        assert (await tb.call("nope__nope")).is_error
        # the servers' instructions reach the model only through the prompt's one fence
        text = P.system_prompt(instructions=tb.instructions, resources=tb.resources)
        for server in ("a.b", "a_b"):
            assert P.fence("server-instructions", "Be kind to the tools.", server=server) in text


async def test_required_and_optional_servers(sdk_server):
    dead = ServerSpec(name="dead", url="http://127.0.0.1:9/mcp")
    optional = ServerSpec(name="dead", url="http://127.0.0.1:9/mcp", required=False)
    with pytest.raises(RequiredServerLost) as err:
        async with Toolbox([spec(sdk_server), dead], ping_interval=None):
            pass
    assert err.value.server == "dead"
    async with Toolbox([spec(sdk_server), optional], ping_interval=None) as tb:
        assert list(tb.clients) == ["sdk"] and "dead" in tb.omitted
        assert all(e.server == "sdk" for e in tb.tools.values())


async def test_server_killed_mid_call_then_restarted():
    peer = python_peer("sdk_servers.py").start()
    try:
        async with MCPClient(spec(peer), ping_interval=None) as c:
            task = asyncio.create_task(c.call_tool("slow", {"seconds": 60}))
            await until(lambda: stats(peer)["calls"] >= 1, what="call in flight")
            await asyncio.to_thread(peer.kill)
            with pytest.raises(ToolFault) as err:
                await task
            assert err.value.retryable
            await asyncio.to_thread(peer.start)
            await until(lambda: c.connected, what="reconnected", limit=30)
            assert (await c.call_tool("echo", {"text": "back"})).text == "back"
    finally:
        peer.stop()


async def test_server_restart_restores_subscriptions_and_synthesizes_updates(tmp_path):
    state = tmp_path / "watched.txt"
    peer = python_peer("sdk_servers.py", "--state", str(state)).start()
    try:
        async with Toolbox([spec(peer)], ping_interval=None) as tb:
            assert await tb.subscribe("mem://watched")
            gen = tb.clients["sdk"].generation
            await asyncio.to_thread(peer.kill)
            state.write_text("changed-while-down")  # no notification can be sent for this
            await asyncio.to_thread(peer.start)
            async with asyncio.timeout(30):
                server, uri, obs = await tb.next_update()
            assert (server, uri, obs.text) == ("sdk", "mem://watched", "changed-while-down")
            assert tb.clients["sdk"].generation > gen
            assert stats(peer)["subscribe"] == 1  # re-issued on the new server
            # and live updates flow again on the new session
            await asyncio.to_thread(post, peer, "/update?value=after")
            async with asyncio.timeout(20):
                _, _, obs = await tb.next_update()
            assert obs.text == "after"
    finally:
        peer.stop()
