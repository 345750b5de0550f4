"""MCP 2025-11-25 payload Structs: round trips, wire spelling, tolerance,
strictness, and interop with the official SDK's pydantic models."""

from __future__ import annotations

import os
from typing import Any

import msgspec
import pytest
from msgspec import UNSET, Raw

from agentd.errors import RPCError
from agentd.wire import codec
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import Request, Response

# --------------------------------------------------------------------------
# fully populated samples of every Struct
# --------------------------------------------------------------------------

ICON = t.Icon("https://x/i.png", mimeType="image/png", sizes=["48x48"], theme="dark")
ANN = t.Annotations(
    audience=["user", "assistant"], priority=0.5, lastModified="2025-01-01T00:00:00Z"
)
META = {"io.modelcontextprotocol/run-id": "run-1", "progressToken": 7}
IMPL = t.Implementation(
    "agentd", "1.0.0", title="agentd", description="d", websiteUrl="https://a", icons=[ICON]
)
TEXT_RC = t.TextResourceContents("file:///a.md", "hello", mimeType="text/markdown", _meta=META)
BLOB_RC = t.BlobResourceContents(
    "file:///a.bin", "AAEC", mimeType="application/octet-stream", _meta=META
)
TOOL_ANN = t.ToolAnnotations(
    title="Weather",
    readOnlyHint=True,
    destructiveHint=False,
    idempotentHint=True,
    openWorldHint=False,
)
TOOL = t.Tool(
    "get_weather",
    {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
    description="weather",
    title="Get weather",
    outputSchema={"type": "object"},
    annotations=TOOL_ANN,
    execution=t.ToolExecution(taskSupport="forbidden"),
    icons=[ICON],
    _meta=META,
)
RESOURCE = t.Resource(
    "file:///a.md",
    "a.md",
    title="A",
    description="desc",
    mimeType="text/markdown",
    size=12,
    icons=[ICON],
    annotations=ANN,
    _meta=META,
)
TEMPLATE = t.ResourceTemplate(
    "file:///{path}",
    "files",
    title="Files",
    description="any file",
    mimeType="text/plain",
    icons=[ICON],
    annotations=ANN,
    _meta=META,
)
CONTENT: list[Any] = [
    t.TextContent("hi", annotations=ANN, _meta=META),
    t.ImageContent("iVBORw0=", "image/png", annotations=ANN, _meta=META),
    t.AudioContent("UklGRg==", "audio/wav", annotations=ANN, _meta=META),
    t.ResourceLink(
        "file:///b",
        "b",
        title="B",
        description="bd",
        mimeType="text/plain",
        size=3,
        icons=[ICON],
        annotations=ANN,
        _meta=META,
    ),
    t.EmbeddedResource(TEXT_RC, annotations=ANN, _meta=META),
    t.EmbeddedResource(BLOB_RC),
]
SERVER_CAPS = t.ServerCapabilities(
    tools=t.ToolsCapability(listChanged=True),
    resources=t.ResourcesCapability(subscribe=True, listChanged=True),
    prompts=t.PromptsCapability(listChanged=False),
    logging={},
    completions={},
    experimental={"x": {"y": 1}},
    tasks={"list": {}},
)
CLIENT_CAPS = t.ClientCapabilities(
    experimental={"x": {}},
    roots=t.RootsCapability(listChanged=True),
    sampling={},
    elicitation={"form": {}},
    tasks={},
)

SAMPLES: list[Any] = [
    ICON,
    ANN,
    IMPL,
    t.RequestParams(_meta=META),
    t.NotificationParams(_meta=META),
    t.EmptyResult(_meta=META),
    t.PaginatedParams(cursor="c1", _meta=META),
    t.RootsCapability(listChanged=True),
    CLIENT_CAPS,
    t.ToolsCapability(listChanged=True),
    t.ResourcesCapability(subscribe=True, listChanged=False),
    t.PromptsCapability(listChanged=True),
    SERVER_CAPS,
    t.InitializeParams("2025-11-25", CLIENT_CAPS, IMPL, _meta=META),
    t.InitializeResult("2025-11-25", SERVER_CAPS, IMPL, instructions="be nice", _meta=META),
    TEXT_RC,
    BLOB_RC,
    RESOURCE,
    t.ListResourcesResult([RESOURCE], nextCursor="n", _meta=META),
    TEMPLATE,
    t.ListResourceTemplatesResult([TEMPLATE], nextCursor="n", _meta=META),
    t.ReadResourceParams("file:///a.md", _meta=META),
    t.ReadResourceResult([TEXT_RC, BLOB_RC], _meta=META),
    t.SubscribeParams("file:///inbox", _meta=META),
    t.UnsubscribeParams("file:///inbox", _meta=META),
    *CONTENT,
    TOOL_ANN,
    t.ToolExecution(taskSupport="optional"),
    TOOL,
    t.ListToolsResult([TOOL], nextCursor="n2", _meta=META),
    t.CallToolParams("get_weather", {"location": "NYC"}, _meta=META),
    t.CallToolResult(CONTENT, isError=True, structuredContent={"t": 22.5}, _meta=META),
    t.CancelledParams(requestId=4, reason="deadline", _meta=META),
    t.CancelledParams(requestId="abc"),
    t.ResourceUpdatedParams("file:///inbox", title="Inbox", _meta=META),
    t.ProgressParams("tok", 0.5, total=1.0, message="half", _meta=META),
    t.LoggingMessageParams("info", {"k": [1, 2]}, logger="srv", _meta=META),
    t.Root("file:///work", name="work", _meta=META),
    t.ListRootsResult([t.Root("file:///w")], _meta=META),
    t.ListRootsResult(),
]


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


# --------------------------------------------------------------------------
# interop with the official SDK (pydantic models of the 2025-11-25 schema)
# --------------------------------------------------------------------------


def _sdk():
    try:
        import mcp_types as sdk
        import mcp_types._v2025_11_25 as wire_sdk
    except ImportError:  # pragma: no cover
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("official MCP SDK (mcp_types) not installed")
    return sdk, wire_sdk


def _dump(model: Any) -> bytes:
    return msgspec.json.encode(model.model_dump(by_alias=True, exclude_none=True, mode="json"))


def _as_response(result: bytes, id_: int = 1) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (id_, result)


def test_sdk_initialize_result_decodes():
    sdk, _ = _sdk()
    res = sdk.InitializeResult(
        protocol_version="2025-11-25",
        capabilities=sdk.ServerCapabilities(
            resources=sdk.ResourcesCapability(subscribe=True, list_changed=True),
            tools=sdk.ToolsCapability(list_changed=True),
            logging=sdk.LoggingCapability(),
        ),
        server_info=sdk.Implementation(name="mcp-server-fs", version="0.1", title="FS"),
        instructions="use me",
    )
    m = codec.decode_response(_as_response(_dump(res)), t.InitializeResult)
    r = m.result
    assert r.protocolVersion == "2025-11-25" and r.instructions == "use me"
    assert r.capabilities.resources == t.ResourcesCapability(subscribe=True, listChanged=True)
    assert r.capabilities.tools.listChanged is True
    assert r.capabilities.logging == {} and r.capabilities.prompts is UNSET
    assert r.serverInfo == t.Implementation("mcp-server-fs", "0.1", title="FS")


def test_sdk_list_tools_result_decodes():
    sdk, _ = _sdk()
    res = sdk.ListToolsResult(
        tools=[
            sdk.Tool(
                name="get_weather",
                title="Weather",
                description="d",
                input_schema={"type": "object", "properties": {"location": {"type": "string"}}},
                output_schema={"type": "object"},
                annotations=sdk.ToolAnnotations(read_only_hint=True, open_world_hint=False),
                _meta={"k": "v"},
            ),
            sdk.Tool(name="bare", input_schema={"type": "object"}),
        ],
        next_cursor="page-2",
    )
    r = codec.decode_result(_dump(res), t.ListToolsResult)
    assert r.nextCursor == "page-2"
    a, b = r.tools
    assert a.name == "get_weather" and a.title == "Weather" and a.description == "d"
    assert a.inputSchema["properties"]["location"] == {"type": "string"}
    assert a.outputSchema == {"type": "object"}
    assert a.annotations == t.ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    assert a._meta == {"k": "v"}
    assert b == t.Tool("bare", {"type": "object"})


def test_sdk_call_tool_result_decodes():
    sdk, _ = _sdk()
    res = sdk.CallToolResult(
        content=[
            sdk.TextContent(
                text="22.5°C", annotations=sdk.Annotations(audience=["user"], priority=1.0)
            ),
            sdk.ImageContent(data="iVBO", mime_type="image/png"),
            sdk.AudioContent(data="UklG", mime_type="audio/wav"),
            sdk.ResourceLink(uri="file:///r", name="r", mime_type="text/plain", size=3),
            sdk.EmbeddedResource(
                resource=sdk.TextResourceContents(
                    uri="file:///e", text="emb", mime_type="text/plain"
                )
            ),
            sdk.EmbeddedResource(resource=sdk.BlobResourceContents(uri="file:///b", blob="AA==")),
        ],
        structured_content={"temperature": 22.5},
        is_error=False,
    )
    m = codec.decode_response(_as_response(_dump(res), 2), t.CallToolResult)
    assert type(m) is Response and m.id == 2
    r = m.result
    assert r.isError is False and r.structuredContent == {"temperature": 22.5}
    assert r.content[0] == t.TextContent(
        "22.5°C", annotations=t.Annotations(audience=["user"], priority=1.0)
    )
    assert r.content[1] == t.ImageContent("iVBO", "image/png")
    assert r.content[2] == t.AudioContent("UklG", "audio/wav")
    assert r.content[3] == t.ResourceLink("file:///r", "r", mimeType="text/plain", size=3)
    assert r.content[4] == t.EmbeddedResource(
        t.TextResourceContents("file:///e", "emb", mimeType="text/plain")
    )
    assert r.content[5] == t.EmbeddedResource(t.BlobResourceContents("file:///b", "AA=="))


def test_sdk_error_result_decodes():
    sdk, _ = _sdk()
    res = sdk.CallToolResult(content=[sdk.TextContent(text="file not found")], is_error=True)
    r = codec.decode_result(_dump(res), t.CallToolResult)
    assert r.isError is True and r.content == [t.TextContent("file not found")]


def test_sdk_resource_results_decode():
    sdk, _ = _sdk()
    lst = sdk.ListResourcesResult(
        resources=[
            sdk.Resource(
                uri="file:///work/todo.md",
                name="todo",
                title="TODO",
                description="todos",
                mime_type="text/markdown",
                size=42,
                annotations=sdk.Annotations(priority=0.2),
            )
        ],
        next_cursor="x",
    )
    r = codec.decode_result(_dump(lst), t.ListResourcesResult)
    assert r.nextCursor == "x"
    assert r.resources[0] == t.Resource(
        "file:///work/todo.md",
        "todo",
        title="TODO",
        description="todos",
        mimeType="text/markdown",
        size=42,
        annotations=t.Annotations(priority=0.2),
    )
    tpl = sdk.ListResourceTemplatesResult(
        resource_templates=[
            sdk.ResourceTemplate(uri_template="file:///{p}", name="f", mime_type="text/plain")
        ]
    )
    r = codec.decode_result(_dump(tpl), t.ListResourceTemplatesResult)
    assert r.resourceTemplates == [t.ResourceTemplate("file:///{p}", "f", mimeType="text/plain")]
    read = sdk.ReadResourceResult(
        contents=[
            sdk.TextResourceContents(
                uri="file:///work/todo.md", mime_type="text/markdown", text="- ship M2"
            ),
            sdk.BlobResourceContents(uri="file:///img", mime_type="image/png", blob="iVBO"),
        ]
    )
    r = codec.decode_result(_dump(read), t.ReadResourceResult)
    assert r.contents == [
        t.TextResourceContents("file:///work/todo.md", "- ship M2", mimeType="text/markdown"),
        t.BlobResourceContents("file:///img", "iVBO", mimeType="image/png"),
    ]
    assert codec.decode_result(_dump(sdk.EmptyResult()), t.EmptyResult) == t.EmptyResult()


def test_sdk_request_params_decode():
    sdk, _ = _sdk()
    cases = [
        (
            t.INITIALIZE,
            sdk.InitializeRequestParams(
                protocol_version="2025-11-25",
                capabilities=sdk.ClientCapabilities(roots=sdk.RootsCapability(list_changed=True)),
                client_info=sdk.Implementation(name="sdk-client", version="2.3.0"),
            ),
            t.InitializeParams(
                "2025-11-25",
                t.ClientCapabilities(roots=t.RootsCapability(listChanged=True)),
                t.Implementation("sdk-client", "2.3.0"),
            ),
        ),
        (
            t.TOOLS_CALL,
            sdk.CallToolRequestParams(
                name="subagent.spawn", arguments={"instruction": "x"}, _meta={"progressToken": 3}
            ),
            t.CallToolParams("subagent.spawn", {"instruction": "x"}, _meta={"progressToken": 3}),
        ),
        (t.TOOLS_LIST, sdk.PaginatedRequestParams(cursor="c"), t.PaginatedParams(cursor="c")),
        (t.RESOURCES_READ, sdk.ReadResourceRequestParams(uri="agent://status"), t.ReadResourceParams("agent://status")),
        (t.RESOURCES_SUBSCRIBE, sdk.SubscribeRequestParams(uri="agent://s"), t.SubscribeParams("agent://s")),
        (t.RESOURCES_UNSUBSCRIBE, sdk.UnsubscribeRequestParams(uri="agent://s"), t.UnsubscribeParams("agent://s")),
        (t.NOTIFICATION_CANCELLED, sdk.CancelledNotificationParams(request_id=5, reason="r"), t.CancelledParams(5, "r")),
        (t.NOTIFICATION_RESOURCES_UPDATED, sdk.ResourceUpdatedNotificationParams(uri="u"), t.ResourceUpdatedParams("u")),
        (t.NOTIFICATION_PROGRESS, sdk.ProgressNotificationParams(progress_token="p", progress=1.5, total=3, message="m"),
         t.ProgressParams("p", 1.5, total=3.0, message="m")),
        (t.NOTIFICATION_MESSAGE, sdk.LoggingMessageNotificationParams(level="warning", data={"a": 1}, logger="l"),
         t.LoggingMessageParams("warning", {"a": 1}, logger="l")),
    ]  # fmt: skip
    for method, model, expected in cases:
        wire = b'{"jsonrpc":"2.0","id":1,"method":"%s","params":%s}' % (
            method.encode(),
            _dump(model),
        )
        msg = codec.decode(wire)
        assert codec.decode_params(msg.method, msg.params, msg.id) == expected, method


def test_sdk_jsonrpc_envelopes_decode():
    _sdk()
    from mcp_types import jsonrpc as rpc

    req = rpc.JSONRPCRequest(jsonrpc="2.0", id="abc", method="ping")
    assert codec.decode(req.model_dump_json(by_alias=True, exclude_none=True).encode()) == Request(
        "abc", "ping"
    )
    err = rpc.JSONRPCError(
        jsonrpc="2.0", id=None, error=rpc.ErrorData(code=-32700, message="Parse error")
    )
    m = codec.decode(err.model_dump_json(by_alias=True).encode())  # keeps "id": null, "data": null
    assert m.id is None and m.error.code == -32700 and m.error.data is None


def test_our_bytes_validate_against_the_sdk_schema_models():
    """The other direction: what agentd sends, the SDK's schema-exact models accept."""
    _, w = _sdk()
    pairs = [
        (t.InitializeParams("2025-11-25", t.ClientCapabilities(), t.Implementation("agentd", "1.0.0")), w.InitializeRequestParams),
        (t.InitializeResult("2025-11-25", t.ServerCapabilities(tools=t.ToolsCapability(), resources=t.ResourcesCapability(subscribe=True)),
                            t.Implementation("agentd", "1.0.0")), w.InitializeResult),
        (t.ListToolsResult([TOOL], nextCursor="n"), w.ListToolsResult),
        (t.CallToolParams("x", {"a": 1}, _meta={"io.modelcontextprotocol/run-id": "r"}), w.CallToolRequestParams),
        (t.CallToolResult(CONTENT, isError=True, structuredContent={"a": 1}), w.CallToolResult),
        (t.ListResourcesResult([RESOURCE]), w.ListResourcesResult),
        (t.ListResourceTemplatesResult([TEMPLATE]), w.ListResourceTemplatesResult),
        (t.ReadResourceResult([TEXT_RC, BLOB_RC]), w.ReadResourceResult),
        (t.CancelledParams(4, "deadline"), w.CancelledNotificationParams),
        (t.ResourceUpdatedParams("agent://subagent/served.2"), w.ResourceUpdatedNotificationParams),
        (t.ListRootsResult(), w.ListRootsResult),
        (t.EmptyResult(), w.EmptyResult),
    ]  # fmt: skip
    for ours, model in pairs:
        wire = codec.encode(ours)
        parsed = model.model_validate_json(wire)
        redump = msgspec.json.decode(
            parsed.model_dump_json(by_alias=True, exclude_none=True).encode()
        )
        mine = msgspec.json.decode(wire)
        # every field we sent was understood (the SDK adds no unknowns of its own)
        assert _subset(mine, redump), (type(ours).__name__, mine, redump)


def _subset(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and all(k in b and _subset(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_subset, a, b))
    return a == b


def test_raw_result_passthrough_is_not_materialised():
    m = codec.decode(_as_response(b'{"huge":[' + b",".join([b"1"] * 1000) + b"]}"))
    assert isinstance(m.result, Raw)
    with pytest.raises(RPCError):
        codec.decode_result(m.result, t.CallToolResult, m.id)
