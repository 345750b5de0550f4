"""The sans-IO rules of the 2026-07-28 client half (no network needed).

Version selection (``server/discover`` and the fallback verdicts), the
per-request ``_meta``, the request headers and SEP-2243 ``x-mcp-header``
rules (the spec's own encoding table), and the MRTR answers.
"""

from __future__ import annotations

import base64

import msgspec
import orjson
import pytest

from agentd.mcp.client.rules.param_headers import (
    encode_value,
    param_headers,
    tool_header_declarations,
)
from agentd.mcp.client.rules.session import (
    ClientSession,
    HandshakeError,
    Resolved,
)
from agentd.wire import mcp2026 as m26

DISCOVER = {"supportedVersions": ["2026-07-28"], "ttlMs": 0, "cacheScope": "private",
            "capabilities": {"tools": {"listChanged": True},
                             "resources": {"subscribe": True}},
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "9"}}}


def adopted() -> ClientSession:
    s = ClientSession(client_version="1.2.3")
    s.set_meta({"io.modelcontextprotocol/run-id": "r", "traceparent": "00-" + "a" * 32
                + "-" + "b" * 16 + "-01"})
    _rid, data = s.start_discover()
    body = orjson.loads(data)
    assert body["method"] == "server/discover"
    assert body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    s.finish_discover(msgspec.Raw(orjson.dumps(DISCOVER)))
    return s


def test_discover_adopts_a_2026_server():
    s = adopted()
    assert (s.stateless, s.state, s.protocol_version) == (True, "ready", "2026-07-28")
    assert s.capabilities.tools_list_changed and s.capabilities.resources_subscribe
    assert s.server_info.name == "s"
    rid, data = s.request("tools/list")
    meta = orjson.loads(data)["params"]["_meta"]
    assert meta == {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "agentd",
                                                           "version": "1.2.3"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/run-id": "r",
                    "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}
    # removed methods are never sent at 2026-07-28
    for method in ("ping", "resources/subscribe", "logging/setLevel"):
        with pytest.raises(HandshakeError, match="needs the server capability"):
            s.request(method)
    # no notifications/cancelled over HTTP: closing the stream is the cancel
    assert s.cancel(rid, "timeout") is None


def test_discover_fallback_verdicts():
    s = ClientSession(client_version="1")
    s.start_discover()
    # a discover answer listing only old versions: declined, with the reason
    assert "no 2026-07-28 version" in s.finish_discover(msgspec.Raw(orjson.dumps(
        {**DISCOVER, "supportedVersions": ["2025-11-25"]})))
    assert s.state == "new" and not s.stateless
    s.discover_failed(-32601)  # any plain refusal: fall back
    s.discover_failed(-32022, {"supported": ["2025-11-25"]})  # names an initialize era
    with pytest.raises(HandshakeError):  # modern-only and disjoint: incompatible
        s.discover_failed(-32022, {"supported": ["2027-01-01"]})


def test_headers_and_hot_path_call():
    s = adopted()
    assert s.headers("tools/list") == (("Mcp-Method", "tools/list"),)
    assert s.headers("resources/read", "file:///a b") == (
        ("Mcp-Method", "resources/read"), ("Mcp-Name", "file:///a b"))
    assert s.headers("tools/call", "名前")[1][1].startswith("=?base64?")
    _rid, data = s.call_tool(b'"t"', b'{"a":1}', s.meta_json,
                            b',"inputResponses":{"k":{"roots":[]}},"requestState":"x"')
    params = orjson.loads(data)["params"]
    assert params["inputResponses"] == {"k": {"roots": []}} and params["requestState"] == "x"
    assert params["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {}
    legacy = ClientSession(client_version="1")
    assert legacy.headers("tools/call", "t") == ()


@pytest.mark.parametrize(("value", "encoded"), [
    ("us-west1", "us-west1"),
    ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
    (" padded ", "=?base64?IHBhZGRlZCA=?="),
    ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
    ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
])
def test_value_encoding_table_of_the_revision(value, encoded):
    assert encode_value(value) == encoded
    if encoded != value:
        assert base64.b64decode(encoded[9:-2]).decode() == value


def test_x_mcp_header_declarations_and_extraction():
    schema = {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "n": {"type": "integer", "x-mcp-header": "N"},
        "flag": {"type": "boolean", "x-mcp-header": "Flag"},
        "nested": {"type": "object", "properties": {
            "tenant": {"type": "string", "x-mcp-header": "Tenant"}}}}}
    decls = tool_header_declarations(schema)
    assert [d.header for d in decls] == ["Mcp-Param-Region", "Mcp-Param-N", "Mcp-Param-Flag",
                                         "Mcp-Param-Tenant"]
    got = dict(param_headers(decls, {"region": "eu", "n": -7, "flag": False,
                                     "nested": {"tenant": "ä"}}))
    assert got == {"Mcp-Param-Region": "eu", "Mcp-Param-N": "-7", "Mcp-Param-Flag": "false",
                   "Mcp-Param-Tenant": "=?base64?w6Q=?="}
    assert param_headers(decls, {"region": None}) == []  # null / absent: omitted


@pytest.mark.parametrize("bad", [
    {"properties": {"x": {"type": "number", "x-mcp-header": "X"}}},  # number not allowed
    {"properties": {"x": {"type": "object", "x-mcp-header": "X"}}},
    {"properties": {"x": {"type": "string", "x-mcp-header": ""}}},
    {"properties": {"x": {"type": "string", "x-mcp-header": "Bad Name"}}},
    {"properties": {"x": {"type": "string", "x-mcp-header": "A\r\nB"}}},
    {"properties": {"x": {"type": "string", "x-mcp-header": "Dup"},
                    "y": {"type": "string", "x-mcp-header": "dup"}}},  # case-insensitive
    {"properties": {"x": {"type": "array", "items": {"type": "string",
                                                     "x-mcp-header": "X"}}}},
    {"properties": {"x": {"oneOf": [{"type": "string", "x-mcp-header": "X"}]}}},
    {"$defs": {"d": {"type": "string", "x-mcp-header": "X"}},
     "properties": {"x": {"$ref": "#/$defs/d"}}},
])
def test_invalid_declarations_reject_the_tool(bad):
    why = tool_header_declarations({"type": "object", **bad})
    assert isinstance(why, str) and "x-mcp-header" in why  # the reason, as a value


def test_input_required_answers():
    ir = ClientSession.input_required(msgspec.Raw(orjson.dumps({
        "resultType": "input_required", "requestState": "opaque+/=",
        "inputRequests": {"r": {"method": "roots/list"},
                          "e": {"method": "elicitation/create",
                                "params": {"message": "?", "requestedSchema": {}}}}})))
    assert ir is not None and ir.refused == [] and ir.state == "opaque+/="
    assert orjson.loads(ir.responses) == {"r": {"roots": []}, "e": {"action": "decline"}}
    ir = ClientSession.input_required(msgspec.Raw(orjson.dumps({
        "resultType": "input_required",
        "inputRequests": {"s": {"method": "sampling/createMessage", "params": {}}}})))
    assert ir.refused == ["s: sampling/createMessage"] and ir.state is None
    assert ClientSession.input_required(msgspec.Raw(b'{"content":[],"resultType":"complete"}')
                                        ) is None


def test_listen_and_acknowledgement():
    s = adopted()
    rid, data = s.listen(m26.SubscriptionFilter(resourceSubscriptions=["mem://a"],
                                                toolsListChanged=True))
    body = orjson.loads(data)
    assert body["method"] == "subscriptions/listen"
    assert body["params"]["notifications"] == {"toolsListChanged": True,
                                               "resourceSubscriptions": ["mem://a"]}
    ack = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                        "params": {"notifications": {"resourceSubscriptions": ["mem://a"]},
                                   "_meta": {"io.modelcontextprotocol/subscriptionId": rid}}})
    (ev,) = s.receive(ack)
    sid, honoured = ClientSession.acknowledged(ev.params)
    assert sid == rid and honoured.resourceSubscriptions == ["mem://a"]
    # the graceful close is the listen request's result
    (done,) = s.receive(orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": {
        "resultType": "complete",
        "_meta": {"io.modelcontextprotocol/subscriptionId": rid}}}))
    assert isinstance(done, Resolved) and done.method == "subscriptions/listen"
