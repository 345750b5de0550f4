"""MCP 2026-07-28 on agentd's server engine, over real HTTP on loopback (aiohttp client).

Stateless requests beside 2025-11-25 sessions on one endpoint: ``server/discover``,
result fields (``resultType``, ``_meta`` serverInfo, ``ttlMs``/``cacheScope``), every
envelope/header/version error with its HTTP status, removed methods, ``Mcp-Param-*``
and missing client capabilities, ``subscriptions/listen`` (acknowledgement first,
tagged updates, the unlisted-URI rule, unsupported types) and its per-client bound
under 1,000 concurrent streams.  The self-MCP's backend is the scripted tree contract
of tests/served/test_selfmcp_emission.py (runs end when the test says so).
"""

from __future__ import annotations

import asyncio
import base64
import json

import aiohttp
import pytest
from scripted_backend import ScriptedBackend
from waiting import until

from agentd.errors import RPCError
from agentd.mcp.server.handler import Handler
from agentd.mcp.server.http.server import Limits, serve
from agentd.served.selfmcp import SelfMCP

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"}}
ACCEPT = "application/json, text/event-stream"


def body(i, method, params=None, meta=META):
    p = dict(params or {})
    if meta is not None:
        p["_meta"] = meta
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": p}


def headers_for(msg, **extra):
    h = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": V,
         "Mcp-Method": msg["method"]}
    p = msg.get("params") or {}
    if msg["method"] in ("tools/call", "prompts/get") and "name" in p:
        h["Mcp-Name"] = p["name"]
    if msg["method"] == "resources/read" and "uri" in p:
        h["Mcp-Name"] = p["uri"]
    for k, v in extra.items():
        k = k.replace("_", "-")
        if v is None:
            h.pop(k, None)
        else:
            h[k] = v
    return h


async def rpc(http, url, msg, headers=None):
    h = headers if headers is not None else headers_for(msg)
    async with http.post(url, data=json.dumps(msg), headers=h) as r:
        text = await r.text()
        ctype = r.headers.get("Content-Type", "")
        if ctype.startswith("text/event-stream"):
            frames = [json.loads(line[6:]) for line in text.splitlines()
                      if line.startswith("data: ")]
            return r.status, r.headers, frames[-1]
        if ctype.startswith("application/json") and text:
            return r.status, r.headers, json.loads(text)
        return r.status, r.headers, text


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def selfmcp():
    be = ScriptedBackend()
    runner = await serve(SelfMCP(be, run_id="run-7"), port=0,
                         limits=Limits(listen_per_client=32, keepalive=0.5))
    runner.backend = be
    yield runner
    await runner.stop()


# ------------------------------------------------------------------ basics

async def test_discover_and_result_fields(selfmcp, http):
    url = selfmcp.url
    status, hdrs, out = await rpc(http, url, body(1, "server/discover"))
    assert status == 200 and "Mcp-Session-Id" not in hdrs
    res = out["result"]
    assert res["supportedVersions"][0] == V and "2025-11-25" in res["supportedVersions"]
    assert res["capabilities"] == {"tools": {}, "resources": {"subscribe": True}}
    assert res["resultType"] == "complete"
    assert res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "agentd"
    assert res["cacheScope"] == "public" and res["ttlMs"] == 3_600_000

    _, _, out = await rpc(http, url, body(2, "tools/list"))
    res = out["result"]
    assert res["tools"][0]["name"] == "status" and len(res["tools"]) == 5
    assert (res["resultType"], res["ttlMs"], res["cacheScope"]) == ("complete", 3_600_000,
                                                                    "public")
    assert res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "agentd"
    for method in ("resources/list", "resources/templates/list"):
        _, _, out = await rpc(http, url, body(3, method))
        assert out["result"]["ttlMs"] == 3_600_000 and out["result"]["cacheScope"] == "public"
    _, _, out = await rpc(http, url, body(4, "resources/read", {"uri": "agent://status"}))
    res = out["result"]
    assert (res["ttlMs"], res["cacheScope"], res["resultType"]) == (0, "private", "complete")
    assert json.loads(res["contents"][0]["text"])["run_id"] == "run-7"

    status, _, out = await rpc(http, url, body(5, "tools/call", {"name": "status",
                                                                 "arguments": {}}))
    assert status == 200 and out["result"]["structuredContent"]["run_id"] == "run-7"
    assert out["result"]["resultType"] == "complete" and "ttlMs" not in out["result"]


async def test_a_legacy_session_is_untouched_beside(selfmcp, http):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "old", "version": "1"}}}
    h = {"Content-Type": "application/json", "Accept": ACCEPT}
    async with http.post(selfmcp.url, json=init, headers=h) as r:
        sid = r.headers["Mcp-Session-Id"]
        res = (await r.json())["result"]
    assert res["capabilities"] == {"tools": {}, "resources": {"subscribe": True}}
    assert "resultType" not in res
    h = {**h, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
    async with http.post(selfmcp.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                         headers=h) as r:
        res = (await r.json())["result"]
    assert "resultType" not in res and "ttlMs" not in res and len(res["tools"]) == 5
    async with http.post(selfmcp.url, json={"jsonrpc": "2.0", "id": 3, "method": "ping"},
                         headers=h) as r:
        assert (await r.json())["result"] == {}


# ------------------------------------------------------------------ errors

async def test_envelope_and_header_errors(selfmcp, http):
    url = selfmcp.url
    # no _meta at all / partial _meta -> -32602
    msg = body(1, "tools/list", meta=None)
    status, _, out = await rpc(http, url, msg)
    assert status == 400 and out["error"]["code"] == -32602 and out["id"] == 1
    msg = body(2, "tools/list", meta={"io.modelcontextprotocol/protocolVersion": V})
    status, _, out = await rpc(http, url, msg)
    assert status == 400 and out["error"]["code"] == -32602
    assert "clientCapabilities" in out["error"]["message"]
    # _meta but no MCP-Protocol-Version header (sessionless) -> header mismatch
    msg = body(3, "tools/list")
    status, _, out = await rpc(http, url, msg, headers_for(msg, MCP_Protocol_Version=None))
    assert status == 400 and out["error"]["code"] == -32020
    # Mcp-Method missing / mismatched, sent twice
    status, _, out = await rpc(http, url, msg, headers_for(msg, Mcp_Method=None))
    assert status == 400 and out["error"]["code"] == -32020
    status, _, out = await rpc(http, url, msg, headers_for(msg, Mcp_Method="tools/call"))
    assert status == 400 and out["error"]["code"] == -32020
    dup = [(k, v) for k, v in headers_for(msg).items()] + [("Mcp-Method", "tools/list")]
    async with http.post(url, data=json.dumps(msg), headers=dup) as r:
        assert r.status == 400 and (await r.json())["error"]["code"] == -32020
    # Mcp-Name mismatched; base64-sentinel encoded is decoded before comparing
    msg = body(4, "resources/read", {"uri": "agent://status"})
    status, _, out = await rpc(http, url, msg, headers_for(msg, Mcp_Name="agent://other"))
    assert status == 400 and out["error"]["code"] == -32020
    enc = "=?base64?" + base64.b64encode(b"agent://status").decode() + "?="
    status, _, out = await rpc(http, url, msg, headers_for(msg, Mcp_Name=enc))
    assert status == 200 and out["result"]["contents"]
    # header says one version, body another
    status, _, out = await rpc(http, url, msg, headers_for(msg, MCP_Protocol_Version="2099-01-01"))
    assert status == 400 and out["error"]["code"] == -32020
    # an unknown version on both -> -32022 naming what we speak
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    msg = body(5, "tools/list", meta=meta)
    status, _, out = await rpc(http, url, msg, headers_for(msg, MCP_Protocol_Version="2099-01-01"))
    assert status == 400 and out["error"]["code"] == -32022
    assert out["error"]["data"]["requested"] == "2099-01-01"
    assert V in out["error"]["data"]["supported"] and "2025-11-25" in out["error"]["data"]["supported"]
    # capabilities that are not an object
    meta = {**META, "io.modelcontextprotocol/clientCapabilities": []}
    status, _, out = await rpc(http, url, body(6, "tools/list", meta=meta))
    assert status == 400 and out["error"]["code"] == -32602
    # nothing of this disturbed the server
    status, _, out = await rpc(http, url, body(7, "tools/list"))
    assert status == 200 and len(out["result"]["tools"]) == 5


async def test_removed_and_unknown_methods_404(selfmcp, http):
    for method in ("ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe",
                   "initialize", "prompts/list", "completion/complete"):
        status, _, out = await rpc(http, selfmcp.url, body(1, method, {"uri": "agent://status"}))
        assert status == 404 and out["error"]["code"] == -32601, method


async def test_resource_not_found_is_invalid_params(selfmcp, http):
    for uri in ("agent://subagent/served.99", "file:///etc/passwd"):
        status, _, out = await rpc(http, selfmcp.url, body(1, "resources/read", {"uri": uri}))
        assert status == 400 and out["error"]["code"] == -32602
        assert out["error"]["data"] == {"uri": uri}


async def test_get_delete_notifications_origin_and_invalid_params(selfmcp, http):
    url = selfmcp.url
    for verb in ("GET", "DELETE"):
        async with http.request(verb, url, headers={"MCP-Protocol-Version": V,
                                                    "Accept": "text/event-stream"}) as r:
            assert r.status == 405 and r.headers["Allow"] == "POST"
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 1}}
    async with http.post(url, json=note, headers={"MCP-Protocol-Version": V,
                                                  "Accept": ACCEPT}) as r:
        assert r.status == 202
    async with http.post(url, json=note, headers={"MCP-Protocol-Version": "2099-01-01",
                                                  "Accept": ACCEPT}) as r:
        assert r.status == 400 and (await r.json())["error"]["code"] == -32022
    msg = body(1, "tools/list")
    status, _, _ = await rpc(http, url, msg, headers_for(msg, Origin="http://evil.example"))
    assert status == 403
    msg = body(2, "tools/call", {"name": "subagent.status", "arguments": {}})
    status, _, out = await rpc(http, url, msg)
    assert status == 400 and out["error"]["code"] == -32602
    msg = body(3, "tools/call", {"name": "nope", "arguments": {}})
    status, _, out = await rpc(http, url, msg)
    assert status == 404 and out["error"]["code"] == -32601


async def test_bearer_applies_to_every_stateless_request(http):
    runner = await serve(SelfMCP(run_id="r"), port=0, bearer="s3cret-token-value")
    try:
        msg = body(1, "tools/list")
        status, hdrs, _ = await rpc(http, runner.url, msg)
        assert status == 401 and hdrs["WWW-Authenticate"].startswith("Bearer")
        h = headers_for(msg, Authorization="Bearer s3cret-token-value")
        status, _, out = await rpc(http, runner.url, msg, h)
        assert status == 200 and len(out["result"]["tools"]) == 5
        h = headers_for(msg, Authorization="Bearer wrong")
        status, _, _ = await rpc(http, runner.url, msg, h)
        assert status == 401
    finally:
        await runner.stop()


async def test_param_headers_and_missing_client_capability(http):
    h = Handler("demo", "1")

    @h.tool("query", {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "n": {"type": "integer", "x-mcp-header": "N"},
        "q": {"type": "string"}}, "required": ["q"]})
    async def query(args, ctx):
        return {"region": args.get("region"), "q": args["q"]}

    async def needs(args, ctx):
        return "ok"

    h.add_tool("ask", needs, {"type": "object"}, requires={"elicitation": {}})
    runner = await serve(h, port=0)
    try:
        url = runner.url
        msg = body(1, "tools/call", {"name": "query",
                                     "arguments": {"region": "us-west1", "n": 42, "q": "x"}})
        status, _, out = await rpc(http, url, msg)  # headers missing
        assert status == 400 and out["error"]["code"] == -32020
        good = headers_for(msg, **{"Mcp-Param-Region": "us-west1", "Mcp-Param-N": "42"})
        status, _, out = await rpc(http, url, msg, good)
        assert status == 200 and out["result"]["structuredContent"]["region"] == "us-west1"
        numeric = headers_for(msg, **{"Mcp-Param-Region": "us-west1", "Mcp-Param-N": "42.0"})
        status, _, out = await rpc(http, url, msg, numeric)
        assert status == 200
        bad = headers_for(msg, **{"Mcp-Param-Region": "eu-west1", "Mcp-Param-N": "42"})
        status, _, out = await rpc(http, url, msg, bad)
        assert status == 400 and out["error"]["code"] == -32020
        absent = body(2, "tools/call", {"name": "query", "arguments": {"q": "x"}})
        extra = headers_for(absent, **{"Mcp-Param-Region": "us-west1"})
        status, _, out = await rpc(http, url, absent, extra)
        assert status == 400 and out["error"]["code"] == -32020
        status, _, out = await rpc(http, url, absent)
        assert status == 200

        msg = body(3, "tools/call", {"name": "ask", "arguments": {}})
        status, _, out = await rpc(http, url, msg)
        assert status == 400 and out["error"]["code"] == -32021
        assert out["error"]["data"] == {"requiredCapabilities": {"elicitation": {}}}
        meta = {**META, "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
        msg = body(4, "tools/call", {"name": "ask", "arguments": {}}, meta=meta)
        status, _, out = await rpc(http, url, msg)
        assert status == 200 and out["result"]["content"][0]["text"] == "ok"
        # the generic engine promises no freshness
        _, _, out = await rpc(http, url, body(5, "tools/list"))
        assert (out["result"]["ttlMs"], out["result"]["cacheScope"]) == (0, "private")
    finally:
        await runner.stop()


# ------------------------------------------------------------------ listen

class Stream:
    """One open listen stream read frame by frame."""

    def __init__(self, resp):
        self.resp = resp

    async def next(self):
        data = []
        async with asyncio.timeout(10.0):
            while True:
                line = await self.resp.content.readline()
                if not line:
                    return None
                line = line.decode().rstrip("\r\n")
                if line.startswith("data: "):
                    data.append(line[6:])
                elif line == "" and data:
                    return json.loads("".join(data))


def listen_msg(i, **filt):
    return body(i, "subscriptions/listen", {"notifications": filt})


async def open_listen(http, url, i, **filt):
    msg = listen_msg(i, **filt)
    resp = await http.post(url, data=json.dumps(msg), headers=headers_for(msg))
    return resp


async def test_listen_unsupported_types_are_omitted_and_stream_ends(selfmcp, http):
    resp = await open_listen(http, selfmcp.url, "L1", toolsListChanged=True,
                             promptsListChanged=True, resourcesListChanged=True,
                             resourceSubscriptions=["file:///x", "agent://subagent/served.5",
                                                    "agent://subagent/other.1"])
    assert resp.status == 200 and resp.headers["Content-Type"] == "text/event-stream"
    s = Stream(resp)
    ack = await s.next()
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"] == {"notifications": {},
                             "_meta": {"io.modelcontextprotocol/subscriptionId": "L1"}}
    end = await s.next()
    assert end["id"] == "L1" and end["result"]["resultType"] == "complete"
    assert end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L1"
    resp.release()
    # the SSE accept is required; malformed filters are -32602
    msg = listen_msg(2, toolsListChanged=True)
    async with http.post(selfmcp.url, data=json.dumps(msg),
                         headers=headers_for(msg, Accept="application/json")) as r:
        assert r.status == 406
    msg = body(3, "subscriptions/listen", {"notifications": {"resourceSubscriptions": "x"}})
    status, _, out = await rpc(http, selfmcp.url, msg)
    assert status == 400 and out["error"]["code"] == -32602


async def test_listen_exactly_one_update_per_run_and_status(selfmcp, http):
    url, be = selfmcp.url, selfmcp.backend
    _, _, out = await rpc(http, url, body(1, "tools/call", {
        "name": "subagent.spawn", "arguments": {"instruction": "x", "async": True}}))
    handle = out["result"]["structuredContent"]["handle"]
    uri = f"agent://subagent/{handle}"
    resp = await open_listen(http, url, 7, resourceSubscriptions=[uri, "agent://status"])
    other = await open_listen(http, url, 8, resourceSubscriptions=["agent://status"])
    s, o = Stream(resp), Stream(other)
    ack = await s.next()
    assert ack["params"]["notifications"] == {"resourceSubscriptions": [uri, "agent://status"]}
    assert (await o.next())["params"]["notifications"] == {"resourceSubscriptions":
                                                           ["agent://status"]}
    _, _, out = await rpc(http, url, body(2, "tools/call", {
        "name": "subagent.spawn", "arguments": {"instruction": "y", "async": True}}))
    second = out["result"]["structuredContent"]["handle"]
    for stream, sid in ((s, 7), (o, 8)):  # the count changed: status, tagged
        n = await stream.next()
        assert n == {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                     "params": {"uri": "agent://status",
                                "_meta": {"io.modelcontextprotocol/subscriptionId": sid}}}
    be.finish(handle, {"answer": 1})
    got = [await s.next(), await s.next()]
    uris = sorted(n["params"]["uri"] for n in got)
    assert uris == ["agent://status", uri]
    assert all(n["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": 7}
               for n in got)
    assert (await o.next())["params"]["uri"] == "agent://status"  # o never asked for the run
    be.finish(second, {"answer": 2})  # a run nobody listens to: status only
    assert (await s.next())["params"]["uri"] == "agent://status"
    assert (await o.next())["params"]["uri"] == "agent://status"
    _, _, out = await rpc(http, url, body(3, "resources/read", {"uri": uri}))
    res = out["result"]
    assert json.loads(res["contents"][0]["text"])["result"] == {"answer": 1}
    assert res["cacheScope"] == "private" and 0 < res["ttlMs"] <= 600_000
    # a listen for an already-terminal run: honoured, its update follows the ack
    # at once, and the stream then ends (the peer reads the terminal state)
    late = await open_listen(http, url, "late", resourceSubscriptions=[uri])
    ls = Stream(late)
    assert (await ls.next())["params"]["notifications"] == {"resourceSubscriptions": [uri]}
    assert await ls.next() == {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                               "params": {"uri": uri, "_meta": {
                                   "io.modelcontextprotocol/subscriptionId": "late"}}}
    assert (await ls.next())["result"]["resultType"] == "complete"
    for r in (resp, other, late):
        r.release()


async def test_thousand_concurrent_listens_are_bounded(selfmcp, http):
    url, be = selfmcp.url, selfmcp.backend
    _, _, out = await rpc(http, url, body(1, "tools/call", {
        "name": "subagent.spawn", "arguments": {"instruction": "canary", "async": True}}))
    canary_uri = "agent://subagent/" + out["result"]["structuredContent"]["handle"]
    canary = await open_listen(http, url, "canary", resourceSubscriptions=[canary_uri])
    cs = Stream(canary)
    assert (await cs.next())["params"]["notifications"]["resourceSubscriptions"] == [canary_uri]

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as many:
        async def one(i):
            msg = listen_msg(i, resourceSubscriptions=["agent://status"])
            r = await many.post(url, data=json.dumps(msg), headers=headers_for(msg))
            if r.status == 200:
                first = await Stream(r).next()
                return r, first
            out = await r.json()
            r.release()
            return r, out

        results = await asyncio.gather(*(one(i) for i in range(1000)))
        opened = [r for r, first in results if r.status == 200]
        refused = [out for r, out in results if r.status != 200]
        assert len(opened) == 31  # 32 per client, the canary holds one
        assert len(refused) == 969
        assert {r.status for r, _ in results if r.status != 200} == {429}
        assert all(o["error"]["code"] == -32000 and "limit" in o["error"]["message"]
                   for o in refused)
        # nothing else disturbed: calls answer, a legacy session opens, the canary fires
        status, _, out = await rpc(http, url, body(2, "tools/call", {"name": "status",
                                                                     "arguments": {}}))
        assert status == 200 and out["result"]["structuredContent"]["run_id"] == "run-7"
        be.finish(canary_uri.rsplit("/", 1)[1], {"ok": True})
        assert (await cs.next())["params"]["uri"] == canary_uri
        for r in opened:
            r.close()
    canary.release()
    # the slots come back once the streams are gone
    await until(lambda: not selfmcp.server.listens.open, what="the listen slots freed")
    again = await open_listen(http, url, "again", resourceSubscriptions=["agent://status"])
    assert again.status == 200
    again.release()


async def test_stop_ends_listen_streams_gracefully(http):
    runner = await serve(SelfMCP(run_id="r"), port=0)
    resp = await open_listen(http, runner.url, "S", resourceSubscriptions=["agent://status"])
    s = Stream(resp)
    assert (await s.next())["params"]["notifications"] == {
        "resourceSubscriptions": ["agent://status"]}
    await runner.stop()
    end = await s.next()
    assert end["id"] == "S" and end["result"]["resultType"] == "complete"
    assert await s.next() is None
    resp.release()


async def test_handler_bug_and_sse_answers(http):
    h = Handler("demo", "1")

    @h.tool("boom", {"type": "object"})
    async def boom(args, ctx):
        raise RuntimeError("secret detail")

    @h.tool("forward", {"type": "object"})
    async def forward(args, ctx):  # a peer's error escaping a handler: a bug, never ours
        raise RPCError(-32002, "the upstream said no", {"uri": "x://y"}, side="remote")

    @h.tool("chatty", {"type": "object"})
    async def chatty(args, ctx):
        await ctx.notify("notifications/progress", {"progressToken": 1, "progress": 1})
        return "done"

    runner = await serve(h, port=0)
    try:
        msg = body(1, "tools/call", {"name": "boom", "arguments": {}})
        status, _, out = await rpc(http, runner.url, msg)
        assert status == 200 and out["error"] == {"code": -32603, "message": "Internal error"}
        msg = body(3, "tools/call", {"name": "forward", "arguments": {}})
        status, _, out = await rpc(http, runner.url, msg)
        assert status == 200 and out["error"] == {"code": -32603, "message": "Internal error"}
        msg = body(2, "tools/call", {"name": "chatty", "arguments": {}})
        async with http.post(runner.url, data=json.dumps(msg), headers=headers_for(msg)) as r:
            assert r.headers["Content-Type"] == "text/event-stream"
            frames = [json.loads(ln[6:]) for ln in (await r.text()).splitlines()
                      if ln.startswith("data: ")]
        assert frames[0]["method"] == "notifications/progress"
        assert frames[1]["result"]["content"][0]["text"] == "done"
        assert frames[1]["result"]["resultType"] == "complete"
    finally:
        await runner.stop()


def test_ladder_without_headers_is_sans_io():
    """The rules run without a transport (headers=None skips the header rung)."""
    from agentd.mcp.server.rules import stateless
    from agentd.wire import codec

    def req(meta):
        return codec.decode(json.dumps(body(1, "tools/list", meta=meta)).encode())

    env = stateless.classify(req(META), None)
    assert env.version == V and env.client_info.name == "test" and env.capabilities == {}
    for meta, code in ((None, -32602), ({**META, "io.modelcontextprotocol/protocolVersion": 7},
                                        -32602),
                       ({**META, "io.modelcontextprotocol/protocolVersion": "2025-11-25"},
                        -32022),
                       ({**META, "io.modelcontextprotocol/clientInfo": {"name": 1}}, -32602)):
        with pytest.raises(RPCError) as e:
            stateless.classify(req(meta), None)
        assert e.value.code == code and e.value.id == 1
    assert stateless.decode_header_value("=?base64?aGk=?=") == "hi"
    assert stateless.decode_header_value("=?base64?aGk?=") is None  # not canonical
    assert stateless.decode_header_value("plain") == "plain"


async def test_listen_cap_is_per_principal_and_ownership_applies(http):
    """Two bearer principals: each has its own listen budget, and a run one spawned
    is not honoured on the other's listen stream (the self-MCP's ownership check)."""
    be = ScriptedBackend()
    runner = await serve(SelfMCP(be), port=0, limits=Limits(listen_per_client=2),
                         bearers={"alice": "token-alice-0123456789", "bob": "token-bob-0123456789"})
    try:
        url = runner.url

        def auth(who, msg):
            return headers_for(msg, Authorization=f"Bearer token-{who}-0123456789")

        msg = body(1, "tools/call", {"name": "subagent.spawn",
                                     "arguments": {"instruction": "x", "async": True}})
        _, _, out = await rpc(http, url, msg, auth("alice", msg))
        uri = "agent://subagent/" + out["result"]["structuredContent"]["handle"]
        opened = []
        for who in ("alice", "alice", "bob", "bob"):
            lm = listen_msg(f"{who}{len(opened)}", resourceSubscriptions=[uri, "agent://status"])
            r = await http.post(url, data=json.dumps(lm), headers=auth(who, lm))
            assert r.status == 200
            ack = await Stream(r).next()
            want = [uri, "agent://status"] if who == "alice" else ["agent://status"]
            assert ack["params"]["notifications"]["resourceSubscriptions"] == want
            opened.append(r)
        for who in ("alice", "bob"):
            lm = listen_msg(f"{who}-over", resourceSubscriptions=["agent://status"])
            status, _, out = await rpc(http, url, lm, auth(who, lm))
            assert status == 429 and out["error"]["code"] == -32000
        for r in opened:
            r.close()
    finally:
        await runner.stop()
