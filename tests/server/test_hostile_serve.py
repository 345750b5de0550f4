"""Hostile load on the served surface (issue 21): one test per attack row,
each against a real `agentd --serve-mcp` listening on loopback, attacked over
real sockets, with a canary call proving the server still serves.

Every wait below is a hang guard (the test fails if the server never does the
thing), never a speed assertion: speed and RSS figures under load live in
benchmarks/bench_hostile.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from pathlib import Path

import aiohttp
import orjson
import peers
from serve_harness import (
    INIT,
    assert_all_json,
    canary,
    errors,
    fd_count,
    port_of,
    post,
    raw_exchange,
    rss_mib,
    start,
    stop,
)
from waiting import until


# ------------------------------------------------------------------ rows
async def test_huge_headers_are_refused_before_parsing_and_memory_stays_bounded(
        agentd_bin, tmp_path):
    agent, url = await start(agentd_bin, tmp_path)
    port = port_of(url)
    pid = agent.proc.pid
    async with aiohttp.ClientSession() as http:
        await canary(http, url)
        before = rss_mib(pid)
        big = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
        sem = asyncio.Semaphore(50)

        async def one() -> bytes:
            async with sem:
                try:
                    return await raw_exchange(port, big)
                except ConnectionError:
                    return b""

        answers = await asyncio.gather(*(one() for _ in range(300)))
        await canary(http, url)
        after = rss_mib(pid)
    done = await stop(agent)
    # refused (431) or reset while still sending: never parsed, never a 200
    assert all(a == b"" or a.startswith(b"HTTP/1.1 431") for a in answers)
    assert any(a.startswith(b"HTTP/1.1 431") for a in answers)
    assert after - before <= 32, (before, after)
    assert not errors(done)
    limit_lines = done.events("mcp.serve.limit")
    assert limit_lines and len(limit_lines) < 50  # throttled, not one per connection
    assert_all_json(done.stderr)


async def test_idle_connections_are_capped_and_closed(agentd_bin, tmp_path):
    nofile = 512  # the cap is then 256 connections: half the limit
    agent, url = await start(agentd_bin, tmp_path, nofile=nofile,
                             limits={"header_timeout": 2.0, "keepalive_timeout": 3.0})
    port = port_of(url)
    pid = agent.proc.pid
    socks = []
    peak = 0
    for _ in range(6):  # 6 x 150 idle or half-sent connections, beyond the cap
        for i in range(150):
            try:
                r, w = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            if i % 2:
                w.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half-sent head
            socks.append((r, w))
        peak = max(peak, fd_count(pid))
        async with aiohttp.ClientSession() as http:
            await canary(http, url)  # still serving
    assert peak <= 0.8 * nofile, peak
    # every idle or half-sent connection is closed by the server (EOF or reset)
    async with asyncio.timeout(60):  # hang guard: the header timeout is 2 s
        for r, w in socks:
            try:
                await r.read()
            except ConnectionError:
                pass
            w.close()
    # a spawn still gets its pipes and process
    async with aiohttp.ClientSession() as http:
        status, headers, body = await post(http, url, INIT)
        sid = headers["Mcp-Session-Id"]
        status, _, body = await post(http, url, {
            "jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "subagent.spawn",
                       "arguments": {"instruction": "wait", "async": True}}}, sid)
        assert status == 200 and not body["result"].get("isError"), body
    done = await stop(agent)
    reasons = {e.get("reason") for e in done.events("mcp.serve.limit")}
    assert reasons & {"header_timeout", "unauthenticated_connections", "connections"}
    assert "Too many open files" not in done.stderr
    assert not errors(done)
    assert_all_json(done.stderr)


class Certs:
    def __init__(self, tmp: Path) -> None:
        trustme = peers.import_peer("trustme")
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1")
        self.ca, self.cert, self.key = tmp / "ca.pem", tmp / "srv.pem", tmp / "srv.key"
        ca.cert_pem.write_to_path(str(self.ca))
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        server.private_key_pem.write_to_path(str(self.key))
        self.clients = {}
        for name in ("alice", "bob"):
            c = ca.issue_cert(f"{name}.agentd.test", common_name=name)
            cert, key = tmp / f"{name}.pem", tmp / f"{name}.key"
            c.cert_chain_pems[0].write_to_path(str(cert))
            c.private_key_pem.write_to_path(str(key))
            self.clients[name] = (cert, key)

    def context(self, name: str) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        cert, key = self.clients[name]
        ctx.load_cert_chain(str(cert), str(key))
        return ctx


async def test_one_principal_cannot_lock_out_another(agentd_bin, tmp_path):
    certs = Certs(tmp_path)
    agent, url = await start(agentd_bin, tmp_path, "--serve-cert", str(certs.cert),
                             "--serve-key", str(certs.key), "--serve-client-ca", str(certs.ca),
                             scheme="https", limits={"sessions_per_client": 64})
    alice = aiohttp.TCPConnector(ssl=certs.context("alice"), limit=16)
    bob = aiohttp.TCPConnector(ssl=certs.context("bob"))
    async with aiohttp.ClientSession(connector=alice) as a, \
            aiohttp.ClientSession(connector=bob) as b:
        statuses = await asyncio.gather(*(post(a, url, INIT) for _ in range(64)))
        assert all(s == 200 for s, _, _ in statuses)
        status, headers, _ = await post(a, url, INIT)  # alice is at her cap
        assert status == 429 and headers.get("Retry-After")
        await canary(b, url)  # bob, from the same address, is not
    done = await stop(agent)
    assert not errors(done)


async def test_slow_body_and_unread_stream_are_bounded(agentd_bin, tmp_path):
    # keepalive_timeout: how long the connection of the ended stream then lives
    agent, url = await start(agentd_bin, tmp_path, limits={
        "body_timeout": 1.0, "stream_max_age": 1.0, "idle_timeout": 3.0,
        "keepalive_timeout": 1.0})
    port = port_of(url)
    async with aiohttp.ClientSession() as http:
        sid = await canary(http, url)
        # a slow body: the head promises 1000 bytes, 10 arrive
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Accept: application/json\r\nMcp-Session-Id: {sid}\r\n"
                f"Content-Length: 1000\r\n\r\n").encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + b'{"jsonrpc"')
        async with asyncio.timeout(30):  # hang guard
            answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        # an SSE stream that is never read: the server ends it, then the session.
        # A fresh session, so the time the 408 took cannot have idled it out first.
        sid = await canary(http, url)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write((f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                      f"Mcp-Session-Id: {sid}\r\n\r\n").encode())
        await writer.drain()
        # nothing is read: the server ends the stream at its age, then the idle session
        await agent.wait_for_event("mcp.serve.session.end", reason="idle")
        async with asyncio.timeout(30):  # hang guard
            rest = await reader.read()  # ...and has closed the stream
        writer.close()
        assert rest.startswith(b"HTTP/1.1 200")
        await canary(http, url)
    done = await stop(agent)
    ended = [e for e in done.events("mcp.serve.session.end") if e.get("reason") == "idle"]
    # the session named by a short form that says it is one, never the whole id
    assert ended and all(len(e["session"]) == 9 and e["session"].endswith("…")
                         for e in ended)
    assert sid not in done.stderr
    assert not errors(done)


async def test_deep_nesting_and_invalid_utf8_are_clean_rejections(agentd_bin, tmp_path):
    agent, url = await start(agentd_bin, tmp_path)
    async with aiohttp.ClientSession() as http:
        sid = await canary(http, url)
        deep = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":' + b"[" * 1000 + \
            b"]" * 1000 + b"}"
        status, _, body = await post(http, url, deep, sid)
        assert status == 400 and body["error"]["code"] == -32700
        deep_args = (b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"status",'
                     b'"arguments":{"a":' + b"[" * 1000 + b"]" * 1000 + b"}}}")
        status, _, body = await post(http, url, deep_args, sid)
        assert status in (200, 400) and body["error"]["code"] in (-32700, -32602)
        bad = (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"status",'
               b'"arguments":{"x":"\xff\xfe"}}}')
        status, _, body = await post(http, url, bad, sid)
        assert body["error"]["code"] == -32602, body
        bad_method = b'{"jsonrpc":"2.0","id":8,"method":"tools/\xffcall"}'
        status, _, body = await post(http, url, bad_method, sid)
        assert status == 400 and body["error"]["code"] == -32700
        await canary(http, url)
    done = await stop(agent)
    assert not errors(done)
    assert "Traceback" not in done.stderr
    assert_all_json(done.stderr)


async def test_media_types_follow_rfc_9110(agentd_bin, tmp_path):
    agent, url = await start(agentd_bin, tmp_path)
    async with aiohttp.ClientSession() as http:
        for ctype, expected in (("APPLICATION/JSON", 200),
                                ("Application/Json; charset=utf-8", 200),
                                ("application/jsonp", 415), ("application/json-seq", 415),
                                ("text/plain", 415)):
            status, _, _ = await post(http, url, INIT, headers={"Content-Type": ctype})
            assert status == expected, ctype
        status, _, _ = await post(http, url, INIT, headers={"Accept": "application/jsonp"})
        assert status == 406
    await stop(agent)


async def test_absolute_target_and_duplicate_origin_are_refused(agentd_bin, tmp_path):
    agent, url = await start(agentd_bin, tmp_path)
    port = port_of(url)
    body = orjson.dumps(INIT)
    common = (b"Content-Type: application/json\r\nAccept: application/json\r\n"
              b"Content-Length: %d\r\n" % len(body))
    absolute = (b"POST http://evil.example/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + common +
                b"\r\n" + body)
    assert (await raw_exchange(port, absolute)).startswith(b"HTTP/1.1 403")
    dup = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://127.0.0.1\r\n"
           b"Origin: http://evil.example\r\n" + common + b"\r\n" + body)
    assert (await raw_exchange(port, dup)).startswith(b"HTTP/1.1 403")
    same = (b"POST http://127.0.0.1:%d/mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (port, port)
            + common + b"\r\n" + body)
    assert (await raw_exchange(port, same)).startswith(b"HTTP/1.1 200")
    done = await stop(agent)
    refused = {e.get("reason") for e in done.events("mcp.serve.refused")}
    assert {"target_host", "duplicate_origin"} <= refused


def _handle(body: dict) -> str:
    text = json.dumps(body)
    found = re.search(r"served\.\d+", text)
    assert found, text
    return found.group(0)


async def test_cancel_right_after_spawn_ends_at_the_first_rung(agentd_bin, tmp_path):
    agent, url = await start(agentd_bin, tmp_path, "--drain-timeout", "5", level="debug")
    async with aiohttp.ClientSession() as http:
        _status, headers, _ = await post(http, url, INIT)
        sid = headers["Mcp-Session-Id"]

        async def call(i: int, name: str, args: dict) -> dict:
            status, _, body = await post(http, url, {
                "jsonrpc": "2.0", "id": i, "method": "tools/call",
                "params": {"name": name, "arguments": args}}, sid)
            assert status == 200, body
            return body

        handles = []
        for i in range(3):  # the cancel lands before the child read its run frame
            spawned = await call(10 + i, "subagent.spawn", {"instruction": "think",
                                                            "async": True})
            handle = _handle(spawned)
            handles.append(handle)
            await call(20 + i, "subagent.cancel", {"handle": handle})
        async def all_cancelled() -> bool:
            states = [await call(30, "subagent.status", {"handle": h}) for h in handles]
            return all("cancelled" in json.dumps(s) for s in states)
        await until(all_cancelled, what="every cancelled run reads cancelled")
        # SIGTERM during a burst of spawns drains through the first rung too
        for i in range(4):
            await call(40 + i, "subagent.spawn", {"instruction": "think", "async": True})
    done = await stop(agent)
    rungs = {e["handle"]: e.get("rung") for e in done.events("subagent.ladder")}
    assert len(rungs) == 7 and set(rungs.values()) <= {"exit", "ask"}, rungs
    exits = {e["handle"]: e.get("status") for e in done.events("subagent.exit")}
    assert set(exits.values()) == {"cancelled"} and len(exits) == 7, exits
    # the whole run drained inside its timeout: nothing outlived its child
    assert not done.events("run.drain.timeout") and not done.events("run.exit.hard")
    assert not errors(done)


async def test_bad_requests_and_hangups_log_json_and_401s_are_throttled(agentd_bin, tmp_path):
    agent, url = await start(agentd_bin, tmp_path, "--serve-bearer", "s3cret-token-21")
    port = port_of(url)
    auth = {"Authorization": "Bearer s3cret-token-21"}
    async with aiohttp.ClientSession() as http:
        await canary(http, url, headers=auth)
        for _ in range(200):  # wrong tokens
            status, _, _ = await post(http, url, INIT, headers={"Authorization": "Bearer nope"})
            assert status == 401
        for junk in (b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"\x16\x03\x01\x00\xa5",
                     b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n"):
            await raw_exchange(port, junk)
        # a client that hangs up mid-body
        _, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Authorization: Bearer s3cret-token-21\r\nContent-Length: 500\r\n\r\n{")
        await w.drain()
        w.close()
        await canary(http, url, headers=auth)
    done = await stop(agent)
    assert_all_json(done.stderr)
    assert "Traceback" not in done.stderr and "s3cret-token-21" not in done.stderr
    refused = [e for e in done.events("mcp.serve.refused") if e.get("reason") == "auth"]
    assert 1 <= len(refused) <= 5  # 200 refusals, one burst of lines per window
    assert not errors(done)
