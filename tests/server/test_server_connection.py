"""The server's one connection type without a transport: its factories and its driver.

``agentd.mcp.server.handler.ServerSession`` is built by one factory per revision
(``opening``: a 2025-11-25 session that ``initialize`` negotiates;
``per_request``: one 2026-07-28 exchange negotiated by its envelope) and driven
by one driver (``serve``: the response bytes and HTTP status).  The handler is
the real ``Handler``; no socket, no HTTP.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from stateless_requests import META, V, headers, request

from agentd.mcp.server.handler import CallContext, Handler, ServerSession, tool_error
from agentd.mcp.server.rules import stateless as rules
from agentd.wire import codec


def _handler() -> Handler:
    h = Handler("srv", "1.0", subscribe=True)

    @h.tool("echo", {"type": "object"})
    async def echo(args: dict[str, Any], ctx: CallContext) -> Any:
        return {"version": ctx.session.protocol_version, "args": args}

    @h.tool("refuse", {"type": "object"})
    async def refuse(args: dict[str, Any], ctx: CallContext) -> Any:
        return tool_error("no such note")

    @h.tool("crash", {"type": "object"})
    async def crash(args: dict[str, Any], ctx: CallContext) -> Any:
        raise RuntimeError("a handler bug")

    return h


def _per_request(h: Handler, req: Any) -> tuple[ServerSession, Any]:
    name = orjson.loads(bytes(req.params)).get("name")  # what a conforming client sends
    hdrs = headers(req, name=name)
    return ServerSession.per_request(h, rules.classify(req, hdrs), auth="none",
                                     client="test"), hdrs


def test_per_request_is_born_negotiated_by_its_envelope() -> None:
    h = _handler()
    req = request(1, "tools/list")
    s, _ = _per_request(h, req)
    assert (s.protocol_version, s.initialized, s.id) == (V, True, "stateless")
    assert s.client_info is not None and s.client_info.name == "test"
    assert s.client_capabilities == META["io.modelcontextprotocol/clientCapabilities"]
    assert s.envelope is not None and s.envelope.version == V
    opened = ServerSession.opening(h, "sid-1", auth="bearer", client="peer")
    assert (opened.protocol_version, opened.initialized, opened.envelope) == (None, False, None)


async def test_serve_answers_2026_with_its_rules_and_status() -> None:
    h = _handler()
    req = request(7, "tools/call", {"name": "echo", "arguments": {"a": 1}})
    s, hdrs = _per_request(h, req)
    out, status = await s.serve(req, None, hdrs)
    body = orjson.loads(out)
    assert status == 200 and body["id"] == 7
    result = body["result"]
    assert result["resultType"] == "complete"
    assert result["structuredContent"] == {"version": V, "args": {"a": 1}}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"] == {"name": "srv",
                                                                     "version": "1.0"}


async def test_serve_2026_refusals_and_handler_bugs_are_answered_not_raised() -> None:
    h = _handler()
    req = request(8, "tools/call", {"name": "nope", "arguments": {}})
    s, hdrs = _per_request(h, req)
    out, status = await s.serve(req, None, hdrs)
    err = orjson.loads(out)["error"]
    assert err["code"] == -32601 and "nope" in err["message"]
    assert status == rules.http_status(err["code"])
    req = request(9, "tools/call", {"name": "crash", "arguments": {}})
    s, hdrs = _per_request(h, req)
    out, status = await s.serve(req, None, hdrs)
    body = orjson.loads(out)
    assert body["error"] == {"code": -32603, "message": "Internal error"} and body["id"] == 9
    assert status == rules.http_status(-32603)


async def test_tool_error_is_an_is_error_result_on_both_revisions() -> None:
    h = _handler()
    req = request(3, "tools/call", {"name": "refuse", "arguments": {}})
    s, hdrs = _per_request(h, req)
    out, status = await s.serve(req, None, hdrs)
    result = orjson.loads(out)["result"]
    assert status == 200 and result["isError"] is True
    assert result["content"] == [{"type": "text", "text": "no such note"}]
    legacy = ServerSession.opening(h, "sid-2")
    init = codec.decode(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}}).encode())
    out, status = await legacy.serve(init)
    assert status == 200 and legacy.protocol_version == "2025-11-25"
    call = codec.decode(b'{"jsonrpc":"2.0","id":2,"method":"tools/call",'
                        b'"params":{"name":"refuse","arguments":{}}}')
    out, status = await legacy.serve(call)
    result = orjson.loads(out)["result"]
    assert status == 200 and result["isError"] is True and "resultType" not in result
