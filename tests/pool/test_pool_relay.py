"""The worker-to-worker link under attack (issue 37): real workers on loopback.

Console-script workers as in tests/pool/test_pool.py, plus the misbehaving parties
of tests/support/pool_link_peers.py: a key-holding member that answers badly on
purpose, and an eavesdropper on a plain-http link that replays what it saw.
What must hold: relayed bodies are read whole up to the documented 4 MiB and
refused past it with the bound named; a pool link is never evicted as an
unauthenticated connection; a captured relay request is refused by every
other worker, by its sender and by its receiver after a restart; 401s close
the connection, are logged throttled, and cost no more than the request's
head; a bad relay answer is a classified error; a placement with a member the
worker does not know is refused.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from pool_harness import IDS, POOL_KEY, Pool, client, httpx2, stop_workers
from pool_link_peers import HostilePeer, RecordingLink

from agentd.pool import handles as ph

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(300)]

KEY = ph.PoolKey(POOL_KEY.encode())
BIG = 600_000  # characters of a run's result read through a peer
ALICE = "bearer:alice"  # the principal of TOKENS["alice"] (docs/security.md)


def _book(tmp):
    path = tmp / "relay.playback.json"
    path.write_text(json.dumps({"playback": 1, "scripts": [
        {"name": "warm", "match": "[warm]",
         "turns": [{"content": "first answer"}, {"content": "second answer"}]},
        {"name": "slowturn", "match": "[slowturn]",
         "turns": [{"content": "first answer"}, {"delay": 6, "content": "late answer"}]},
        {"name": "big", "match": "[big]", "turns": [{"content": "b" * BIG}]},
        {"name": "slow", "match": "[slow]", "turns": [{"delay": 120, "content": "late"}]},
        {"name": "worker", "match": "pool worker", "turns": [{"content": "idle"}]},
    ]}))
    return path


def _peers(pool: Pool, ids, **urls: str) -> tuple[str, ...]:
    """--pool-peer flags for ``ids`` (``urls``: a member reached elsewhere)."""
    return tuple(f for p in ids for f in (
        "--pool-peer", f"{p}={urls.get(p, f'http://127.0.0.1:{pool.ports[p]}')}"))


def _signed(body: bytes, receiver: str = "w1", sender: str = "w2") -> dict[str, str]:
    """What a key holder (the test, standing in for member ``sender``) sends."""
    headers = ph.sign_request(KEY, sender, time.time(), f"test-{time.monotonic_ns()}", "POST",
                              "/pool/relay", body, ALICE, receiver=receiver)
    return {**headers, "Content-Type": "application/json"}


async def _raw(port: int, head: bytes, body: bytes = b"") -> bytes:
    """Everything the worker sends back until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + body)
    await writer.drain()
    try:
        async with asyncio.timeout(30):  # a worker that keeps it open fails the test here
            return await reader.read(-1)
    finally:
        writer.close()


def _no_error_lines(worker) -> None:
    errors = [e for e in worker.events() if e.get("level") == "error"]
    assert not errors, errors[:3]


async def test_bodies_whole_bounded_and_answers_guarded(agentd_bin, tmp_path) -> None:
    pool = Pool(tmp_path, book=_book(tmp_path))
    with HostilePeer(POOL_KEY) as w9:
        try:
            w1 = pool.start(agentd_bin, "w1", peer_flags=False,
                            extra=(*_peers(pool, ("w2",)), "--pool-peer", f"w9={w9.url}"))
            # w2's key comes on the command line: it works, and it is warned about
            w2 = pool.start(agentd_bin, "w2", peer_flags=False,
                            extra=(*_peers(pool, ("w1",)), "--pool-key", POOL_KEY))
            warned = w2.wait_event("config.secret_on_command_line")
            assert warned[0]["flags"] == ["--pool-key"] and "AGENTD_POOL_KEY" in warned[0]["env"]
            assert not w1.events("config.secret_on_command_line")  # env: no warning
            w2.wait_event("pool.peer", lambda r: r.get("peer") == "w1"
                          and r.get("status") == "alive")
            async with client(pool.url("w1"), "alice") as a1, \
                    client(pool.url("w2"), "alice") as a2:
                # a ~2 MB send relayed to its owner, and a 600 KB result read through a peer
                r = await a1.call_tool("subagent.spawn", {"instruction": "[warm] s",
                                                          "warm": True})
                warm = r.structured_content["handle"]
                r = await a2.call_tool("subagent.send", {"handle": warm,
                                                         "message": "m" * 2_000_000})
                assert not r.is_error, r.content[0].text[:300]
                assert r.structured_content["result"] == "second answer"
                r = await a1.call_tool("subagent.spawn", {"instruction": "[big] b"})
                big = r.structured_content["handle"]
                body = json.loads((await a2.read_resource(
                    f"agent://subagent/{big}")).contents[0].text)
                assert body["result"] == "b" * BIG and body["handle"] == big
                # a peer writing its 600 KB answer slowly is still read whole
                slow = w9.handle("slow", ALICE)
                r = await a1.call_tool("subagent.status", {"handle": slow})
                assert not r.is_error, r.content[0].text[:300]
                assert r.structured_content["result"] == HostilePeer.SLOW_RESULT
                # past 4 MiB: refused, the bound named
                r = await a1.call_tool("subagent.status", {"handle": w9.handle("huge", ALICE)})
                assert r.is_error and r.content[0].text == \
                    "pool: worker w9 answered more than the relay's bound of 4 MiB"
                # nested 100,000 deep: a classified error, no error-level line
                r = await a1.call_tool("subagent.status", {"handle": w9.handle("deep", ALICE)})
                assert r.is_error and r.content[0].text == \
                    "pool: worker w9 sent a bad relay answer: nested too deeply"
            failed = w1.wait_event("pool.relay_failed", count=2)
            assert {f["peer"] for f in failed} == {"w9"}
            assert {f["level"] for f in failed} == {"warning"}

            port = pool.ports["w1"]
            async with httpx2.AsyncClient(timeout=30) as http:
                relay = f"http://127.0.0.1:{port}/pool/relay"
                # a placement with a member the worker does not know: refused, named
                body = json.dumps({"op": "spawn", "handle": "", "arguments": {
                    "instruction": "[big] x", "async": True}}).encode()
                r = await http.post(relay, content=body, headers=_signed(body))
                assert r.status_code == 200
                assert r.json() == {"kind": "refused", "body": None, "text": (
                    "spawn refused: bad relayed request: Object contains unknown field `async`")}
                body = json.dumps({"op": "status", "handle": big, "extra": 1}).encode()
                r = await http.post(relay, content=body, headers=_signed(body))
                assert r.status_code == 400 and "unknown field `extra`" in r.text
                # an authenticated request past the bound: 413 naming it
                body = b" " * (4 * 1024 * 1024 + 1)
                r = await http.post(relay, content=body, headers=_signed(body))
                assert r.status_code == 413 and "4 MiB" in r.text
            # a 401 flood: each answered, each connection closed, the log throttled
            head = (f"POST /pool/relay HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n").encode()
            for _ in range(200):
                answer = await _raw(port, head, b"{}")
                assert answer.startswith(b"HTTP/1.1 401 ") and b"Connection: close" in answer
            # an unauthenticated 4 MiB body (signed with another key): refused from its
            # head, the connection closed, the body never awaited
            forged = ph.sign_request(ph.PoolKey(b"not-the-pool-key-0000"), "w2", time.time(),
                                     "nonce-forged-big", "POST", "/pool/relay", b"{}", "alice",
                                     receiver="w1")
            big_head = (f"POST /pool/relay HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        f"Content-Length: {4 * 1024 * 1024}\r\n"
                        + "".join(f"{k}: {v}\r\n" for k, v in forged.items()) + "\r\n").encode()
            answer = await _raw(port, big_head, b"x" * 65536)
            assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
            # a head signed for one body, sent with another: refused once the body is read
            signed = _signed(b"{}")
            swapped = (f"POST /pool/relay HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                       "Content-Length: 2\r\n"
                       + "".join(f"{k}: {v}\r\n" for k, v in signed.items()) + "\r\n").encode()
            answer = await _raw(port, swapped, b"[]")
            assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
            refused = w1.events("pool.relay_refused")
            reasons = [r["reason"] for r in refused]
            assert "relay request: body does not match its signed digest" in reasons
            assert "relay request: bad MAC" in reasons
            assert reasons.count("relay request: missing or oversized authentication") <= 5
            assert len(refused) < 20  # 201 refusals, a handful of lines
            _no_error_lines(w1)
        finally:
            stop_workers(pool.workers.values())


async def test_idle_strangers_never_evict_a_pool_link(agentd_bin, tmp_path) -> None:
    """300 idle unauthenticated sockets (more than the gate's 256) held open on the
    owner while a relayed send is in flight: the flood is evicted, the link is not."""
    pool = Pool(tmp_path, book=_book(tmp_path))
    try:
        for wid in ("w1", "w2"):
            pool.start(agentd_bin, wid, peer_flags=False,
                       extra=_peers(pool, ({"w1", "w2"} - {wid})))
        w1 = pool.workers["w1"]
        pool.workers["w2"].wait_event("pool.peer", lambda r: r.get("peer") == "w1"
                                      and r.get("status") == "alive")
        port = pool.ports["w1"]
        sockets: list[asyncio.StreamWriter] = []
        async with client(pool.url("w1"), "alice") as a1, \
                client(pool.url("w2"), "alice") as a2:
            r = await a1.call_tool("subagent.spawn", {"instruction": "[slowturn] s",
                                                      "warm": True})
            warm = r.structured_content["handle"]
            send = asyncio.create_task(a2.call_tool("subagent.send", {"handle": warm,
                                                                     "message": "again"}))
            try:
                while not send.done():  # the flood lasts as long as the turn
                    for _ in range(300 if not sockets else 1):
                        sockets.append((await asyncio.open_connection("127.0.0.1", port))[1])
                    await asyncio.sleep(0.05)  # the flood's pace, not a wait for anything
                r = await send
            finally:
                for writer in sockets:
                    writer.close()
            assert not r.is_error, r.content[0].text
            assert r.structured_content["result"] == "late answer"
        evicted = w1.wait_event("mcp.serve.limit",
                                lambda e: e.get("reason") == "unauthenticated_connections")
        assert evicted
        assert not pool.workers["w2"].events("pool.relay_failed")
    finally:
        stop_workers(pool.workers.values())


async def test_a_captured_relay_request_is_never_accepted_again(agentd_bin, tmp_path) -> None:
    """w1 reaches w2 through an eavesdropper; what it relayed is replayed to w2, to
    w3, to w1 (its sender) and to w2 restarted under the same id: refused by all."""
    pool = Pool(tmp_path, book=_book(tmp_path))
    with RecordingLink(f"http://127.0.0.1:{pool.ports['w2']}") as link:
        try:
            for wid in IDS:
                urls = {"w2": link.url} if wid == "w1" else {}
                pool.start(agentd_bin, wid, peer_flags=False,
                           extra=_peers(pool, [p for p in IDS if p != wid], **urls))
            async with client(pool.url("w2"), "alice") as a2:
                r = await a2.call_tool("subagent.spawn", {"instruction": "[slow] x",
                                                          "async": True})
                handle = r.structured_content["handle"]
            async with client(pool.url("w1"), "alice") as a1:  # relayed over the link
                r = await a1.call_tool("subagent.status", {"handle": handle})
                assert r.structured_content["status"] == "running"
            headers, body = link.captured[-1]
            assert json.loads(body)["handle"] == handle

            async def replay(wid: str) -> int:
                async with httpx2.AsyncClient(timeout=30) as http:
                    r = await http.post(f"http://127.0.0.1:{pool.ports[wid]}/pool/relay",
                                        content=body, headers=headers)
                    return r.status_code

            def refusals(wid: str) -> list[str]:
                return [e["reason"] for e in pool.workers[wid].events("pool.relay_refused")]

            assert await replay("w2") == 401
            assert refusals("w2") == ["relay request: replayed"]
            for wid in ("w3", "w1"):  # another worker; the sender itself
                assert await replay(wid) == 401
                assert refusals(wid) == ["relay request: addressed to another worker"]
            pool.workers["w2"].stop()
            pool.start(agentd_bin, "w2", run=1, peer_flags=False,
                       extra=_peers(pool, ("w1", "w3")))
            assert await replay("w2") == 401
            assert refusals("w2") == ["relay request: stamped before this worker started"]
            async with client(pool.url("w2"), "alice") as a2:  # nothing was cancelled or run
                r = await a2.call_tool("subagent.status", {"handle": handle})
                assert r.structured_content["status"] == "failed"  # its worker was restarted
        finally:
            stop_workers(pool.workers.values())
