"""The self-MCP's subagent routing, the §2.3 bodies, the emission rule and eviction.

The backend here is a scripted `SubagentBackend` (the tree's contract,
`agentd/agent/subagents.py`) whose runs end when the test says so; the peer is the
official SDK client over real HTTP, plus the in-process Stdio connection.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from agentd.errors import RPCError

try:  # the official MCP Python SDK: a real peer (test dependency)
    from mcp import Client
except ImportError:  # pragma: no cover
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("the official MCP Python SDK (mcp) is not installed", allow_module_level=True)

from local_connection import LocalConnection
from scripted_backend import ScriptedBackend

from agentd.agent.subagents import HandleState
from agentd.mcp.server.http.server import serve
from agentd.served.selfmcp import SelfMCP

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


async def local(handler) -> LocalConnection:
    c = LocalConnection(handler)
    await c.initialize()
    return c


def updates(conn) -> list[str]:
    return [n["params"]["uri"] for n in conn.notifications
            if n["method"] == "notifications/resources/updated"]


async def spawn(conn, **args):
    return await conn.request("tools/call", {"name": "subagent.spawn", "arguments": args})


async def test_spawn_modes_and_shapes():
    be = ScriptedBackend()
    conn = await local(SelfMCP(be))
    r = await spawn(conn, instruction="sum", output_contract="a number", tool_scope=["fs"])
    assert r["structuredContent"] == {"handle": "served.1", "status": "completed", "done": True,
                                      "partial": False, "result": {"answer": 42}}
    assert json.loads(r["content"][0]["text"]) == {"answer": 42}
    caller, req = be.requests[0]
    assert caller == "served" and req.mode == "sync" and req.tool_scope == ("fs",)
    assert req.output_contract == "a number"
    r = await spawn(conn, instruction="bg", **{"async": True})
    assert r["structuredContent"] == {"handle": "served.2", "status": "running", "done": False}
    assert "isError" not in r
    # two modes at once are refused in the subagent table's words (the loop's
    # self-tools say the same: tests/served/test_selfmcp_sdk.py), never guessed
    r = await spawn(conn, instruction="chat", warm=True, **{"async": True})
    assert r["isError"] is True and len(be.requests) == 2
    assert r["content"][0]["text"] == \
        "subagent.spawn: choose at most one spawn mode (got async and warm)"
    r = await spawn(conn, instruction="chat", warm=True)
    assert be.requests[-1][1].mode == "warm"
    r = await conn.request("tools/call", {"name": "subagent.send",
                                          "arguments": {"handle": "served.3", "message": "hi"}})
    assert be.sent == [("served.3", "hi")] and not r.get("isError")
    r = await conn.request("tools/call", {"name": "subagent.status",
                                          "arguments": {"handle": "served.2"}})
    assert r["structuredContent"]["status"] == "running"
    assert isinstance(r["structuredContent"]["age_ms"], int)
    r = await conn.request("tools/call", {"name": "subagent.cancel",
                                          "arguments": {"handle": "served.2"}})
    assert r["structuredContent"]["status"] == "cancelled"
    be.refuse = "spawn refused: max_depth=4 reached at handle 0.2.1.3"
    r = await spawn(conn, instruction="deep")
    assert r["isError"] is True
    assert r["content"] == [{"type": "text", "text": be.refuse}]


async def test_handles_outside_served_are_not_reachable():
    be = ScriptedBackend()
    be.states["0.1"] = HandleState(handle="0.1")  # the agent's own subagent
    conn = await local(SelfMCP(be))
    for tool, args in (("subagent.status", {"handle": "0.1"}),
                       ("subagent.cancel", {"handle": "0.1"}),
                       ("subagent.send", {"handle": "0.1", "message": "x"})):
        r = await conn.request("tools/call", {"name": tool, "arguments": args})
        assert r["isError"] and r["content"][0]["text"] == "unknown handle: 0.1"
    assert be.states["0.1"].status == "running"
    with pytest.raises(RPCError) as e:
        await conn.request("resources/read", {"uri": "agent://subagent/0.1"})
    assert e.value.code == -32002


async def test_resource_bodies():
    be = ScriptedBackend()
    conn = await local(SelfMCP(be, run_id="r9", mode="reactive"))
    await spawn(conn, instruction="x", **{"async": True})
    r = await conn.request("resources/read", {"uri": "agent://subagent/served.1"})
    (item,) = r["contents"]
    assert item["uri"] == "agent://subagent/served.1" and item["mimeType"] == "application/json"
    body = json.loads(item["text"])
    assert set(body) == {"handle", "status", "done", "age_ms"} and body["done"] is False
    be.finish("served.1", "the distillate")
    body = json.loads((await conn.request("resources/read", {
        "uri": "agent://subagent/served.1"}))["contents"][0]["text"])
    assert body == {"handle": "served.1", "status": "completed", "done": True,
                    "partial": False, "result": "the distillate"}
    status = json.loads((await conn.request("resources/read", {"uri": "agent://status"}))
                        ["contents"][0]["text"])
    assert status["run_id"] == "r9" and status["mode"] == "reactive"
    assert status["spawns"] == {"spawned": 1, "running": 0}
    for uri in ("agent://run/1", "agent://subagent/served.1/result", "agent://subagent/"):
        with pytest.raises(RPCError) as e:
            await conn.request("resources/read", {"uri": uri})
        assert e.value.code == -32002 and e.value.data == {"uri": uri}


async def test_emission_rule_in_process():
    be = ScriptedBackend()
    h = SelfMCP(be)
    a, b, c = await local(h), await local(h), await local(h)
    await spawn(a, instruction="x", **{"async": True})
    await spawn(a, instruction="y", **{"async": True})
    uri1, uri2 = "agent://subagent/served.1", "agent://subagent/served.2"
    assert await a.request("resources/subscribe", {"uri": uri1}) == {}
    assert await b.request("resources/subscribe", {"uri": uri1}) == {}
    await b.request("resources/subscribe", {"uri": uri1})  # twice: still one update
    await c.request("resources/subscribe", {"uri": uri1})
    await c.request("resources/unsubscribe", {"uri": uri1})
    assert updates(a) == updates(b) == updates(c) == []  # nothing while running
    be.finish("served.1", "done")
    assert updates(a) == [uri1] and updates(b) == [uri1] and updates(c) == []
    be.finish("served.1", "done again")  # subscriptions were consumed
    assert updates(a) == [uri1] and updates(b) == [uri1]
    be.finish("served.2", "nobody listens")
    assert updates(a) == [uri1]
    # the race: subscribing after the run became terminal is answered {} and its
    # update follows at once (the terminal transition reaches every subscriber)
    assert await c.request("resources/subscribe", {"uri": uri2}) == {}
    assert updates(c) == [uri2]
    body = json.loads((await c.request("resources/read", {"uri": uri2}))["contents"][0]["text"])
    assert body["done"] is True and body["result"] == "nobody listens"
    assert h.hub.subscribers(uri2) == 0  # nothing is held for an ended run
    # what is not a handle of this principal is refused (-32602, data.uri), never {}
    for uri in ("test://watched-resource", "agent://status", "agent://subagent/served.99",
                "file:///etc/passwd", "agent://subagent/0.1"):
        with pytest.raises(RPCError) as e:
            await c.request("resources/subscribe", {"uri": uri})
        assert e.value.code == -32602 and e.value.data == {"uri": uri}
        assert await c.request("resources/unsubscribe", {"uri": uri}) == {}
    assert updates(c) == [uri2]
    assert all(n["method"] == "notifications/resources/updated"
               for x in (a, b, c) for n in x.notifications)


async def test_eviction_by_count_and_ttl():
    be = ScriptedBackend(keep_terminal=2)
    conn = await local(SelfMCP(be))
    for _ in range(3):
        await spawn(conn, instruction="x")  # sync: terminal at once
    with pytest.raises(RPCError) as e:
        await conn.request("resources/read", {"uri": "agent://subagent/served.1"})
    assert e.value.code == -32002
    r = await conn.request("tools/call", {"name": "subagent.status",
                                          "arguments": {"handle": "served.1"}})
    assert r["isError"]
    for h in ("served.2", "served.3"):
        await conn.request("resources/read", {"uri": f"agent://subagent/{h}"})

    be2 = ScriptedBackend(terminal_ttl=0.0)
    conn2 = await local(SelfMCP(be2))
    await spawn(conn2, instruction="x", **{"async": True})
    await conn2.request("resources/read", {"uri": "agent://subagent/served.1"})  # running: kept
    be2.finish("served.1", "r")  # any later look is past a TTL of 0
    with pytest.raises(RPCError) as e:
        await conn2.request("resources/read", {"uri": "agent://subagent/served.1"})
    assert e.value.code == -32002
    with pytest.raises(RPCError) as e:  # evicted: unknown, so refused
        await conn2.request("resources/subscribe", {"uri": "agent://subagent/served.1"})
    assert e.value.code == -32602 and e.value.data == {"uri": "agent://subagent/served.1"}
    assert updates(conn2) == []


async def test_subscribe_and_notify_over_http_with_sdk_client():
    be = ScriptedBackend()
    runner = await serve(SelfMCP(be), port=0)
    got: list[str] = []
    arrived = asyncio.Event()

    async def on_message(msg):
        if isinstance(msg, Exception):
            return
        if getattr(msg, "method", None) == "notifications/resources/updated":
            got.append(str(msg.params.uri))
            arrived.set()

    try:
        async with Client(runner.url, mode="legacy", message_handler=on_message) as c:
            r = await c.call_tool("subagent.spawn", {"instruction": "bg", "async": True})
            handle = r.structured_content["handle"]
            uri = f"agent://subagent/{handle}"
            await c.subscribe_resource(uri)
            be.finish(handle, {"ok": True})
            async with asyncio.timeout(20):
                await arrived.wait()
            assert got == [uri]
            body = json.loads((await c.read_resource(uri)).contents[0].text)
            assert body["done"] is True and body["result"] == {"ok": True}
            # late subscribe to a terminal handle: its update arrives at once
            arrived.clear()
            await c.subscribe_resource(uri)
            async with asyncio.timeout(20):
                await arrived.wait()
            assert got == [uri, uri]
            body = json.loads((await c.read_resource(uri)).contents[0].text)
            assert body["done"] is True and body["result"] == {"ok": True}
            # a later run's update on the same ordered stream proves no extra came before it
            arrived.clear()
            r = await c.call_tool("subagent.spawn", {"instruction": "bg2", "async": True})
            uri2 = f"agent://subagent/{r.structured_content['handle']}"
            await c.subscribe_resource(uri2)
            be.finish(r.structured_content["handle"], {"ok": 2})
            async with asyncio.timeout(20):
                await arrived.wait()
            assert got == [uri, uri, uri2]
    finally:
        await runner.stop()
