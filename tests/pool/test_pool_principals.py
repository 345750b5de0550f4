"""Principals survive the session proxy's hop, with real workers (issue 37: 2, 6, 8).

Two console-script workers, w1 the owner of the sessions and w2 the worker
the requests land on, so every session request is proxied w2 -> w1:

* an mTLS-only pool (no bearer: each caller is its client certificate, and
  w2 reaches w1 with its own certificate) and a bearer pool on loopback;
  Alice and Bob each open a session on w1 and drive it through w2: Alice's run
  is hers on w1 (read directly there, as her own certificate or bearer), and
  Bob, through w2 as well, cannot read, poll or cancel it;
* Bob holding Alice's session id cannot POST in it, open its GET stream or
  DELETE it, through w2 or directly on w1 (404, as for an unknown session);
* ``Host: evil.example`` is refused through w2 as it is directly (403);
* a pool that could not carry each caller's principal is refused at start
  (exit 2, the flags named).
"""

from __future__ import annotations

import contextlib
import json
import os

import peers
import pytest
from agentd_proc import run_agentd
from pool_harness import POOL_KEY, TOKENS, Pool, TlsPool, rpc_result

httpx2 = peers.import_peer("httpx2")
trustme = peers.import_peer("trustme")

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(300)]

ACCEPT = {"Accept": "application/json, text/event-stream"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "pool-principals-test", "version": "1"}}}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


class Caller:
    """One principal's raw 2025-11-25 client: its own certificate or bearer."""

    def __init__(self, http, urls: dict[str, str]) -> None:
        self.http = http
        self.urls = urls
        self.sid: dict[str, str] = {}

    async def open(self, wid: str) -> dict[str, str]:
        r = await self.http.post(self.urls[wid], json=INIT)
        assert r.status_code == 200, r.text
        self.sid = {"Mcp-Session-Id": r.headers["mcp-session-id"],
                    "MCP-Protocol-Version": "2025-11-25"}
        done = await self.http.post(self.urls[wid], headers=self.sid, json={
            "jsonrpc": "2.0", "method": "notifications/initialized"})
        assert done.status_code == 202, done.text
        return self.sid

    async def tool(self, wid: str, name: str, args: dict) -> dict:
        r = await self.http.post(self.urls[wid], headers=self.sid, json={
            "jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": name, "arguments": args}})
        assert r.status_code == 200, r.text
        return rpc_result(r)

    async def read(self, wid: str, handle: str) -> dict:
        r = await self.http.post(self.urls[wid], headers=self.sid, json={
            "jsonrpc": "2.0", "id": 4, "method": "resources/read",
            "params": {"uri": f"agent://subagent/{handle}"}})
        assert r.status_code == 200, r.text
        text = r.text if not r.headers["content-type"].startswith("text/event-stream") else \
            next(line[5:] for line in r.text.splitlines() if line.startswith("data:"))
        return json.loads(text)

    async def status_of(self, method: str, wid: str, sid: dict[str, str],
                        extra: dict[str, str] | None = None) -> int:
        """The HTTP status of one request of ``method`` in session ``sid``."""
        headers = {**sid, **(extra or {})}
        if method == "POST":
            r = await self.http.post(self.urls[wid], headers=headers, json=LIST)
        elif method == "GET":
            async with self.http.stream("GET", self.urls[wid],
                                        headers={**headers, "Accept": "text/event-stream"}) as r:
                return r.status_code
        else:
            r = await self.http.delete(self.urls[wid], headers=headers)
        return r.status_code


async def _principals_stay_apart(alice: Caller, bob: Caller) -> None:
    """The whole scenario: sessions on w1, every request of them through w2."""
    sid_a = await alice.open("w1")
    await bob.open("w1")
    ack = await alice.tool("w2", "subagent.spawn", {"instruction": "[slow] x", "async": True})
    handle = ack["structuredContent"]["handle"]
    assert handle.startswith("served.w1.")
    # the run is Alice's own on w1: her direct session (her certificate or bearer) sees it
    direct = Caller(alice.http, alice.urls)
    await direct.open("w1")
    mine = await direct.tool("w1", "subagent.status", {"handle": handle})
    assert mine["structuredContent"]["status"] == "running", mine
    # Bob, through the same worker, cannot poll, read or cancel it
    for name in ("subagent.status", "subagent.cancel"):
        theirs = await bob.tool("w2", name, {"handle": handle})
        assert theirs["isError"] is True
        assert theirs["content"][0]["text"] == f"unknown handle: {handle}"
    assert "error" in await bob.read("w2", handle)
    assert "result" in await alice.read("w2", handle)
    # Bob with Alice's session id: refused as unknown, through w2 and on w1 itself
    for wid in ("w2", "w1"):
        for method in ("POST", "GET", "DELETE"):
            assert await bob.status_of(method, wid, sid_a) == 404, (wid, method)
    assert await alice.status_of("POST", "w2", sid_a) == 200  # her session lives on
    # Host: the forwarding hop refuses what a direct request is refused
    for wid in ("w2", "w1"):
        assert await alice.status_of("POST", wid, sid_a, {"Host": "evil.example"}) == 403
    still = await alice.tool("w2", "subagent.status", {"handle": handle})
    assert still["structuredContent"]["status"] == "running"
    done = await alice.tool("w2", "subagent.cancel", {"handle": handle})
    assert done["structuredContent"]["status"] == "cancelled"
    assert await alice.status_of("DELETE", "w2", sid_a) == 200


async def _through_w2(agentd_bin, pool, clients: dict[str, dict]) -> None:
    """Start w1 and w2 of ``pool``, then the scenario with Alice's and Bob's clients
    (``clients``: each one's httpx client arguments, its certificate or bearer)."""
    urls = {wid: pool.url(wid) for wid in ("w1", "w2")}
    for wid in ("w1", "w2"):
        pool.start(agentd_bin, wid)
    async with contextlib.AsyncExitStack() as stack:
        alice, bob = [Caller(await stack.enter_async_context(
            httpx2.AsyncClient(timeout=60, **clients[who])), urls) for who in ("alice", "bob")]
        await _principals_stay_apart(alice, bob)


async def test_mtls_only_pool_keeps_each_certificate_its_own(agentd_bin, tmp_path) -> None:
    pool = TlsPool(tmp_path)
    pool.cfg.write_text("")  # no bearer at all: a caller is its certificate
    try:
        await _through_w2(agentd_bin, pool, {
            who: {"verify": pool.context(pool.issue(f"{who}.pool.test", who)),
                  "headers": ACCEPT} for who in ("alice", "bob")})
        assert pool.workers["w2"].events("mcp.serve.refused")  # Host and session refusals
    finally:
        pool.stop()


async def test_bearer_pool_keeps_each_bearer_its_own(agentd_bin, tmp_path) -> None:
    pool = Pool(tmp_path)
    try:
        await _through_w2(agentd_bin, pool, {
            who: {"headers": {**ACCEPT, "Authorization": f"Bearer {TOKENS[who]}"}}
            for who in ("alice", "bob")})
    finally:
        pool.stop()


async def test_a_forged_principal_claim_is_refused(agentd_bin, tmp_path) -> None:
    """A client sending the pool's headers itself (no key) is 401 and closed, and
    its session is not touched."""
    pool = Pool(tmp_path)
    try:
        pool.start(agentd_bin, "w1")
        async with httpx2.AsyncClient(timeout=60, headers={
                **ACCEPT, "Authorization": f"Bearer {TOKENS['bob']}"}) as http:
            bob = Caller(http, {"w1": pool.url("w1")})
            sid = await bob.open("w1")
            forged = {"Agentd-Pool-Auth": "v2 w2,w1,1,nonce-forged-1," + "0" * 64 + ",00",
                      "Agentd-Pool-Principal": "bearer:alice"}
            assert await bob.status_of("POST", "w1", sid, forged) == 401
            assert await bob.status_of("POST", "w1", sid) == 200
        refused = pool.workers["w1"].events("pool.relay_refused")
        assert refused and refused[0]["op"] == "session"
    finally:
        pool.stop()


async def test_a_pool_that_cannot_carry_principals_exits_2(agentd_bin, tmp_path) -> None:
    env = {**os.environ, "AGENTD_POOL_KEY": POOL_KEY}
    base = ["--instruction", "x", "--intelligence", "playback:none", "--pool-id", "w1"]
    # an unauthenticated listener whose peers are off this host
    done = await run_agentd(agentd_bin, [*base, "--serve-mcp", "http://127.0.0.1:1",
                                         "--pool-peer", "w2=https://10.0.0.9:8443"], env=env)
    assert done.rc == 2, done.stderr
    assert "authenticates no caller" in done.stderr
    assert all(w in done.stderr for w in ("--pool-peer w2", "--serve-bearer",
                                          "--serve-client-ca"))
    # an mTLS pool whose worker certificate the pool's CA does not accept
    tls = TlsPool(tmp_path)
    cert, key = tls.issue("w1.pool.test", "stranger", ca=trustme.CA())
    done = await run_agentd(agentd_bin, [*base, "--serve-mcp", "https://127.0.0.1:1",
                                         "--serve-cert", cert, "--serve-key", key,
                                         "--serve-client-ca", str(tls.ca_file)], env=env)
    assert done.rc == 2, done.stderr
    assert f"--serve-cert {cert} is not accepted" in done.stderr
    assert f"--serve-client-ca {tls.ca_file}" in done.stderr
    assert POOL_KEY not in done.stderr
