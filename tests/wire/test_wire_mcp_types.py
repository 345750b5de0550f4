"""MCP 2025-11-25 payload Structs: round trips, wire spelling, tolerance and
strictness (interop with the official SDK's models: test_wire_mcp_types_sdk.py)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from mcp_samples import (
    CONTENT,
    IMPL,
    SAMPLES,
    TEMPLATE,
    TOOL,
)
from msgspec import UNSET

from agentd.errors import RPCError
from agentd.wire import codec
from agentd.wire import mcp_types as t


def _id(v: Any) -> str:
    return type(v).__name__


def _walk_objects(v: Any):
    if isinstance(v, dict):
        yield v
        for x in v.values():
            yield from _walk_objects(x)
    elif isinstance(v, list):
        for x in v:
            yield from _walk_objects(x)


# Free-form maps whose keys are data, not schema field names.
FREEFORM = {"_meta", "inputSchema", "outputSchema", "structuredContent", "arguments",
            "experimental", "data", "properties", "tasks", "logging", "completions",
            "sampling", "elicitation"}  # fmt: skip


def _schema_keys(v: Any):
    if isinstance(v, dict):
        for k, x in v.items():
            yield k
            if k not in FREEFORM:
                yield from _schema_keys(x)
    elif isinstance(v, list):
        for x in v:
            yield from _schema_keys(x)


# --------------------------------------------------------------------------
# round trips and wire spelling
# --------------------------------------------------------------------------


@pytest.mark.parametrize("obj", SAMPLES, ids=_id)
def test_round_trip(obj):
    wire = codec.encode(obj)
    back = codec.decoder_for(type(obj)).decode(wire)
    assert back == obj
    assert codec.encode(back) == wire


@pytest.mark.parametrize("obj", SAMPLES, ids=_id)
def test_wire_keys_are_camel_case(obj):
    for key in _schema_keys(msgspec.json.decode(codec.encode(obj))):
        assert key == "_meta" or "_" not in key, key


@pytest.mark.parametrize(
    "obj", [o for o in SAMPLES if getattr(o, "_meta", UNSET) is not UNSET], ids=_id
)
def test_meta_key_is_exact_on_the_wire(obj):
    d = msgspec.json.decode(codec.encode(obj))
    assert d["_meta"] == obj._meta
    assert "meta" not in d and "Meta" not in d


def test_camel_case_spellings():
    d = msgspec.json.decode(codec.encode(TOOL))
    assert {"inputSchema", "outputSchema", "annotations", "_meta"} <= d.keys()
    assert set(d["annotations"]) == {
        "title",
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
    }
    assert d["execution"] == {"taskSupport": "forbidden"}
    d = msgspec.json.decode(codec.encode(t.InitializeParams("v", t.ClientCapabilities(), IMPL)))
    assert set(d) == {"protocolVersion", "capabilities", "clientInfo"}
    assert "websiteUrl" in d["clientInfo"]
    d = msgspec.json.decode(codec.encode(t.ListResourceTemplatesResult([TEMPLATE], nextCursor="c")))
    assert set(d) == {"resourceTemplates", "nextCursor"}
    assert "uriTemplate" in d["resourceTemplates"][0]
    d = msgspec.json.decode(codec.encode(t.CallToolResult([], isError=True, structuredContent={})))
    assert d == {"content": [], "isError": True, "structuredContent": {}}
    assert msgspec.json.decode(codec.encode(t.CancelledParams(3, "r"))) == {
        "requestId": 3,
        "reason": "r",
    }


def test_unset_fields_are_omitted():
    assert codec.encode(t.Tool("x", {})) == b'{"name":"x","inputSchema":{}}'
    assert codec.encode(t.Implementation("a", "1")) == b'{"name":"a","version":"1"}'
    assert codec.encode(t.ClientCapabilities()) == b"{}"
    assert codec.encode(t.PaginatedParams()) == b"{}"
    assert codec.encode(t.EmptyResult()) == b"{}"
    assert codec.encode(t.TextContent("x")) == b'{"type":"text","text":"x"}'
    assert codec.encode(t.CallToolResult([])) == b'{"content":[]}'  # isError false omitted
    assert codec.encode(t.CancelledParams()) == b"{}"
    assert codec.encode(t.ListToolsResult([])) == b'{"tools":[]}'


def test_unset_is_falsy_and_default():
    caps = codec.decode_result(b"{}", t.ServerCapabilities)
    assert caps.tools is UNSET and not caps.tools and not caps.resources
    r = codec.decode_result(b'{"content":[]}', t.CallToolResult)
    assert r.isError is False and r.structuredContent is UNSET


def test_handshake_bytes_match_the_spec():
    params = t.InitializeParams(
        t.LATEST_PROTOCOL_VERSION, t.ClientCapabilities(), t.Implementation("agentd", "1.0.0")
    )
    wire = codec.encode_request(1, t.INITIALIZE, params)
    assert msgspec.json.decode(wire) == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "agentd", "version": "1.0.0"},
        },
    }
    assert msgspec.json.decode(codec.encode_notification(t.NOTIFICATION_INITIALIZED)) == {
        "jsonrpc": "2.0",
        "method": "notifications/initialized",
    }


def test_self_mcp_capabilities_bytes():
    caps = t.ServerCapabilities(
        tools=t.ToolsCapability(), resources=t.ResourcesCapability(subscribe=True)
    )
    assert codec.encode(caps) == b'{"tools":{},"resources":{"subscribe":true}}'


def test_roots_list_answer_and_ping_answer():
    assert codec.encode(t.ListRootsResult()) == b'{"roots":[]}'
    assert msgspec.json.decode(codec.encode_response(5, t.EmptyResult())) == {
        "jsonrpc": "2.0",
        "id": 5,
        "result": {},
    }


def test_tools_call_request_matches_the_spec_example():
    p = t.CallToolParams(
        "get_weather", {"location": "NYC"}, _meta={"io.modelcontextprotocol/run-id": "<run_id>"}
    )
    assert msgspec.json.decode(codec.encode_request(2, t.TOOLS_CALL, p)) == {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "get_weather",
            "arguments": {"location": "NYC"},
            "_meta": {"io.modelcontextprotocol/run-id": "<run_id>"},
        },
    }


def test_constants():
    assert t.LATEST_PROTOCOL_VERSION == "2025-11-25"
    assert t.SUPPORTED_PROTOCOL_VERSIONS == ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
    assert t.TOOLS_CALL == "tools/call"
    assert t.NOTIFICATION_RESOURCES_UPDATED == "notifications/resources/updated"
    assert t.NOTIFICATION_TOOLS_LIST_CHANGED == "notifications/tools/list_changed"
    assert codec.RESULT_TYPES[t.TOOLS_CALL] is t.CallToolResult


# --------------------------------------------------------------------------
# tolerance: unknown extra fields at every level
# --------------------------------------------------------------------------


def _inject_unknown(v: Any) -> Any:
    """Add unknown keys to every schema object (not inside free-form maps)."""
    if isinstance(v, dict):
        out = {k: (x if k in FREEFORM else _inject_unknown(x)) for k, x in v.items()}
        out["x-future-field"] = {"nested": [1, {"deep": True}]}
        out["zzUnknown"] = None
        return out
    if isinstance(v, list):
        return [_inject_unknown(x) for x in v]
    return v


@pytest.mark.parametrize("obj", SAMPLES, ids=_id)
def test_unknown_fields_tolerated_at_every_level(obj):
    polluted = _inject_unknown(msgspec.json.decode(codec.encode(obj)))
    n_injected = msgspec.json.encode(polluted).count(b"x-future-field")
    assert n_injected >= 1
    back = codec.decoder_for(type(obj)).decode(msgspec.json.encode(polluted))
    assert back == obj
    assert b"x-future-field" not in codec.encode(back)


def test_unknown_fields_tolerated_in_nested_structs():
    payload = {
        "tools": [
            {
                "name": "t",
                "inputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": True, "newHint": 1},
                "execution": {"taskSupport": "optional", "future": 2},
                "icons": [{"src": "s", "wat": 3}],
                "brandNew": {"a": 1},
            }
        ],
        "resultType": "complete",
        "ttlMs": 0,
    }
    r = codec.decode_result(msgspec.json.encode(payload), t.ListToolsResult)
    assert r.tools[0].annotations == t.ToolAnnotations(readOnlyHint=True)
    assert r.tools[0].execution == t.ToolExecution(taskSupport="optional")
    assert r.tools[0].icons == [t.Icon("s")]


# --------------------------------------------------------------------------
# strictness: missing required fields are errors
# --------------------------------------------------------------------------


def _required(tp: type) -> tuple[str, ...]:
    info = msgspec.inspect.type_info(tp)
    return tuple(f.encode_name for f in info.fields if f.required)


@pytest.mark.parametrize("obj", [o for o in SAMPLES if _required(type(o))], ids=_id)
def test_missing_required_fields_rejected(obj):
    tp = type(obj)
    full = msgspec.json.decode(codec.encode(obj))
    req = _required(tp)
    for name in req:
        broken = {k: v for k, v in full.items() if k != name}
        with pytest.raises(RPCError) as ei:
            codec.decode_result(msgspec.json.encode(broken), tp)
        assert name in ei.value.message


@pytest.mark.parametrize(
    "payload",
    [
        {"content": [{"type": "text"}]},
        {"content": [{"type": "image", "data": "x"}]},
        {"content": [{"type": "resource_link", "uri": "u"}]},
        {"content": [{"type": "resource", "resource": {"uri": "u"}}]},
        {"content": [{"type": "resource", "resource": {"text": "t"}}]},
        {"content": [{"text": "no type"}]},
        {"content": [{"type": "hologram"}, {"type": "text"}]},
        {"content": "nope"},
        {},
    ],
)
def test_malformed_content_rejected(payload):
    with pytest.raises(RPCError):
        codec.decode_result(msgspec.json.encode(payload), t.CallToolResult)


def test_wrong_types_rejected():
    for tp, payload in [
        (t.ListToolsResult, {"tools": [{"name": "x", "inputSchema": []}]}),
        (t.InitializeResult, {"protocolVersion": 1, "capabilities": {}, "serverInfo": {"name": "a", "version": "1"}}),
        (t.ServerCapabilities, {"resources": {"subscribe": "yes"}}),
        (t.ReadResourceResult, {"contents": [{"uri": "u", "text": 5}]}),
        (t.ListResourcesResult, {"resources": [{"uri": "u", "name": "n", "size": "big"}]}),
    ]:  # fmt: skip
        with pytest.raises(RPCError):
            codec.decode_result(msgspec.json.encode(payload), tp)


# --------------------------------------------------------------------------
# content union and forward compatibility
# --------------------------------------------------------------------------


def test_content_blocks_decode_to_their_classes():
    r = codec.decode_result(codec.encode(t.CallToolResult(CONTENT)), t.CallToolResult)
    assert [type(b) for b in r.content] == [type(b) for b in CONTENT]
    assert isinstance(r.content[4].resource, t.TextResourceContents)
    assert isinstance(r.content[5].resource, t.BlobResourceContents)
    assert all(isinstance(b, t.AnyContent) for b in r.content)


def test_unknown_content_type_is_kept_not_fatal():
    payload = {
        "content": [
            {"type": "text", "text": "a"},
            {"type": "hologram", "voxels": [1, 2], "_meta": {"k": 1}},
            {"type": "image", "data": "x", "mimeType": "image/png"},
        ],
        "isError": True,
        "structuredContent": {"k": 1},
        "_meta": {"m": 1},
    }
    r = codec.decode_result(msgspec.json.encode(payload), t.CallToolResult)
    assert r.isError is True and r.structuredContent == {"k": 1} and r._meta == {"m": 1}
    a, u, i = r.content
    assert a == t.TextContent("a") and i == t.ImageContent("x", "image/png")
    assert isinstance(u, t.UnknownContent) and isinstance(u, t.AnyContent)
    assert u.type == "hologram" and u["voxels"] == [1, 2]
    # re-encodes verbatim
    assert msgspec.json.decode(codec.encode(r))["content"][1] == payload["content"][1]


def test_resource_contents_blob_wins_over_text():
    r = codec.decode_result(
        b'{"contents":[{"uri":"u","text":"t","blob":"AA=="}]}', t.ReadResourceResult
    )
    assert isinstance(r.contents[0], t.BlobResourceContents)


# --------------------------------------------------------------------------
# params decoding for every method agentd types
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params"),
    [
        (t.INITIALIZE, t.InitializeParams("2025-06-18", t.ClientCapabilities(), IMPL)),
        (t.PING, t.RequestParams()),
        (t.TOOLS_LIST, t.PaginatedParams(cursor="c")),
        (t.TOOLS_CALL, t.CallToolParams("x", {"a": 1}, _meta={"progressToken": 1})),
        (t.RESOURCES_LIST, t.PaginatedParams()),
        (t.RESOURCES_TEMPLATES_LIST, t.PaginatedParams(cursor="z")),
        (t.RESOURCES_READ, t.ReadResourceParams("agent://status")),
        (t.RESOURCES_SUBSCRIBE, t.SubscribeParams("agent://subagent/served.2")),
        (t.RESOURCES_UNSUBSCRIBE, t.UnsubscribeParams("agent://subagent/served.2")),
        (t.ROOTS_LIST, t.RequestParams()),
        (t.NOTIFICATION_INITIALIZED, t.NotificationParams()),
        (t.NOTIFICATION_CANCELLED, t.CancelledParams(7, "deadline")),
        (t.NOTIFICATION_PROGRESS, t.ProgressParams(1, 2.0, total=4.0)),
        (t.NOTIFICATION_MESSAGE, t.LoggingMessageParams("error", "boom")),
        (t.NOTIFICATION_RESOURCES_UPDATED, t.ResourceUpdatedParams("file:///inbox")),
        (t.NOTIFICATION_RESOURCES_LIST_CHANGED, t.NotificationParams()),
        (t.NOTIFICATION_TOOLS_LIST_CHANGED, t.NotificationParams()),
    ],
)
def test_decode_params_per_method(method, params):
    msg = codec.decode(codec.encode_request(1, method, params))
    assert codec.decode_params(msg.method, msg.params, msg.id) == params


def test_call_tool_params_meta_round_trips_as_meta():
    wire = codec.encode_request(3, t.TOOLS_CALL, t.CallToolParams("n", _meta={"a": 1}))
    assert b'"_meta":{"a":1}' in wire
    msg = codec.decode(wire)
    assert codec.decode_params(msg.method, msg.params)._meta == {"a": 1}

