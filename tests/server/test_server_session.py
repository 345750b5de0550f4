"""The sans-IO server session and the generic Handler (no network).

Driven through `LocalConnection`, the in-process (Stdio origin) client.
"""

from __future__ import annotations

import orjson
import pytest
from local_connection import LocalConnection

from agentd.errors import RPCError
from agentd.mcp.server.handler import Handler, tool_error
from agentd.mcp.server.rules.sessions import ORIGIN_STDIO, negotiate_version
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import Notification, Request, resource_not_found


def make_handler() -> Handler:
    h = Handler("sample", "9.9", instructions="be nice", subscribe=True)

    @h.tool("echo", {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"], "additionalProperties": False},
            description="echo text")
    async def echo(args, ctx):
        return args["text"]

    @h.tool("obj", {"type": "object"}, description="structured")
    async def obj(args, ctx):
        return {"origin": ctx.origin, "n": 1}

    @h.tool("fail", {"type": "object"}, description="tool-level failure")
    async def fail(args, ctx):
        return tool_error("it broke")

    @h.tool("crash", {"type": "object"}, description="a handler bug")
    async def crash(args, ctx):
        raise RuntimeError("bug")

    @h.resource("test://text", name="text", description="a text", mime_type="text/plain")
    async def text(uri):
        return "hello"

    async def dyn(uri):
        if uri.endswith("/missing"):
            raise resource_not_found(uri)
        return {"uri": uri}

    h.resource_prefix("test://dyn/", dyn)
    return h


@pytest.fixture
async def conn():
    c = LocalConnection(make_handler())
    await c.initialize()
    yield c
    c.close()


@pytest.mark.parametrize("version", t.SUPPORTED_PROTOCOL_VERSIONS)
async def test_version_negotiation_accepts_every_supported(version):
    c = LocalConnection(make_handler())
    r = await c.request("initialize", {"protocolVersion": version, "capabilities": {},
                                       "clientInfo": {"name": "x", "version": "1"}})
    assert r["protocolVersion"] == version
    assert r["serverInfo"] == {"name": "sample", "version": "9.9"}
    assert r["capabilities"] == {"tools": {}, "resources": {"subscribe": True}}
    assert r["instructions"] == "be nice"


async def test_unknown_version_gets_latest():
    assert negotiate_version("1999-01-01") == t.LATEST_PROTOCOL_VERSION
    c = LocalConnection(make_handler())
    r = await c.request("initialize", {"protocolVersion": "2030-01-01", "capabilities": {},
                                       "clientInfo": {"name": "x", "version": "1"}})
    assert r["protocolVersion"] == "2025-11-25"


async def test_initialize_twice_and_bad_params():
    c = LocalConnection(make_handler())
    with pytest.raises(RPCError) as e:
        await c.request("initialize", {"protocolVersion": "2025-11-25"})
    assert e.value.code == -32602
    await c.initialize()
    with pytest.raises(RPCError) as e:
        await c.initialize()
    assert e.value.code == -32600


async def test_ping_and_unknown_methods(conn):
    assert await conn.request("ping") == {}
    for method in ("server/discover", "prompts/list", "logging/setLevel", "completion/complete",
                   "tasks/list", "sampling/createMessage"):
        with pytest.raises(RPCError) as e:
            await conn.request(method, {})
        assert e.value.code == -32601, method


async def test_inbound_notifications_and_responses_are_ignored(conn):
    s = conn.session
    assert await s.receive(Notification("notifications/cancelled",
                                        None)) is None
    assert await s.receive(Notification("notifications/whatever")) is None
    assert await conn.request("ping") == {}
    assert conn.notifications == []  # never emits message/progress/list_changed


async def test_tools(conn):
    listed = await conn.request("tools/list")
    assert [x["name"] for x in listed["tools"]] == ["echo", "obj", "fail", "crash"]
    r = await conn.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert r == {"content": [{"type": "text", "text": "hi"}]}
    r = await conn.request("tools/call", {"name": "obj"})
    assert r["structuredContent"] == {"origin": ORIGIN_STDIO, "n": 1}
    r = await conn.request("tools/call", {"name": "fail", "arguments": {}})
    assert r["isError"] is True and r["content"][0]["text"] == "it broke"


async def test_tool_errors_are_jsonrpc_errors(conn):
    cases = [
        ({"name": "nope", "arguments": {}}, -32601),
        ({"name": "echo", "arguments": {"text": 1}}, -32602),
        ({"name": "echo", "arguments": {}}, -32602),
        ({"name": "echo", "arguments": {"text": "a", "extra": 1}}, -32602),
        ({"arguments": {}}, -32602),
        (None, -32602),
    ]
    for params, code in cases:
        with pytest.raises(RPCError) as e:
            await conn.request("tools/call", params) if params is not None \
                else await conn.request("tools/call")
        assert e.value.code == code, params
    with pytest.raises(RPCError) as e:
        await conn.request("tools/call", {"name": "crash", "arguments": {}})
    assert e.value.code == -32603 and "bug" not in e.value.message
    assert await conn.request("ping") == {}  # still serving


async def test_resources(conn):
    listed = await conn.request("resources/list")
    assert listed == {"resources": [{"uri": "test://text", "name": "text",
                                     "description": "a text", "mimeType": "text/plain"}]}
    r = await conn.request("resources/read", {"uri": "test://text"})
    assert r == {"contents": [{"uri": "test://text", "text": "hello", "mimeType": "text/plain"}]}
    r = await conn.request("resources/read", {"uri": "test://dyn/a"})
    assert r["contents"][0]["mimeType"] == "application/json"
    for uri in ("test://dyn/missing", "test://other"):
        with pytest.raises(RPCError) as e:
            await conn.request("resources/read", {"uri": uri})
        assert e.value.code == -32002 and e.value.data == {"uri": uri}


async def test_subscriptions_are_per_session():
    h = make_handler()
    a, b = LocalConnection(h, session_id="a"), LocalConnection(h, session_id="b")
    await a.initialize()
    await b.initialize()
    assert await a.request("resources/subscribe", {"uri": "test://text"}) == {}
    assert h.notify_updated("test://text") == 1
    assert h.notify_updated("test://elsewhere") == 0
    upd = {"jsonrpc": "2.0", "method": "notifications/resources/updated",
           "params": {"uri": "test://text"}}
    assert a.notifications == [upd] and b.notifications == []
    assert await a.request("resources/unsubscribe", {"uri": "test://text"}) == {}
    assert h.notify_updated("test://text") == 0
    await b.request("resources/subscribe", {"uri": "test://text"})
    assert h.notify_updated("test://text", consume=True) == 1
    assert h.notify_updated("test://text") == 0  # consumed
    b.close()
    await a.request("resources/subscribe", {"uri": "test://x"})
    a.close()  # closing drops the session's subscriptions
    assert h.hub.subscribers("test://x") == 0


async def test_capabilities_follow_registrations():
    h = Handler("bare", "1")
    c = LocalConnection(h)
    r = await c.initialize()
    assert r["capabilities"] == {"tools": {}}
    for method in ("resources/list", "resources/subscribe"):
        with pytest.raises(RPCError) as e:
            await c.request(method, {"uri": "x://y"})
        assert e.value.code == -32601


async def test_request_ids_are_echoed(conn):
    out = await conn.session.receive(Request("abc", "ping"))
    assert orjson.loads(out) == {"jsonrpc": "2.0", "id": "abc", "result": {}}


def test_invalid_schema_is_refused_at_registration():
    h = Handler("x", "1")
    with pytest.raises(ValueError):
        h.add_tool("bad", lambda a, c: None, {"type": 12})


async def test_a_remote_rpc_error_is_never_answered_as_ours():
    """A handler that lets a peer's JSON-RPC error (side "remote") escape is a bug:
    the client gets -32603, not the peer's code; a local one is the answer."""
    h = Handler("relay", "1")

    @h.tool("forward", {"type": "object"})
    async def forward(args, ctx):
        raise RPCError(-32002, "the upstream said no", {"uri": "x://y"}, side="remote")

    @h.tool("refuse", {"type": "object"})
    async def refuse(args, ctx):
        raise RPCError(-32010, "not here", side="local")

    c = LocalConnection(h)
    await c.initialize()
    try:
        with pytest.raises(RPCError) as e:
            await c.request("tools/call", {"name": "forward", "arguments": {}})
        assert (e.value.code, e.value.message) == (-32603, "Internal error")
        with pytest.raises(RPCError) as e:
            await c.request("tools/call", {"name": "refuse", "arguments": {}})
        assert (e.value.code, e.value.message, e.value.side) == (-32010, "not here", "remote")
    finally:
        c.close()
