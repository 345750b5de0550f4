"""Fully populated samples of every MCP 2025-11-25 payload Struct (agentd.wire.mcp_types),
for the wire tests: tests/wire/test_wire_mcp_types.py (round trips, spelling,
tolerance, strictness) and tests/wire/test_wire_mcp_types_sdk.py (the official
SDK's models)."""

from __future__ import annotations

from typing import Any

from agentd.wire import mcp_types as t

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
