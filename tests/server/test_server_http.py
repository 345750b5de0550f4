"""The Streamable HTTP engine over real sockets: session rules, SSE, limits, hostile input."""

from __future__ import annotations

import asyncio
import contextlib
import io

import aiohttp
import orjson
import pytest

from agentd.mcp.server.handler import Handler
from agentd.mcp.server.http.server import Limits, serve

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}
HDRS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def sample() -> Handler:
    h = Handler("sample", "1", subscribe=True)

    @h.tool("echo", {"type": "object", "properties": {"text": {"type": "string"}}},
            description="echo")
    async def echo(args, ctx):
        return args.get("text", "")

    @h.tool("chatty", {"type": "object"}, description="sends a message before answering")
    async def chatty(args, ctx):
        await ctx.notify("notifications/progress", {"progressToken": 1, "progress": 0.5})
        return "done"

    return h


@pytest.fixture
async def server():
    runner = await serve(sample(), port=0)  # default limits
    yield runner
    await runner.stop()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        yield s


async def post(http, url, body, sid=None, headers=None, raw=False):
    h = dict(HDRS)
    if sid:
        h["Mcp-Session-Id"] = sid
    h.update(headers or {})
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with http.post(url, data=data, headers=h) as r:
        payload = await r.read()
        return r.status, r.headers, (payload if raw else (orjson.loads(payload) if payload and
                                     r.content_type == "application/json" else payload))


async def open_session(http, url) -> str:
    status, headers, body = await post(http, url, INIT)
    assert status == 200 and body["result"]["protocolVersion"] == "2025-11-25"
    sid = headers["Mcp-Session-Id"]
    status, _, _ = await post(http, url, {"jsonrpc": "2.0", "method":
                                          "notifications/initialized"}, sid)
    assert status == 202
    return sid


def call(i, name="echo", **args):
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": name, "arguments": args}}


async def test_session_lifecycle(server, http):
    url = server.url
    sid = await open_session(http, url)
    assert len(sid) >= 32
    status, _, body = await post(http, url, call(2, text="hi"), sid)
    assert status == 200 and body["result"]["content"][0]["text"] == "hi"
    # missing session -> 400, unknown -> 404
    status, _, _ = await post(http, url, call(3))
    assert status == 400
    status, _, _ = await post(http, url, call(3), "not-a-session")
    assert status == 404
    # unsupported protocol version -> 400; a supported older one is fine
    status, _, _ = await post(http, url, call(4), sid, {"MCP-Protocol-Version": "1999-01-01"})
    assert status == 400
    status, _, _ = await post(http, url, call(4), sid, {"MCP-Protocol-Version": "2025-03-26"})
    assert status == 200
    # DELETE ends it; afterwards 404
    async with http.delete(url, headers={"Mcp-Session-Id": sid}) as r:
        assert r.status == 200
    status, _, _ = await post(http, url, call(5), sid)
    assert status == 404
    async with http.delete(url, headers={"Mcp-Session-Id": sid}) as r:
        assert r.status == 404
    async with http.delete(url) as r:
        assert r.status == 400


async def test_sessionless_probe_gets_method_not_found(server, http):
    """A sessionless request of no revision for a method we do not serve: -32601.
    (A 2026-07-28 ``server/discover`` is answered: tests/server/test_server_2026.py.)"""
    status, _, body = await post(http, server.url, {"jsonrpc": "2.0", "id": 7,
                                                    "method": "prompts/list", "params": {}})
    assert status == 200 and body["error"]["code"] == -32601 and body["id"] == 7
    # the 2026-07-28 header without the _meta envelope: a modern error, not a fallback
    status, _, body = await post(http, server.url, {"jsonrpc": "2.0", "id": 8,
                                                    "method": "server/discover", "params": {}},
                                 headers={"MCP-Protocol-Version": "2026-07-28"})
    assert status == 400 and body["error"]["code"] == -32602 and body["id"] == 8


async def test_malformed_input(server, http):
    url = server.url
    sid = await open_session(http, url)
    status, _, body = await post(http, url, b'{"jsonrpc": "2.0", "id": 1, "meth', sid)
    assert status == 400 and body["error"]["code"] == -32700
    status, _, body = await post(http, url, [call(1), call(2)], sid)
    assert status == 400 and body["error"]["code"] == -32600
    status, _, body = await post(http, url, b"[]", sid)
    assert status == 400 and body["error"]["code"] == -32600
    status, _, body = await post(http, url, {"jsonrpc": "1.0", "id": 1, "method": "ping"}, sid)
    assert status == 400 and body["error"]["code"] == -32600
    status, _, _ = await post(http, url, call(1), sid, {"Content-Type": "text/plain"})
    assert status == 415
    status, _, _ = await post(http, url, call(1), sid, {"Accept": "text/html"})
    assert status == 406
    status, _, body = await post(http, url, call(9, text="ok"), sid)
    assert status == 200 and body["id"] == 9


async def test_oversized_body_413_and_server_keeps_working(server, http):
    url = server.url
    sid = await open_session(http, url)
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * (50 * 1024 * 1024) \
        + b'"}}'
    async with http.post(url, data=io.BytesIO(big), headers={**HDRS, "Mcp-Session-Id": sid}) as r:
        assert r.status == 413

    async def chunks():  # no Content-Length: the limit is enforced while reading
        for _ in range(50):
            yield b"a" * (1024 * 1024)

    h = {**HDRS, "Mcp-Session-Id": sid}
    async with http.post(url, data=chunks(), headers=h) as r:
        assert r.status == 413
    status, _, body = await post(http, url, call(2, text="still here"), sid)
    assert status == 200 and body["result"]["content"][0]["text"] == "still here"


async def test_oversized_header_refused(server, http):
    async with http.post(server.url, data=orjson.dumps(INIT),
                         headers={**HDRS, "X-Big": "a" * 20000}) as r:
        assert r.status in (400, 431)
    sid = await open_session(http, server.url)
    assert sid


async def test_host_and_origin_checks(server, http):
    url = server.url
    for extra in ({"Host": "evil.example.com"}, {"Origin": "http://evil.example.com"},
                  {"Origin": "null"}, {"Host": f"evil.example.com:{server.port}",
                                       "Origin": f"http://evil.example.com:{server.port}"}):
        status, _, _ = await post(http, url, INIT, headers=extra)
        assert status == 403, extra
    for extra in ({"Host": f"localhost:{server.port}"},
                  {"Origin": f"http://127.0.0.1:{server.port}"},
                  {"Origin": "http://localhost:5173"}):
        status, _, _ = await post(http, url, INIT, headers=extra)
        assert status == 200, extra
    async with http.get(url, headers={"Origin": "https://evil.example.com",
                                      "Accept": "text/event-stream"}) as r:
        assert r.status == 403


async def test_get_stream_event_ids_and_resume(server, http):
    url = server.url
    sid = await open_session(http, url)
    h = server.handler
    await post(http, url, {"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                           "params": {"uri": "test://a"}}, sid)
    h.notify_updated("test://a")  # buffered before any stream is open
    hdr = {"Mcp-Session-Id": sid, "Accept": "text/event-stream"}
    async with http.get(url, headers=hdr) as r:
        assert r.status == 200 and r.content_type == "text/event-stream"
        events = [await read_event(r)]
        h.notify_updated("test://a")
        events.append(await read_event(r))
    assert [e["id"] for e in events] == ["1", "2"]
    assert all(orjson.loads(e["data"]) == {"jsonrpc": "2.0", "method":
                                           "notifications/resources/updated",
                                           "params": {"uri": "test://a"}} for e in events)
    h.notify_updated("test://a")  # id 3, while no stream is open
    async with http.get(url, headers={**hdr, "Last-Event-ID": "1"}) as r:
        replay = [await read_event(r), await read_event(r)]
    assert [e["id"] for e in replay] == ["2", "3"]
    # GET needs a session and the SSE media type
    async with http.get(url, headers={"Accept": "text/event-stream"}) as r:
        assert r.status == 400
    async with http.get(url, headers={**hdr, "Mcp-Session-Id": "nope"}) as r:
        assert r.status == 404
    async with http.get(url, headers={"Mcp-Session-Id": sid, "Accept": "application/json"}) as r:
        assert r.status == 406


async def read_event(resp) -> dict:
    ev: dict = {}
    async with asyncio.timeout(10):
        while True:
            line = (await resp.content.readline()).decode().rstrip("\n")
            if not line:
                if "data" in ev:
                    return ev
                continue
            if line.startswith(":"):
                continue
            k, _, v = line.partition(":")
            ev[k] = v.lstrip(" ")


async def test_response_preceded_by_messages_is_sse(server, http):
    url = server.url
    sid = await open_session(http, url)
    h = {**HDRS, "Mcp-Session-Id": sid}
    async with http.post(url, data=orjson.dumps(call(5, "chatty")), headers=h) as r:
        assert r.content_type == "text/event-stream"
        first = orjson.loads((await read_event(r))["data"])
        second = orjson.loads((await read_event(r))["data"])
    assert first["method"] == "notifications/progress"
    assert second["id"] == 5 and second["result"]["content"][0]["text"] == "done"
    # a client accepting only SSE gets SSE; one accepting only JSON gets JSON
    async with http.post(url, data=orjson.dumps(call(6, text="x")),
                         headers={**h, "Accept": "text/event-stream"}) as r:
        assert r.content_type == "text/event-stream"
        assert orjson.loads((await read_event(r))["data"])["id"] == 6
    status, _headers, body = await post(http, url, call(7, "chatty"), sid,
                                       {"Accept": "application/json"})
    assert status == 200 and body["id"] == 7


async def test_thousand_concurrent_sessions(server, http):
    url = server.url
    sids = await asyncio.gather(*(open_session(http, url) for _ in range(1000)))
    assert len(set(sids)) == 1000
    results = await asyncio.gather(*(post(http, url, call(i, text=str(i)), sid)
                                     for i, sid in enumerate(sids)))
    assert all(body["result"]["content"][0]["text"] == str(i)
               for i, (_, _, body) in enumerate(results))
    assert len(server.server.sessions.live) == 1000


async def test_sessions_per_client_limit():
    runner = await serve(sample(), port=0, limits=Limits(sessions_per_client=3))
    try:
        async with aiohttp.ClientSession() as http:
            sids = [await open_session(http, runner.url) for _ in range(3)]
            status, headers, _ = await post(http, runner.url, INIT)
            assert status == 429 and "Retry-After" in headers
            async with http.delete(runner.url, headers={"Mcp-Session-Id": sids[0]}) as r:
                assert r.status == 200
            assert await open_session(http, runner.url)
    finally:
        await runner.stop()


async def test_idle_sessions_are_reaped(server, http):
    import time

    sid = await open_session(http, server.url)
    assert server.server.reap() == 0
    assert server.server.reap(now=time.monotonic() + 10_000) == 1
    status, _, _ = await post(http, server.url, call(1), sid)
    assert status == 404


async def test_stalled_reader_does_not_block_others(server, http):
    """A client opens the GET stream and never reads it; the server floods that
    stream and still answers everyone else."""
    url = server.url
    sid = await open_session(http, url)
    flood = "test://flood/" + "x" * 2000  # ~2 KiB an event: ~8 MiB toward the stalled reader
    await post(http, url, {"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                           "params": {"uri": flood}}, sid)
    host, port = server.host, server.port
    reader, writer = await asyncio.open_connection(host, port)
    writer.write((f"GET /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n"
                  f"Mcp-Session-Id: {sid}\r\n\r\n").encode())
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")  # headers; never read again
    try:
        for _ in range(4000):
            server.handler.notify_updated(flood)
            await asyncio.sleep(0)
        other = await open_session(http, url)
        results = await asyncio.gather(*(post(http, url, call(i, text="x"), other)
                                         for i in range(50)))
        assert all(s == 200 for s, _, _ in results)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def test_stop_ends_open_streams(http):
    runner = await serve(sample(), port=0)
    sid = await open_session(http, runner.url)
    async with http.get(runner.url, headers={"Mcp-Session-Id": sid,
                                             "Accept": "text/event-stream"}) as r:
        assert r.status == 200
        await runner.stop()
        async with asyncio.timeout(10):
            with contextlib.suppress(aiohttp.ClientError):
                await r.read()


async def test_other_methods_and_call_log(server, http):
    import sys

    from agentd.log import configure

    async with http.put(server.url, data=b"{}") as r:
        assert r.status == 405
    sink = io.StringIO()
    configure(stream=sink, level="info")
    try:
        sid = await open_session(http, server.url)
        await post(http, server.url, call(3, text="x"), sid)
    finally:
        configure(stream=sys.stderr)
    lines = [orjson.loads(x) for x in sink.getvalue().splitlines()]
    calls = [x for x in lines if x["event"] == "mcp.serve.call"]
    assert calls and calls[0]["origin"] == "management" and calls[0]["auth"] == "none"
    assert calls[0]["tool"] == "echo" and sid not in sink.getvalue()
