"""An official-SDK MCP server that records the trace context of each tool call.

    python tests/support/obs_servers.py PORT

The low-level ``mcp.server.lowlevel.Server`` of the official Python SDK over
Streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (a 2025-11-25 server), with
one tool, ``traced{}``: it answers "traced" and records the request's
``_meta.traceparent`` (SEP-414) and the W3C ``traceparent`` HTTP header it
arrived with. ``GET /seen`` -> ``[{"meta": ..., "header": ...}, ...]``.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import mcp_types as types
    import uvicorn
    from mcp.server.lowlevel import Server
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    port = int(argv[0])
    seen: list[dict] = []
    last_header: dict[str, str | None] = {"traceparent": None}

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[types.Tool(
            name="traced", description="Answer and record the caller's trace context.",
            input_schema={"type": "object", "properties": {}})])

    async def call_tool(ctx, params):
        meta = params.meta or {}
        if not isinstance(meta, dict):
            meta = meta.model_dump(by_alias=True)
        seen.append({"meta": meta.get("traceparent"), "header": last_header["traceparent"]})
        return types.CallToolResult(content=[types.TextContent(type="text", text="traced")])

    server = Server("obs-test-server", version="1.0.0", on_list_tools=list_tools,
                    on_call_tool=call_tool)

    async def get_seen(request: Request) -> Response:
        return JSONResponse(seen)

    app = server.streamable_http_app(json_response=True, custom_starlette_routes=[
        Route("/seen", get_seen, methods=["GET"])])

    async def asgi(scope, receive, send):
        if scope["type"] == "http" and scope.get("method") == "POST":
            tp = dict(scope["headers"]).get(b"traceparent")
            last_header["traceparent"] = tp.decode("latin-1") if tp else None
        await app(scope, receive, send)

    print(f"listening {port}", flush=True)
    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
