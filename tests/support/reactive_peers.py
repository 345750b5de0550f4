"""A watched MCP server built on the official SDK's low-level `Server`, for the
reactive tests and benchmark. Run as a script:

    python tests/support/reactive_peers.py PORT [--no-subscribe] [--unlisted] [--state FILE]
                                  [--era legacy|modern] [--no-listen] [--no-get]

It serves Streamable HTTP at http://127.0.0.1:PORT/mcp with subscribable
resources `watch://counter/a` and `watch://counter/b` (text bodies
`{"uri", "value", "t_ns"}`; `t_ns` is CLOCK_MONOTONIC at the last change, so a
reader in another process can measure publish -> read). Control routes, plain
HTTP beside the MCP endpoint:

* `POST /bump?uri=U&times=N` — change U N times, sending
  `notifications/resources/updated{U}` to each subscribed session after each
  change (state first, then the notification, as a real server would);
* `POST /set?uri=U&value=V` — change U without notifying (a change "missed");
* `POST /release` — answer every call of the `gate` tool, held until then (and
  at once after): the test does what it must while a run waits on it, e.g.
  restart another server;
* `GET /stats` — `{"subscribe": n, "unsubscribe": n, "read": n, "sessions": n,
  "wire": {method: n}}`: handler calls, and every JSON-RPC method POSTed as it
  was on the wire.

`--era legacy` (the default) is a 2025-11-25 server: the SDK serves both
revisions on one endpoint, routing on `MCP-Protocol-Version`, and here that
header is hidden from it when it names 2026-07-28, so its own 2025-11-25
transport answers (as a server predating the revision does). `--era modern`
also serves 2026-07-28: `subscriptions/listen` through the SDK's
`ListenHandler`, and `/bump` publishes each change to its listeners too.

`--no-listen` (with `--era modern`) serves 2026-07-28 but registers no
`subscriptions/listen` handler, only the 2025 way `on_subscribe_resource`, as
the SDK documents it: its `server/discover` succeeds and says
`resources.subscribe: false`, while its 2025-11-25 transport subscribes.

`--no-subscribe` registers no `resources/subscribe` handler, so the server does
not advertise `resources.subscribe`. `--unlisted` keeps serving (and reading)
the counters but lists none of them: a client cannot tell from the catalogue
which server owns them. `--state FILE` keeps the counters across
a restart. `--no-get` answers the standalone GET stream with 405 (a
deliberately crippled 2025-11-25 server, like a JSON-only deployment): it
takes `resources/subscribe` and can never deliver the `updated` it promises.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

URIS = ("watch://counter/a", "watch://counter/b")


def main(argv: list[str]) -> None:
    import mcp_types as types
    import uvicorn
    from mcp.server.lowlevel import Server
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    port = int(argv[0])
    subscribable = "--no-subscribe" not in argv
    listed = "--unlisted" not in argv
    modern = "--era" in argv and argv[argv.index("--era") + 1] == "modern"
    no_get = "--no-get" in argv
    state_file = Path(argv[argv.index("--state") + 1]) if "--state" in argv else None
    values = {u: 0 for u in URIS}
    stamps = {u: time.monotonic_ns() for u in URIS}
    if state_file and state_file.exists():
        values.update(json.loads(state_file.read_text()))
    subscribers: dict[str, dict[int, object]] = {u: {} for u in URIS}
    stats = {"subscribe": 0, "unsubscribe": 0, "read": 0}

    def save() -> None:
        if state_file:
            tmp = state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(values))
            os.replace(tmp, state_file)

    async def list_resources(ctx, params):
        return types.ListResourcesResult(resources=[
            types.Resource(uri=u, name=u.rsplit("/", 1)[-1], mime_type="application/json")
            for u in URIS if listed])

    async def read_resource(ctx, params):
        uri = str(params.uri)
        stats["read"] += 1
        if uri not in values:
            raise ValueError(f"no such resource {uri}")
        body = json.dumps({"uri": uri, "value": values[uri], "t_ns": stamps[uri]})
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, mime_type="application/json", text=body)])

    async def subscribe(ctx, params):
        stats["subscribe"] += 1
        uri = str(params.uri)
        subscribers.setdefault(uri, {})[id(ctx.session)] = ctx.session
        return types.EmptyResult()

    async def unsubscribe(ctx, params):
        stats["unsubscribe"] += 1
        subscribers.get(str(params.uri), {}).pop(id(ctx.session), None)
        return types.EmptyResult()

    import anyio

    gate = anyio.Event()

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[
            types.Tool(name="peek", description="the counters", input_schema={"type": "object"}),
            types.Tool(name="gate", description="answers once POST /release was sent",
                       input_schema={"type": "object"})])

    async def call_tool(ctx, params):
        if params.name == "gate":  # held until the test has done what it needed meanwhile
            await gate.wait()
            return types.CallToolResult(content=[types.TextContent(type="text", text="open")])
        return types.CallToolResult(content=[types.TextContent(type="text",
                                                               text=json.dumps(values))])

    kwargs = dict(on_list_resources=list_resources, on_read_resource=read_resource,
                  on_list_tools=list_tools, on_call_tool=call_tool)
    if subscribable:
        kwargs.update(on_subscribe_resource=subscribe, on_unsubscribe_resource=unsubscribe)
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated

    bus = InMemorySubscriptionBus()
    if modern and subscribable and "--no-listen" not in argv:
        kwargs.update(on_subscriptions_listen=ListenHandler(bus))
    server = Server("reactive-watched", version="1.0.0", **kwargs)

    async def notify(uri: str) -> None:
        if modern:
            await bus.publish(ResourceUpdated(uri=uri))
        for key, session in list(subscribers.get(uri, {}).items()):
            try:
                await session.send_resource_updated(uri)
            except Exception:  # a gone session
                subscribers[uri].pop(key, None)

    async def bump(request: Request) -> Response:
        uri = request.query_params["uri"]
        times = int(request.query_params.get("times", "1"))
        for _ in range(times):
            values[uri] = values.get(uri, 0) + 1
            stamps[uri] = time.monotonic_ns()
            await notify(uri)
        save()
        return JSONResponse({"uri": uri, "value": values[uri]})

    async def set_value(request: Request) -> Response:
        uri = request.query_params["uri"]
        values[uri] = int(request.query_params["value"])
        stamps[uri] = time.monotonic_ns()
        save()
        return JSONResponse({"uri": uri, "value": values[uri]})

    async def get_stats(request: Request) -> Response:
        live = {id(s) for subs in subscribers.values() for s in subs.values()}
        return JSONResponse({**stats, "sessions": len(live)})

    async def release(request: Request) -> Response:
        gate.set()
        return JSONResponse({"released": True})

    app = server.streamable_http_app(custom_starlette_routes=[
        Route("/bump", bump, methods=["POST"]),
        Route("/set", set_value, methods=["POST"]),
        Route("/stats", get_stats, methods=["GET"]),
        Route("/release", release, methods=["POST"]),
    ])
    wire: dict[str, int] = {}
    stats_wire = wire

    async def sniffing(scope, receive, send):
        """Count every JSON-RPC method POSTed, as it is on the wire."""
        if scope["type"] == "http" and not modern and any(
                k == b"mcp-protocol-version" and v == b"2026-07-28" for k, v in scope["headers"]):
            # a 2025-11-25 server never routes on this revision's header
            scope = dict(scope, headers=[(k, v) for k, v in scope["headers"]
                                         if k != b"mcp-protocol-version"])
        if no_get and scope["type"] == "http" and scope["method"] == "GET" \
                and scope["path"] == "/mcp":
            return await Response(status_code=405, headers={"Allow": "POST, DELETE"})(
                scope, receive, send)
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)

        async def rx():
            msg = await receive()
            if msg.get("type") == "http.request" and msg.get("body"):
                try:
                    data = json.loads(msg["body"])
                except ValueError:
                    data = None
                for m in data if isinstance(data, list) else [data]:
                    if isinstance(m, dict) and "method" in m:
                        wire[m["method"]] = wire.get(m["method"], 0) + 1
            return msg

        return await app(scope, rx, send)

    stats["wire"] = stats_wire
    print(f"listening {port}", flush=True)
    uvicorn.run(sniffing, host="127.0.0.1", port=port, log_level="warning")


# the control routes' client side, for the tests that drive this peer


def bump(port: int, uri: str, times: int = 1) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/bump?uri={uri}&times={times}",
                                 method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


def stats(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=30) as r:
        return json.loads(r.read())


if __name__ == "__main__":
    main(sys.argv[1:])
