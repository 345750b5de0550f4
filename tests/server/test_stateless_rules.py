"""The MCP 2026-07-28 server rules without a transport: no socket, no event loop.

``agentd.mcp.server.rules.stateless`` is fed a decoded request and a headers mapping
and answers a result, a ``Dispatch`` for the handler, or the response bytes and
HTTP status; its ``Listen`` is fed what the handler subscribed and the
hub's updates and answers frames.  The handler here is the real ``Handler``
(its catalogue is all the rules read); nothing is awaited.  The envelope ladder
without headers is covered by tests/server/test_server_2026.py; these are the rungs
and answers the HTTP tests only see through the wire.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from multidict import CIMultiDict, CIMultiDictProxy
from stateless_requests import META, V, headers, request

from agentd.errors import RPCError
from agentd.mcp.server.handler import Handler, ServerSession
from agentd.mcp.server.rules import stateless as rules
from agentd.mcp.server.rules.sessions import Dispatch, SessionState
from agentd.wire import codec
from agentd.wire.jsonrpc import resource_not_found

INFO = '"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"srv","version":"1.0"}}'


async def _echo(arguments: dict[str, Any], ctx: Any) -> Any:
    return arguments


async def _read(uri: str) -> str:
    return "x"


def handler(*, subscribe: bool = True) -> Handler:
    h = Handler("srv", "1.0", subscribe=subscribe)
    h.add_tool("echo", _echo, {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"}}})
    h.add_tool("sample", _echo, {"type": "object"}, requires={"sampling": {}})
    h.add_resource("r://a", _read, name="a")
    return h


def session(h: Handler) -> SessionState:
    return SessionState(h, h.hub, "stateless")


def served(h: Handler, req: Any, hdrs: Any = None) -> Any:
    """classify + route, as the driver runs them (the first RPCError raises)."""
    return rules.route(session(h), req, rules.classify(req, hdrs), hdrs)


# --------------------------------------------------------------------------
# The header rung
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("pairs", "name", "why"), [
    ((("MCP-Protocol-Version", V),), "r://a", "appears more than once"),
    ((), "r://b", "Mcp-Name header does not match params.uri"),
    ((), "=?base64?cjovL2I=?=", "Mcp-Name header does not match params.uri"),  # r://b
])
def test_header_mismatch_is_32020(pairs, name, why):
    req = request(1, "resources/read", {"uri": "r://a"})
    with pytest.raises(RPCError) as e:
        rules.classify(req, headers(req, *pairs, name=name))
    assert e.value.code == -32020 and why in e.value.message and e.value.id == 1
    assert rules.http_status(e.value.code) == 400


def test_header_rung_checks_method_and_version_and_decodes_base64_names():
    req = request(1, "resources/read", {"uri": "r://a"})
    env = rules.classify(req, headers(req, name="=?base64?cjovL2E=?="))  # r://a
    assert env.name == "r://a" and env.version == V
    bad = CIMultiDictProxy(CIMultiDict([("MCP-Protocol-Version", V), ("Mcp-Method", "tools/list"),
                                        ("Mcp-Name", "r://a")]))
    with pytest.raises(RPCError, match="Mcp-Method"):
        rules.classify(req, bad)
    bad = CIMultiDictProxy(CIMultiDict([("MCP-Protocol-Version", "2025-11-25"),
                                        ("Mcp-Method", "resources/read"), ("Mcp-Name", "r://a")]))
    with pytest.raises(RPCError, match="MCP-Protocol-Version"):
        rules.classify(req, bad)
    assert rules.carries_envelope(req)
    assert not rules.carries_envelope(request(2, "tools/list", meta=None))


# --------------------------------------------------------------------------
# Routing: results, dispatches, refusals
# --------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["initialize", "ping", "logging/setLevel",
                                    "resources/subscribe", "resources/unsubscribe"])
def test_removed_methods_are_32601_with_404(method):
    req = request(3, method, {"uri": "r://a"})
    with pytest.raises(RPCError) as e:
        served(handler(), req)
    assert e.value.code == -32601 and e.value.message.endswith("(removed at 2026-07-28)")
    out, status = rules.refuse(req.id, e.value)
    assert status == 404 and orjson.loads(out)["error"]["code"] == -32601


def test_unknown_method_is_32601_without_hint():
    with pytest.raises(RPCError) as e:
        served(handler(), request(3, "prompts/list"))
    assert e.value.code == -32601 and e.value.message == "Method not found: prompts/list"


def test_calls_and_reads_are_dispatched_to_the_handler():
    h = handler()
    req = request(4, "tools/call", {"name": "echo", "arguments": {}})
    out = served(h, req, headers(req, name="echo"))
    assert type(out) is Dispatch and out.method == "tools/call" and out.params.name == "echo"
    req = request(5, "resources/read", {"uri": "r://a"})
    out = served(h, req, headers(req, name="r://a"))
    assert type(out) is Dispatch and out.params.uri == "r://a"


def test_missing_client_capability_is_32021_before_the_call():
    req = request(6, "tools/call", {"name": "sample", "arguments": {}})
    with pytest.raises(RPCError) as e:
        served(handler(), req)
    assert e.value.code == -32021 and e.value.data == {"requiredCapabilities": {"sampling": {}}}
    assert rules.refuse(6, e.value)[1] == 400
    meta = {**META, "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}
    assert type(served(handler(), request(6, "tools/call", {"name": "sample", "arguments": {}},
                                          meta=meta))) is Dispatch


@pytest.mark.parametrize(("args", "pairs", "why"), [
    ({"region": "eu"}, (), "is missing but the argument is present"),
    ({}, (("Mcp-Param-Region", "eu"),), "is present but the argument is absent"),
    ({"region": "eu"}, (("Mcp-Param-Region", "us"),), "does not match the argument"),
    ({"region": "eu"}, (("Mcp-Param-Region", "eu"), ("Mcp-Param-Region", "eu")),
     "appears more than once"),
])
def test_param_headers_must_mirror_the_arguments(args, pairs, why):
    req = request(7, "tools/call", {"name": "echo", "arguments": args})
    with pytest.raises(RPCError) as e:
        served(handler(), req, headers(req, *pairs, name="echo"))
    assert e.value.code == -32020 and why in e.value.message


def test_param_headers_that_agree_pass_and_are_not_checked_off_http():
    args = {"region": "ü-1"}
    req = request(8, "tools/call", {"name": "echo", "arguments": args})
    hdrs = headers(req, ("Mcp-Param-Region", "=?base64?w7wtMQ==?="), name="echo")
    assert type(served(handler(), req, hdrs)) is Dispatch
    assert type(served(handler(), req, None)) is Dispatch


# --------------------------------------------------------------------------
# Answers: the bytes on the wire
# --------------------------------------------------------------------------


def test_list_results_carry_result_type_server_info_and_the_cache_hint():
    h = handler()
    req = request(9, "tools/list")
    env = rules.classify(req)
    out, status = rules.answer(h, req, env, rules.route(session(h), req, env))
    assert status == 200
    assert out.startswith(b'{"id":9,"result":{"resultType":"complete","ttlMs":0,'
                          b'"cacheScope":"private",' + INFO.encode() + b',"tools":[')


def test_results_with_their_own_meta_are_merged_by_value():
    h = handler()
    req = request(10, "tools/call", {"name": "echo", "arguments": {}})
    result = {"content": [], "_meta": {"k": 1}}
    out, _ = rules.answer(h, req, rules.classify(req), result)
    got = orjson.loads(out)["result"]
    assert got["resultType"] == "complete" and "ttlMs" not in got
    assert got["_meta"] == {"k": 1, "io.modelcontextprotocol/serverInfo":
                            {"name": "srv", "version": "1.0"}}


def test_discover_answers_versions_capabilities_and_server_info():
    h = handler()
    req = request(11, "server/discover")
    env = rules.classify(req)
    out, status = rules.answer(h, req, env, served(h, req))
    got = orjson.loads(out)["result"]
    assert status == 200 and got["resultType"] == "complete"
    assert got["supportedVersions"] == rules.SUPPORTED_VERSIONS and V in got["supportedVersions"]
    assert got["capabilities"] == {"tools": {}, "resources": {"subscribe": True}}
    assert got["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "srv"
    assert (got["ttlMs"], got["cacheScope"]) == (0, "private")


def test_resource_not_found_is_32602_with_the_uri_and_a_bug_is_32603():
    out, status = rules.refuse(12, resource_not_found("r://gone"))
    assert status == 400 and orjson.loads(out)["error"] == {
        "code": -32602, "message": "Resource not found", "data": {"uri": "r://gone"}}
    out, status = rules.internal_error(13)
    assert orjson.loads(out)["error"] == {"code": -32603, "message": "Internal error"}
    assert status == rules.http_status(-32603)


# --------------------------------------------------------------------------
# subscriptions/listen
# --------------------------------------------------------------------------


def listen(h: Handler, uris: list[str] | None, *, rid: Any = "L1", max_frames: int = 256
           ) -> tuple[ServerSession, rules.Listen, list[str]]:
    """A listen stream as the transport builds it: the one connection type in its
    listening state, holding the stream's rules."""
    notifications = {"resourceSubscriptions": uris} if uris is not None else {}
    req = request(rid, "subscriptions/listen", {"notifications": notifications})
    ls = rules.Listen(h, req.id, max_frames=max_frames)
    s = ServerSession.listening(h, rules.classify(req), ls, listen_id="listen:1", auth="none",
                                client="c")
    return s, ls, ls.requested(rules.listen_params(req))


def frames(ls: rules.Listen) -> list[Any]:
    return [orjson.loads(f) for f in ls.frames]


def test_listen_acknowledges_what_was_honoured_and_tags_only_that():
    h = handler()
    s, ls, asked = listen(h, ["r://a", "r://a", "r://never", "r://b"])
    assert asked == ["r://a", "r://never", "r://b"]  # de-duplicated, in order
    for uri in asked:
        if uri != "r://never":  # what the handler admits (the driver runs its subscribe)
            s.subscribe(uri)
        ls.subscribed(uri, uri in s.subscriptions)
    ack = orjson.loads(ls.acknowledge())
    assert ack == {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                   "params": {"notifications": {"resourceSubscriptions": ["r://a", "r://b"]},
                              "_meta": {"io.modelcontextprotocol/subscriptionId": "L1"}}}
    assert h.notify_updated("r://a") == 1 and h.notify_updated("r://never") == 0
    assert h.notify_updated("r://other") == 0
    assert frames(ls) == [{"jsonrpc": "2.0", "method": "notifications/resources/updated",
                           "params": {"uri": "r://a", "_meta": {
                               "io.modelcontextprotocol/subscriptionId": "L1"}}}]
    # the default handler's subscriptions stay
    assert ls.persistent and not ls.exhausted(bool(s.subscriptions))


def test_an_update_that_fires_while_subscribing_is_honoured_and_queued_behind_the_ack():
    h = handler()
    s, ls, asked = listen(h, ["r://done"])
    assert asked == ["r://done"]
    s.subscribe("r://done")
    h.notify_updated("r://done", consume=True)  # a run already terminal: its one update
    ls.subscribed("r://done", "r://done" in s.subscriptions)
    ack = orjson.loads(ls.acknowledge())
    assert ack["params"]["notifications"] == {"resourceSubscriptions": ["r://done"]}
    assert [f["params"]["uri"] for f in frames(ls)] == ["r://done"]
    assert not s.subscriptions


def test_listen_without_subscribe_capability_or_uris_honours_nothing():
    for h, uris in ((handler(subscribe=False), ["r://a"]), (handler(), None), (handler(), [])):
        s, ls, asked = listen(h, uris, rid=5)
        assert asked == []
        assert orjson.loads(ls.acknowledge())["params"]["notifications"] == {}
        assert ls.exhausted(bool(s.subscriptions))
        assert orjson.loads(ls.result()) == {"jsonrpc": "2.0", "id": 5, "result": {
            "_meta": {"io.modelcontextprotocol/subscriptionId": 5,
                      "io.modelcontextprotocol/serverInfo": {"name": "srv", "version": "1.0"}},
            "resultType": "complete"}}


def test_a_stream_that_is_not_drained_overflows_instead_of_growing():
    h = handler()
    s, ls, _ = listen(h, ["r://a"], max_frames=2)
    s.subscribe("r://a")
    ls.subscribed("r://a", True)
    ls.acknowledge()
    for _ in range(3):
        h.notify_updated("r://a")
    assert len(ls.frames) == 2 and ls.overflowed
    s.close()
    assert s.closed and h.hub.subscribers("r://a") == 0
    h.notify_updated("r://a")
    assert len(ls.frames) == 2  # nothing after close


def test_listen_params_refuse_malformed_requests():
    for params in (None, {"notifications": 3}):
        raw = {"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen"}
        if params is not None:
            raw["params"] = params
        with pytest.raises(RPCError) as e:
            rules.listen_params(codec.decode(json.dumps(raw).encode()))
        assert e.value.code == -32602 and e.value.id == 9


def test_a_stateless_session_is_named_in_full_a_minted_one_by_a_short_form():
    """`mcp.serve.*` lines say `session=stateless`, never `stateles`; a minted
    Mcp-Session-Id (a credential) only by its first 8 characters and `…`."""
    h = Handler(name="agentd-test", version="0")
    assert session(h).log_id == "stateless"
    minted = SessionState(h, h.hub, "Ab3dE9xY-and-the-rest-of-a-secret-id")
    assert minted.log_id == "Ab3dE9xY…"
