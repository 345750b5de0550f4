"""MCP 2025-11-25 payload Structs against the official SDK's pydantic models: what
the SDK writes decodes here, and what agentd writes validates there."""

from __future__ import annotations

import os
from typing import Any

import msgspec
import pytest
from mcp_samples import (
    BLOB_RC,
    CONTENT,
    RESOURCE,
    TEMPLATE,
    TEXT_RC,
    TOOL,
)
from msgspec import UNSET, Raw

from agentd.errors import RPCError
from agentd.wire import codec
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import Request, Response

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
