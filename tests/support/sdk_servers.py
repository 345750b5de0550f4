"""Official-SDK MCP servers for the client tests and benchmark (real peers).

Run as a script, one server per process, on loopback:

    python tests/support/sdk_servers.py PORT [--page-size N] [--state FILE] [--json]
                                [--era legacy|modern] [--tools-ttl MS] [--no-listen]
                                [--stateless]

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
revisions (``--era``)
    ``legacy`` (the default): a 2025-11-25 server.  The SDK serves both
    revisions on one endpoint, routing on the ``MCP-Protocol-Version``
    header; here that header is hidden from it when it names 2026-07-28, so
    the SDK's own 2025-11-25 transport answers (``server/discover`` without a
    session is refused with its HTTP 400), exactly as a server that predates
    the revision does.  ``modern``: the SDK at 2026-07-28 as well, stateless
    requests with ``subscriptions/listen`` served (the SDK's ``ListenHandler``
    on an in-memory bus), ``tools/list`` cacheable for ``--tools-ttl`` ms, and
    the 2026-only tools ``region{region, query}`` (``x-mcp-header: Region``),
    ``bad_header{}`` (an invalid ``x-mcp-header`` on an array item, so a
    conforming client excludes it) and ``ask_roots`` answered through MRTR
    (``input_required`` asking for ``roots/list``, ``requestState``
    "s-1:<first request id>"; the retry's answer, state and id are echoed),
    ``ask_elicit{}`` (an ``elicitation/create`` input request, state "e-1";
    the answer's action is echoed), ``ask_sampling`` at 2026-07-28 as an
    input request for ``sampling/createMessage``,
    ``tenant{tenant}`` whose schema gains ``x-mcp-header: Tenant`` on
    ``POST /declare`` without any list_changed (so a client with the old
    schema is answered -32020 until it re-lists).  The last request headers a tool call
    carried are kept for ``GET /headers``.  ``--no-listen`` serves no
    ``subscriptions/listen`` (the SDK then answers it -32601 / HTTP 404).
``--stateless``
    the SDK's ``stateless_http``: no 2025-11-25 sessions (and so no
    subscriptions or server-to-client requests at that revision).
control routes (plain HTTP beside ``/mcp``)
    ``POST /update?value=V`` sets ``mem://watched`` and notifies subscribers;
    ``GET /stats`` -> ``{"cancelled", "subscribe", "calls", "sampling_error",
    "tools_list", "listen", "wire"}``; ``wire`` counts the ``Mcp-Method`` of
    every 2026-07-28 POST.
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
    era = argv[argv.index("--era") + 1] if "--era" in argv else "legacy"
    tools_ttl = int(argv[argv.index("--tools-ttl") + 1]) if "--tools-ttl" in argv else 0
    modern = era == "modern"
    wire: dict[str, int] = {}  # 2026-07-28: each request's Mcp-Method, counted
    stats = {"cancelled": 0, "subscribe": 0, "calls": 0, "sampling_error": "",
             "tools_list": 0, "listen": 0, "wire": wire}
    last_headers: dict[str, str] = {}
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
    if modern:
        base_tools += [
            types.Tool(name="region", description="Echo the region header.",
                       input_schema=obj({"region": {"type": "string", "x-mcp-header": "Region"},
                                         "query": {"type": "string"}}, ["query"])),
            types.Tool(name="bad_header", description="An invalid x-mcp-header declaration.",
                       input_schema=obj({"tags": {"type": "array", "items": {
                           "type": "string", "x-mcp-header": "Tag"}}})),
            types.Tool(name="tenant", description="Echo the tenant header.",
                       input_schema=obj({"tenant": {"type": "string"}})),
            types.Tool(name="ask_elicit", description="Ask for a form (MRTR).",
                       input_schema=obj({})),
        ]
    declared = {"tenant": False}  # POST /declare: tenant's schema gains x-mcp-header

    def current_tools() -> list:
        if not declared["tenant"]:
            return base_tools + extra_tools
        return [t if t.name != "tenant" else types.Tool(
            name="tenant", description=t.description,
            input_schema=obj({"tenant": {"type": "string", "x-mcp-header": "Tenant"}}))
            for t in base_tools] + extra_tools

    async def list_tools(ctx, params):
        stats["tools_list"] += 1
        tools = current_tools()
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
        if name == "ask_sampling" and ctx.protocol_version != "2026-07-28":
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
        if name == "ask_roots" and modern:  # MRTR: ask in the result, read the retry
            answers = params.input_responses or {}
            if "roots" not in answers:
                return types.InputRequiredResult(  # the state names the first request's id
                    input_requests={"roots": types.ListRootsRequest()},
                    request_state=f"s-1:{ctx.request_id}")
            got = answers["roots"]
            n = len(got.roots) if hasattr(got, "roots") else len(got.get("roots", []))
            return text(f"roots={n} state={params.request_state} id={ctx.request_id}")
        if name == "ask_elicit" and modern:  # MRTR: a form the client may decline
            answers = params.input_responses or {}
            if "who" not in answers:
                return types.InputRequiredResult(input_requests={"who": types.ElicitRequest(
                    params=types.ElicitRequestFormParams(
                        message="your name?", requested_schema={
                            "type": "object", "properties": {"name": {"type": "string"}}}))},
                    request_state="e-1")
            got = answers["who"]
            action = got.action if hasattr(got, "action") else got.get("action")
            return text(f"action={action} state={params.request_state}")
        if name == "ask_sampling" and modern and ctx.protocol_version == "2026-07-28":
            if not params.input_responses:
                return types.InputRequiredResult(input_requests={"llm": types.CreateMessageRequest(
                    params=types.CreateMessageRequestParams(messages=[types.SamplingMessage(
                        role="user", content=types.TextContent(type="text", text="hi"))],
                        max_tokens=5))})
            stats["sampling_error"] = "answered?!"
            return text("sampling answered?!")
        if name == "tenant":
            return text(json.dumps({"tenant": last_headers.get("mcp-param-tenant")}))
        if name == "region":
            return text(json.dumps({"region": last_headers.get("mcp-param-region"),
                                    "method": last_headers.get("mcp-method"),
                                    "name": last_headers.get("mcp-name")}))
        if name == "ask_roots":
            roots = await ctx.session.list_roots()
            return text(f"roots={len(roots.roots)}")
        if name == "grow":
            n = len(extra_tools) + 1
            extra_tools.append(types.Tool(name=f"grown_{n}", description="new",
                                          input_schema=obj({})))
            if modern and ctx.protocol_version == "2026-07-28":
                await bus.publish(ToolsListChanged())
            else:
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

    from mcp.server.caching import CacheHint
    from mcp.server.subscriptions import (
        InMemorySubscriptionBus,
        ListenHandler,
        ResourceUpdated,
        ToolsListChanged,
    )

    bus = InMemorySubscriptionBus()
    listen_handler = ListenHandler(bus)

    async def listen(ctx, params):
        stats["listen"] += 1
        return await listen_handler(ctx, params)

    modern_kw: dict = {}
    if modern:
        modern_kw = {"on_subscriptions_listen": None if "--no-listen" in argv else listen,
                     "cache_hints": {"tools/list": CacheHint(ttl_ms=tools_ttl)}}
    server = Server("sdk-test-server", version="1.0.0", instructions="Be kind to the tools.",
                    on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_resources=list_resources, on_list_resource_templates=list_templates,
                    on_read_resource=read_resource, on_subscribe_resource=subscribe,
                    on_unsubscribe_resource=unsubscribe, **modern_kw)
    opts = server.create_initialization_options(
        NotificationOptions(tools_changed=True, resources_changed=True))
    server.create_initialization_options = lambda *a, **k: opts  # type: ignore[method-assign]

    async def update(request: Request) -> Response:
        watched["value"] = request.query_params["value"]
        if state:
            state.write_text(watched["value"])
        if modern:
            await bus.publish(ResourceUpdated(uri="mem://watched"))
        for key, session in list(subscribers.get("mem://watched", {}).items()):
            try:
                await session.send_resource_updated("mem://watched")
            except Exception:
                subscribers["mem://watched"].pop(key, None)
        return JSONResponse({"value": watched["value"]})

    async def get_stats(request: Request) -> Response:
        return JSONResponse(stats)

    app = server.streamable_http_app(json_response=json_response,
                                     stateless_http="--stateless" in argv,
                                     custom_starlette_routes=[
        Route("/update", update, methods=["POST"]),
        Route("/stats", get_stats, methods=["GET"]),
    ])
    async def get_headers(request: Request) -> Response:
        return JSONResponse(last_headers)

    async def declare(request: Request) -> Response:
        declared["tenant"] = True  # no list_changed: a client learns it from -32020
        return JSONResponse(declared)

    app.router.routes.append(Route("/headers", get_headers, methods=["GET"]))
    app.router.routes.append(Route("/declare", declare, methods=["POST"]))
    inner = app
    version_header = b"mcp-protocol-version"

    async def asgi(scope, receive, send):
        if scope["type"] == "http":
            hdrs = scope["headers"]
            if modern:
                got = {k.decode("latin-1"): v.decode("latin-1") for k, v in hdrs
                       if k.startswith(b"mcp-")}
                if scope["method"] == "POST" and "mcp-method" in got:
                    wire[got["mcp-method"]] = wire.get(got["mcp-method"], 0) + 1
                if got.get("mcp-method") == "tools/call":
                    last_headers.clear()
                    last_headers.update(got)
            elif any(k == version_header and v == b"2026-07-28" for k, v in hdrs):
                # a 2025-11-25 server never routes on this revision's header
                scope = dict(scope, headers=[(k, v) for k, v in hdrs if k != version_header])
        await inner(scope, receive, send)

    print(f"listening {port}", flush=True)
    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
