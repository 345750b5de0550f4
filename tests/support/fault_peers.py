"""An official-SDK MCP server whose credentials get revoked mid-run (a real peer).

    python tests/support/fault_peers.py PORT [--bearer TOKEN] [--ref-url URL] [--legacy]
                                     [--tls CERT KEY]

``--legacy`` takes ``server/discover`` away, so clients speak 2025-11-25 with it
(sessions and ``ping``, which 2026-07-28 no longer has).

The low-level ``mcp.server.lowlevel.Server`` of the official Python SDK over
Streamable HTTP at ``http://127.0.0.1:PORT/mcp``, behind a bearer check (when
``--bearer`` is given) done by an ASGI wrapper, the way a deployment puts auth
in front of an SDK server:

tools
    ``echo{text}`` (text back); ``contradict{}`` (listed, answered with
    JSON-RPC -32602); ``throttle{n, status, retry_after}`` (the next n POSTs are
    answered ``status``, default 429, with ``Retry-After: retry_after``, default 1); ``logout{}`` answers, then revokes the bearer:
    every later request is answered ``401`` (credentials revoked after connect);
    with ``--ref-url``, ``refd{text}`` whose inputSchema and outputSchema put
    ``"$ref": URL`` on a property (a hostile schema pointing anywhere).
control routes (beside ``/mcp``, never behind the bearer)
    ``POST /revoke``, ``POST /restore``; ``GET /stats`` -> ``{"calls", "refused"}``.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> None:
    import mcp_types as types
    import uvicorn
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    port = int(argv[0])
    bearer = argv[argv.index("--bearer") + 1] if "--bearer" in argv else None
    state = {"revoked": False, "calls": 0, "refused": 0, "throttle": 0, "throttled": 0,
             "throttle_status": 429, "retry_after": b"1"}
    ref_url = argv[argv.index("--ref-url") + 1] if "--ref-url" in argv else None

    async def list_tools(ctx, params):
        extra = [types.Tool(
            name="refd", description="A tool whose schemas reference a URL.",
            input_schema={"type": "object", "properties": {"text": {"$ref": ref_url}},
                          "required": ["text"]},
            output_schema={"type": "object", "properties": {"echo": {"$ref": ref_url}}})
        ] if ref_url else []
        return types.ListToolsResult(tools=[
            *extra,
            types.Tool(name="echo", description="Echo the text back.",
                       input_schema={"type": "object", "properties": {"text": {"type": "string"}},
                                     "required": ["text"]}),
            types.Tool(name="logout", description="End this client's credentials.",
                       input_schema={"type": "object", "properties": {}}),
            types.Tool(name="contradict", description="Listed, yet refused as unknown params.",
                       input_schema={"type": "object", "properties": {}}),
            types.Tool(name="throttle", description="Answer the next n requests with 429.",
                       input_schema={"type": "object", "properties": {
                           "n": {"type": "integer"}, "status": {"type": "integer"}}}),
        ])

    async def call_tool(ctx, params):
        state["calls"] += 1
        args = params.arguments or {}
        if params.name == "refd":
            text = str(args.get("text"))
            return types.CallToolResult(content=[types.TextContent(text=text)],
                                        structured_content={"echo": text})
        if params.name == "throttle":
            state["throttle"] = int(args.get("n", 2))
            state["throttle_status"] = int(args.get("status", 429))
            state["retry_after"] = str(int(args.get("retry_after", 1))).encode()
            return types.CallToolResult(content=[types.TextContent(text="throttling")])
        if params.name == "contradict":  # the server contradicts its own catalogue
            raise MCPError(-32602, "Invalid params: no such tool here")
        if params.name == "logout":
            state["revoked"] = True
            return types.CallToolResult(content=[types.TextContent(text="logged out")])
        return types.CallToolResult(content=[types.TextContent(text=str(args.get("text")))])

    server = Server("fault-peer", version="1.0.0", on_list_tools=list_tools,
                    on_call_tool=call_tool)
    if "--legacy" in argv:
        server._request_handlers.pop("server/discover", None)

    async def revoke(request: Request) -> Response:
        state["revoked"] = True
        return JSONResponse({"revoked": True})

    async def restore(request: Request) -> Response:
        state["revoked"] = False
        return JSONResponse({"revoked": False})

    async def stats(request: Request) -> Response:
        return JSONResponse({k: v for k, v in state.items() if k in ("calls", "refused",
                                                                     "throttled")})

    app = server.streamable_http_app(custom_starlette_routes=[
        Route("/revoke", revoke, methods=["POST"]),
        Route("/restore", restore, methods=["POST"]),
        Route("/stats", stats, methods=["GET"]),
    ])

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/mcp") and \
                scope["method"] == "POST" and state["throttle"] > 0:
            state["throttle"] -= 1
            state["throttled"] += 1
            status = state["throttle_status"]
            await send({"type": "http.response.start", "status": status, "headers": [
                (b"content-type", b"text/plain"), (b"retry-after", state["retry_after"])]})
            await send({"type": "http.response.body", "body": b"slow down"})
            return
        if scope["type"] == "http" and scope["path"].startswith("/mcp"):
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"authorization", b"").decode()
            if state["revoked"] or (bearer is not None and given != f"Bearer {bearer}"):
                state["refused"] += 1
                body = json.dumps({"error": "invalid_token"}).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer error="invalid_token"')]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    print(f"listening {port}", flush=True)
    tls = {}
    if "--tls" in argv:  # --tls CERT KEY: https
        i = argv.index("--tls")
        tls = {"ssl_certfile": argv[i + 1], "ssl_keyfile": argv[i + 2]}
    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                **tls)


if __name__ == "__main__":
    main(sys.argv[1:])
