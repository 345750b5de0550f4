"""Hostile peers for the decode rows of issue 28: each misbehaves on purpose.

    python tests/support/decode_peers.py PORT MODE

MODE ``deep`` is an MCP server (2025-11-25, JSON answers, hand-written so it
can break the rules) at http://127.0.0.1:PORT/mcp whose one tool ``deep``
answers a ``tools/call`` with ``structuredContent`` nested 5,000 levels;
``deep-init`` answers ``initialize`` itself with ``serverInfo`` nested as deep.

MODE ``a2a-deep-card`` is an A2A agent whose Agent Card (at the well-known
path) nests 5,000 levels inside its ``capabilities``.

MODE ``a2a-bad-error`` is an A2A agent (JSON-RPC, streaming) with a valid
card that answers every ``POST`` with HTTP 500 and a body that starts like a
JSON-RPC envelope but is none: its ``error`` a string on the first request,
nested 5,000 levels on the next, alternately.

MODE ``bad-metadata`` / ``bad-port`` is an OAuth-protected MCP endpoint that
answers every POST with 401 and a ``WWW-Authenticate`` whose
``resource_metadata`` is ``https://[x`` (an unparsable host) or points at its
own metadata document, which names an authorization server at port 99999.
"""

from __future__ import annotations

import json
import sys

from aiohttp import web

DEPTH = 5000


def _answer(rid: object, result: object) -> web.Response:
    return web.json_response({"jsonrpc": "2.0", "id": rid, "result": result})


async def _mcp_deep_init(request: web.Request) -> web.StreamResponse:
    msg = json.loads(await request.read())
    if msg.get("method") != "initialize":
        return await _mcp_deep(request, msg)
    body = ('{"jsonrpc":"2.0","id":' + json.dumps(msg.get("id")) + ',"result":{"protocolVersion"'
            ':"2025-11-25","capabilities":{},"serverInfo":{"name":"deep","version":"1","x":' +
            "[" * DEPTH + "]" * DEPTH + "}}}")
    return web.Response(body=body.encode(), content_type="application/json")


async def _mcp_deep(request: web.Request, msg: dict | None = None) -> web.StreamResponse:
    if msg is None:
        msg = json.loads(await request.read())
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        return web.Response(status=202)
    if method == "initialize":
        return _answer(rid, {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                             "serverInfo": {"name": "deep", "version": "1"}})
    if method == "tools/list":
        return _answer(rid, {"tools": [{"name": "deep", "description": "answers deeply",
                                        "inputSchema": {"type": "object"}}]})
    if method == "tools/call":
        deep = "[" * DEPTH + "]" * DEPTH
        body = ('{"jsonrpc":"2.0","id":' + json.dumps(rid) + ',"result":{"content":[{"type":'
                '"text","text":"x"}],"structuredContent":{"v":' + deep + '}}}')
        return web.Response(body=body.encode(), content_type="application/json")
    return web.json_response({"jsonrpc": "2.0", "id": rid,
                              "error": {"code": -32601, "message": "no"}})


def main(argv: list[str]) -> None:
    port, mode = int(argv[0]), argv[1]
    app = web.Application()
    if mode in ("deep", "deep-init"):
        app.router.add_post("/mcp", _mcp_deep if mode == "deep" else _mcp_deep_init)
    elif mode == "a2a-bad-error":
        card = json.dumps({
            "name": "bad", "description": "d", "version": "1",
            "supportedInterfaces": [{"url": f"http://127.0.0.1:{port}/",
                                     "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {"streaming": True}, "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"], "skills": []})
        bodies = [b'{"jsonrpc":"2.0","id":1,"error":"nope"}',
                  b'{"error":' + b"[" * DEPTH + b"]" * DEPTH + b"}"]
        sent = [0]

        async def bad_card(request: web.Request) -> web.Response:
            return web.Response(body=card.encode(), content_type="application/json")

        async def bad_error(request: web.Request) -> web.Response:
            body = bodies[sent[0] % len(bodies)]
            sent[0] += 1
            return web.Response(status=500, body=body, content_type="application/json")

        app.router.add_get("/.well-known/agent-card.json", bad_card)
        app.router.add_post("/", bad_error)
    elif mode == "a2a-deep-card":
        card = ('{"name":"deep","description":"d","version":"1","supportedInterfaces":[{"url":'
                f'"http://127.0.0.1:{port}/","protocolBinding":"JSONRPC","protocolVersion":"1.0"}}],'
                '"capabilities":{"x":' + "[" * DEPTH + "]" * DEPTH + '},"defaultInputModes":[],'
                '"defaultOutputModes":[],"skills":[]}')

        async def agent_card(request: web.Request) -> web.Response:
            return web.Response(body=card.encode(), content_type="application/json")

        app.router.add_get("/.well-known/agent-card.json", agent_card)
    else:
        base = f"http://127.0.0.1:{port}"
        metadata = "https://[x" if mode == "bad-metadata" else \
            f"{base}/.well-known/oauth-protected-resource/mcp"

        async def unauthorized(request: web.Request) -> web.Response:
            return web.Response(status=401, headers={
                "WWW-Authenticate": f'Bearer resource_metadata="{metadata}"'})

        async def prm(request: web.Request) -> web.Response:
            return web.json_response({"resource": f"{base}/mcp",
                                      "authorization_servers": ["http://127.0.0.1:99999"]})

        app.router.add_post("/mcp", unauthorized)
        app.router.add_get("/mcp", unauthorized)
        app.router.add_get("/.well-known/oauth-protected-resource/mcp", prm)
        app.router.add_get("/.well-known/oauth-protected-resource", prm)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=True)


if __name__ == "__main__":
    main(sys.argv[1:])
