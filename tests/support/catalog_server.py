"""An official-SDK (2.3) MCP server whose catalogue holds tools a client must leave out.

    python tests/support/catalog_server.py PORT [--era legacy|modern]

The low-level ``mcp.server.lowlevel.Server`` over Streamable HTTP at
``http://127.0.0.1:PORT/mcp`` (JSON answers).  ``--era modern`` (the default)
serves 2026-07-28 beside 2025-11-25; ``legacy`` hides the 2026 version header
from the SDK, so only 2025-11-25 answers (as in tests/support/sdk_servers.py).

tools/list (two pages of four) -- the good ones:
    ``echo{text}``, ``nullable{region}`` (``x-mcp-header: Region`` on
    ``"type": ["string", "null"]``: valid JSON Schema, kept; null means the
    header is absent), ``maybe_task{}`` (``execution.taskSupport: "optional"``),
    ``external_ref{}`` (a non-local ``$ref``: never fetched, kept);
and the ones a client must exclude, each for its own reason:
    ``two_types{v}`` (``x-mcp-header`` on ``["string", "integer"]``),
    ``deep{}`` (an input schema 200 levels (400 JSON containers) deep: it decodes, but no walk of it may recurse), ``abyss{}`` (1,000 levels:
    beyond the JSON decoder's own nesting guard), ``dangling_ref{}`` (a local
    ``$ref`` to a definition that is not there), ``needs_task{}``
    (``execution.taskSupport: "required"``).

The deep schemas are more than the SDK's own serialiser nests (pydantic refuses
them), so those tools are listed with markers the ASGI wrapper below swaps for
the deep JSON in the answer's bytes: the hostile part of this peer, on purpose.
Every tool call echoes its name, the arguments and the ``mcp-param-*`` headers
it carried.
"""

from __future__ import annotations

import json
import sys

DEPTH = 200
ABYSS = 1000
MARKER = {"x-catalog-deep-marker": "deep"}
ABYSS_MARKER = {"x-catalog-deep-marker": "abyss"}


def deep_schema_json(depth: int = DEPTH) -> bytes:
    """The schema's JSON, built as text (the stdlib encoder recurses too)."""
    head = b'{"type":"object","properties":{"x":' * depth
    return head + b'{"type":"string"}' + b"}}" * depth


def main(argv: list[str]) -> None:
    import mcp_types as types
    import uvicorn
    from mcp.server.lowlevel import Server

    port = int(argv[0])
    era = argv[argv.index("--era") + 1] if "--era" in argv else "modern"
    modern = era == "modern"

    def obj(props: dict, **extra) -> dict:
        return {"type": "object", "properties": props, **extra}

    tools = [
        types.Tool(name="echo", description="Echo the text back.",
                   input_schema=obj({"text": {"type": "string"}}, required=["text"])),
        types.Tool(name="nullable", description="A nullable mirrored header.",
                   input_schema=obj({"region": {"type": ["string", "null"],
                                                "x-mcp-header": "Region"}})),
        types.Tool(name="maybe_task", description="Task augmentation optional.",
                   input_schema=obj({}), execution=types.ToolExecution(task_support="optional")),
        types.Tool(name="external_ref", description="A non-local $ref.",
                   input_schema=obj({"x": {"$ref": "https://example.invalid/x.json"}})),
        types.Tool(name="two_types", description="A header on a two-type property.",
                   input_schema=obj({"v": {"type": ["string", "integer"],
                                           "x-mcp-header": "V"}})),
        types.Tool(name="deep", description="A schema far too deep.",
                   input_schema=obj({"x": MARKER})),
        types.Tool(name="abyss", description="A schema beyond the decoder's guard.",
                   input_schema=obj({"x": ABYSS_MARKER})),
        types.Tool(name="dangling_ref", description="A $ref to nowhere.",
                   input_schema=obj({"x": {"$ref": "#/$defs/missing"}})),
        types.Tool(name="needs_task", description="Task augmentation required.",
                   input_schema=obj({}), execution=types.ToolExecution(task_support="required")),
    ]
    page = 4
    seen_headers: dict[str, str] = {}

    async def list_tools(ctx, params):
        start = int(params.cursor) if params and params.cursor else 0
        nxt = str(start + page) if start + page < len(tools) else None
        return types.ListToolsResult(tools=tools[start:start + page], next_cursor=nxt)

    async def call_tool(ctx, params):
        body = json.dumps({"tool": params.name, "arguments": params.arguments or {},
                           "headers": seen_headers}, sort_keys=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=body)])

    server = Server("catalog-test-server", version="1.0.0",
                    on_list_tools=list_tools, on_call_tool=call_tool)
    app = server.streamable_http_app(json_response=True)
    marker = json.dumps(MARKER, separators=(",", ":")).encode()
    deep = deep_schema_json()
    abyss_marker = json.dumps(ABYSS_MARKER, separators=(",", ":")).encode()
    abyss = deep_schema_json(ABYSS)
    version_header = b"mcp-protocol-version"

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        hdrs = scope["headers"]
        if not modern and any(k == version_header and v == b"2026-07-28" for k, v in hdrs):
            scope = dict(scope, headers=[(k, v) for k, v in hdrs if k != version_header])
        params = {k.decode("latin-1"): v.decode("latin-1") for k, v in hdrs
                  if k.startswith(b"mcp-param-")}
        if any(k == b"mcp-method" and v == b"tools/call" for k, v in hdrs) or params:
            seen_headers.clear()
            seen_headers.update(params)
        if scope["method"] != "POST":  # a GET stream is never buffered
            await app(scope, receive, send)
            return
        start: dict = {}
        chunks: list[bytes] = []

        async def swap(message):  # buffer the (JSON) answer, swap the marker, send
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                body = b"".join(chunks).replace(marker, deep).replace(abyss_marker, abyss)
                headers = [(k, v) for k, v in start.get("headers", [])
                           if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
                await send({**start, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
            await send(message)

        await app(scope, receive, swap)

    print(f"listening {port}", flush=True)
    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
