"""Long tool calls, with and without progress: real SDK servers for the client tests.

Run as a script, one server per process, on loopback:

    python tests/support/progress_servers.py PORT [--kind sdk|fastmcp] [--era legacy|modern]

``sdk`` (the default) is the official Python SDK 2.x's high-level ``MCPServer``
(tools reporting with ``ctx.report_progress``); ``fastmcp`` is FastMCP 4 (its
``Context.report_progress``).  Both serve Streamable HTTP at
``http://127.0.0.1:PORT/mcp``.  ``--era legacy`` (the default) hides the
2026-07-28 ``MCP-Protocol-Version`` header from the SDK, so it answers as a
2025-11-25-only server; ``modern`` lets it serve 2026-07-28 statelessly too.

tools
    ``heartbeat{}`` reports progress (1, 2, 3, ...) every 50 ms until
    ``POST /release`` and then returns ``released after N``; ``silent{}``
    waits for ever without a word; ``stuck{}`` reports progress 5 once, then
    5, 4, 3, ... (never increasing) every 50 ms, for ever; ``echo{text}``.
    With ``--kind sdk --era legacy`` also ``heartbeat_get{}`` (as
    ``heartbeat``, but its notifications name no request, so the SDK sends
    them on the standalone GET stream) and ``stray{}`` (progress for a token
    the client never sent, then ``stray sent``).
    A tool that is cancelled (a ``notifications/cancelled``, or its answer
    stream closed at 2026-07-28) records it.
control routes (plain HTTP beside ``/mcp``)
    ``POST /release`` lets every running heartbeat return (later ones wait again);
    ``GET /stats`` -> ``{"cancelled": {tool: n}, "cancel_notes": [reason...],
    "running": {tool: seconds since its latest start}, "progress_sent": n,
    "calls": n, "get_streams": n}``.  ``cancel_notes`` are the reasons of the
    ``notifications/cancelled`` that reached the endpoint; ``get_streams`` counts
    the standalone GET streams clients asked for.
"""

import asyncio
import json
import sys
import time


def main(argv: list[str]) -> None:
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    port = int(argv[0])
    kind = argv[argv.index("--kind") + 1] if "--kind" in argv else "sdk"
    modern = (argv[argv.index("--era") + 1] if "--era" in argv else "legacy") == "modern"
    stats: dict = {"cancelled": {}, "cancel_notes": [], "running": {}, "progress_sent": 0,
                   "calls": 0, "get_streams": 0}
    started: dict[str, float] = {}
    gate = {"release": asyncio.Event()}  # one per release: a later heartbeat waits again

    if kind == "fastmcp":
        from fastmcp import Context, FastMCP

        server: object = FastMCP("progress-fastmcp")
    else:
        from mcp.server.mcpserver import Context, MCPServer  # type: ignore[assignment]

        server = MCPServer("progress-sdk")

    async def report(ctx: Context, value: float) -> None:
        await ctx.report_progress(value)
        stats["progress_sent"] += 1

    def recorded(name: str):
        """Count the call, time it, and record its cancellation."""
        def wrap(fn):
            async def run(ctx: Context) -> str:
                stats["calls"] += 1
                started[name] = time.monotonic()
                try:
                    return await fn(ctx)
                except BaseException as exc:
                    if isinstance(exc, asyncio.CancelledError):
                        stats["cancelled"][name] = stats["cancelled"].get(name, 0) + 1
                    raise
                finally:
                    started.pop(name, None)
            run.__name__ = name
            run.__doc__ = fn.__doc__
            return run
        return wrap

    @recorded("heartbeat")
    async def heartbeat(ctx: Context) -> str:
        """Report progress every 50 ms until released."""
        n, release = 0, gate["release"]
        while not release.is_set():
            n += 1
            await report(ctx, n)
            try:
                async with asyncio.timeout(0.05):
                    await release.wait()
            except TimeoutError:
                pass
        return f"released after {n}"

    @recorded("silent")
    async def silent(ctx: Context) -> str:
        """Wait for ever without a word."""
        await asyncio.Event().wait()
        return "unreachable"

    @recorded("stuck")
    async def stuck(ctx: Context) -> str:
        """Report progress that never increases."""
        await report(ctx, 5)
        n = 5
        while True:
            await report(ctx, max(n, 0))
            n -= 1
            await asyncio.sleep(0.05)

    def token_of(ctx: Context):
        meta = ctx.request_context.meta or {}
        return meta.get("progress_token", meta.get("progressToken"))

    @recorded("heartbeat_get")
    async def heartbeat_get(ctx: Context) -> str:
        """Report progress, tied to no request (the GET stream), until released."""
        token, n, release = token_of(ctx), 0, gate["release"]
        while not release.is_set():
            n += 1
            await ctx.request_context.session.send_progress_notification(token, n)
            stats["progress_sent"] += 1
            try:
                async with asyncio.timeout(0.05):
                    await release.wait()
            except TimeoutError:
                pass
        return f"released after {n}"

    async def stray(ctx: Context) -> str:
        """Report progress for a token the client never sent, then return."""
        stats["calls"] += 1
        await ctx.request_context.session.send_progress_notification(
            f"not-{token_of(ctx)}", 1, related_request_id=ctx.request_id)
        return "stray sent"

    async def echo(text: str) -> str:
        """Echo the text back."""
        stats["calls"] += 1
        return text

    for fn in (heartbeat, silent, stuck, echo):
        server.tool()(fn)  # type: ignore[attr-defined]
    if kind == "sdk" and not modern:  # the session's own API: a 2025-11-25 session only
        for fn in (heartbeat_get, stray):
            server.tool()(fn)  # type: ignore[attr-defined]

    async def do_release(request: Request) -> Response:
        gate["release"].set()
        gate["release"] = asyncio.Event()
        return JSONResponse({"released": True})

    async def get_stats(request: Request) -> Response:
        now = time.monotonic()
        stats["running"] = {k: now - v for k, v in started.items()}
        return JSONResponse(stats)

    if kind == "fastmcp":
        app = server.http_app(path="/mcp")  # type: ignore[attr-defined]
    else:
        app = server.streamable_http_app()  # type: ignore[attr-defined]
    app.router.routes.append(Route("/release", do_release, methods=["POST"]))
    app.router.routes.append(Route("/stats", get_stats, methods=["GET"]))
    version_header = b"mcp-protocol-version"

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        hdrs = scope["headers"]
        if scope["method"] == "GET" and scope["path"].rstrip("/").endswith("/mcp"):
            stats["get_streams"] += 1  # a client's standalone stream (2025-11-25)
        if not modern and any(k == version_header and v == b"2026-07-28" for k, v in hdrs):
            # a 2025-11-25 server never routes on this revision's header
            scope = dict(scope, headers=[(k, v) for k, v in hdrs if k != version_header])

        async def seen(message=None):
            msg = await receive()
            body = msg.get("body", b"")
            if b"notifications/cancelled" in body:
                try:
                    stats["cancel_notes"].append(json.loads(body)["params"].get("reason"))
                except (ValueError, KeyError, TypeError, AttributeError):
                    stats["cancel_notes"].append(None)
            return msg

        await app(scope, seen, send)

    print(f"listening {port}", flush=True)
    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
