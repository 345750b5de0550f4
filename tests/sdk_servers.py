"""Official-SDK MCP servers for the client tests and benchmark (real peers).

Run as a script, one server per process, on loopback:

    python tests/sdk_servers.py PORT [--page-size N] [--state FILE] [--json]

It is the low-level ``mcp.server.lowlevel.Server`` of the official Python SDK
(2.x) over Streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (SSE answers, or
JSON answers with ``--json``), advertising tools and resources with
``listChanged`` and ``subscribe``:

tools
    ``echo{text}`` (text back), ``add{a,b}`` (integers), ``fail{}`` (a result
    with ``isError: true``), ``weather{city}`` (``outputSchema`` and matching
    ``structuredContent``), ``bad_weather{}`` (structuredContent that does
    *not* match its outputSchema), ``slow{seconds}`` (sleeps; counts its
    cancellations), ``ask_sampling{}`` (asks the client for
    ``sampling/createMessage``), ``ask_ping{}`` / ``ask_roots{}`` (ping /
    roots/list the client), ``grow{}`` (adds a tool, sends
    ``notifications/tools/list_changed``), ``whoami{}`` (echoes the request
    ``_meta``).  ``tools/list`` is paginated with ``--page-size`` tools a page.
resources
    ``mem://greeting`` (text), ``mem://blob`` (binary), ``mem://watched``
    (text; its value lives in ``--state FILE`` when given, so it survives a
    restart and a test can change it while the server is down); template
    ``mem://items/{id}``; any other URI -> -32002 with ``data.uri``.
control routes (plain HTTP beside ``/mcp``)
    ``POST /update?value=V`` sets ``mem://watched`` and notifies subscribers;
    ``GET /stats`` -> ``{"cancelled", "subscribe", "calls", "sampling_error"}``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    import mcp_types as types
    import uvicorn
    from mcp.server.lowlevel import Server
    from mcp.server.lowlevel.server import NotificationOptions
    from mcp.shared.exceptions import MCPError
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    port = int(argv[0])
    page_size = int(argv[argv.index("--page-size") + 1]) if "--page-size" in argv else 3
    state = Path(argv[argv.index("--state") + 1]) if "--state" in argv else None
    json_response = "--json" in argv
    stats = {"cancelled": 0, "subscribe": 0, "calls": 0, "sampling_error": ""}
    subscribers: dict[str, dict[int, object]] = {}
    extra_tools: list[types.Tool] = []
    watched = {"value": state.read_text() if state and state.exists() else "v0"}

    def obj(props: dict, required: list[str] | None = None) -> dict:
        return {"type": "object", "properties": props, "required": required or []}

    weather_out = obj({"temperature": {"type": "number"}, "city": {"type": "string"}},
                      ["temperature", "city"])
    base_tools = [
        types.Tool(name="echo", description="Echo the text back.",
                   input_schema=obj({"text": {"type": "string"}}, ["text"])),
        types.Tool(name="add", description="Add two integers.",
                   input_schema=obj({"a": {"type": "integer"}, "b": {"type": "integer"}},
                                    ["a", "b"])),
        types.Tool(name="fail", description="Always reports a tool error.",
                   input_schema=obj({})),
        types.Tool(name="weather", description="Weather, structured.",
                   input_schema=obj({"city": {"type": "string"}}, ["city"]),
                   output_schema=weather_out),
        types.Tool(name="bad_weather", description="Structured output that breaks its schema.",
                   input_schema=obj({}), output_schema=weather_out),
        types.Tool(name="slow", description="Sleep a while.",
                   input_schema=obj({"seconds": {"type": "number"}})),
        types.Tool(name="ask_sampling", description="Ask the client to sample.",
                   input_schema=obj({})),
        types.Tool(name="ask_ping", description="Ping the client.", input_schema=obj({})),
        types.Tool(name="ask_roots", description="List the client's roots.",
                   input_schema=obj({})),
        types.Tool(name="grow", description="Add a tool and announce it.",
                   input_schema=obj({})),
        types.Tool(name="whoami", description="Echo the request _meta.", input_schema=obj({}),
                   annotations=types.ToolAnnotations(read_only_hint=True)),
    ]

    async def list_tools(ctx, params):
        tools = base_tools + extra_tools
        start = int(params.cursor) if params and params.cursor else 0
        page = tools[start:start + page_size]
        nxt = str(start + page_size) if start + page_size < len(tools) else None
        return types.ListToolsResult(tools=page, next_cursor=nxt)

    def text(s: str, is_error: bool = False, structured=None):
        return types.CallToolResult(content=[types.TextContent(type="text", text=s)],
                                    is_error=is_error, structured_content=structured)

    async def call_tool(ctx, params):
        stats["calls"] += 1
        name, args = params.name, params.arguments or {}
        if name == "echo":
            return text(args["text"])
        if name == "add":
            return text(str(args["a"] + args["b"]))
        if name == "fail":
            return text("the tool failed: no such file", is_error=True)
        if name == "weather":
            return text(f"22.5 C in {args['city']}", structured={"temperature": 22.5,
                                                                  "city": args["city"]})
        if name == "bad_weather":
            return text("oops", structured={"temperature": "warm"})
        if name == "slow":
            try:
                await asyncio.sleep(float(args.get("seconds", 30)))
            except BaseException:
                stats["cancelled"] += 1
                raise
            return text("slept")
        if name == "ask_sampling":
            try:
                await ctx.session.create_message(
                    messages=[types.SamplingMessage(
                        role="user", content=types.TextContent(type="text", text="hi"))],
                    max_tokens=5)
            except MCPError as exc:
                stats["sampling_error"] = f"{exc.code}"
                return text(f"sampling refused: {exc.code} {exc.message}", is_error=True)
            return text("sampling accepted?!")
        if name == "ask_ping":
            await ctx.session.send_ping()
            return text("client answered ping")
        if name == "ask_roots":
            roots = await ctx.session.list_roots()
            return text(f"roots={len(roots.roots)}")
        if name == "grow":
            n = len(extra_tools) + 1
            extra_tools.append(types.Tool(name=f"grown_{n}", description="new",
                                          input_schema=obj({})))
            await ctx.session.send_tool_list_changed()
            return text(f"grown_{n}")
        if name == "whoami":
            meta = params.meta or {}
            if not isinstance(meta, dict):
                meta = meta.model_dump(by_alias=True)
            return text(json.dumps(meta))
        if name.startswith("grown_"):
            return text(name)
        raise MCPError(-32602, f"Unknown tool: {name}")

    resources = [
        types.Resource(uri="mem://greeting", name="greeting", mime_type="text/plain",
                       description="A friendly greeting", size=5),
        types.Resource(uri="mem://blob", name="blob", mime_type="application/octet-stream"),
        types.Resource(uri="mem://watched", name="watched", mime_type="text/plain"),
    ]

    async def list_resources(ctx, params):
        return types.ListResourcesResult(resources=resources)

    async def list_templates(ctx, params):
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template="mem://items/{id}", name="items")])

    async def read_resource(ctx, params):
        uri = str(params.uri)
        if uri == "mem://greeting":
            body = types.TextResourceContents(uri=uri, mime_type="text/plain", text="hello")
        elif uri == "mem://blob":
            body = types.BlobResourceContents(uri=uri, mime_type="application/octet-stream",
                                              blob=base64.b64encode(b"\x00\x01\x02").decode())
        elif uri == "mem://watched":
            body = types.TextResourceContents(uri=uri, mime_type="text/plain",
                                              text=watched["value"])
        else:
            raise MCPError(-32002, "Resource not found", {"uri": uri})
        return types.ReadResourceResult(contents=[body])

    async def subscribe(ctx, params):
        stats["subscribe"] += 1
        subscribers.setdefault(str(params.uri), {})[id(ctx.session)] = ctx.session
        return types.EmptyResult()

    async def unsubscribe(ctx, params):
        subscribers.get(str(params.uri), {}).pop(id(ctx.session), None)
        return types.EmptyResult()

    server = Server("sdk-test-server", version="1.0.0", instructions="Be kind to the tools.",
                    on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_resources=list_resources, on_list_resource_templates=list_templates,
                    on_read_resource=read_resource, on_subscribe_resource=subscribe,
                    on_unsubscribe_resource=unsubscribe)
    opts = server.create_initialization_options(
        NotificationOptions(tools_changed=True, resources_changed=True))
    server.create_initialization_options = lambda *a, **k: opts  # type: ignore[method-assign]

    async def update(request: Request) -> Response:
        watched["value"] = request.query_params["value"]
        if state:
            state.write_text(watched["value"])
        for key, session in list(subscribers.get("mem://watched", {}).items()):
            try:
                await session.send_resource_updated("mem://watched")
            except Exception:
                subscribers["mem://watched"].pop(key, None)
        return JSONResponse({"value": watched["value"]})

    async def get_stats(request: Request) -> Response:
        return JSONResponse(stats)

    app = server.streamable_http_app(json_response=json_response, custom_starlette_routes=[
        Route("/update", update, methods=["POST"]),
        Route("/stats", get_stats, methods=["GET"]),
    ])
    print(f"listening {port}", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
