"""The pool's worker-to-worker link over https with mTLS, with real processes.

Three console-script workers serve `--serve-mcp https://127.0.0.1:PORT` with
their own server certificate (trustme, one CA for the pool) and
`--serve-client-ca` that CA; each presents its own certificate to its peers
when it relays.  A run spawned on one worker is read, polled and cancelled
through another (relayed over https+mTLS), and a 2025-11-25 session opened on
one worker answers through another (the session proxy over the same link).  The link refuses, in the TLS
handshake, a client without a certificate or with one from another CA, and
answers 401 to a correct certificate without the pool MAC.
"""

from __future__ import annotations

import json
import socket
import ssl
import time

import peers
import pytest
from pool_harness import IDS, POOL_KEY, TOKENS, TlsPool, httpx2, rpc_result, tls_client

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")
trustme = peers.import_peer("trustme")

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(300)]


def _handshake(pool: TlsPool, wid: str, cert: tuple[str, str] | None, body: bytes,
               headers: dict[str, str]) -> bytes:
    """A raw POST /pool/relay over TLS: the server's answer bytes, or ``b""``
    when the handshake refused us (TLS 1.3 reports a refused client
    certificate after the client's handshake completed, as an alert or a
    closed stream on the first read, so no HTTP byte ever comes back)."""
    raw = socket.create_connection(("127.0.0.1", pool.ports[wid]), timeout=30)
    try:
        return _post(pool.context(cert).wrap_socket(raw, server_hostname="127.0.0.1"),
                     body, headers)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return b""
    finally:
        raw.close()


def _post(tls: ssl.SSLSocket, body: bytes, headers: dict[str, str]) -> bytes:
    with tls:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        tls.sendall((f"POST /pool/relay HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     f"Connection: close\r\n{head}\r\n").encode() + body)
        out = b""
        while chunk := tls.recv(65536):
            out += chunk
        return out


async def _session_through(pool: TlsPool, owner: str, via: str) -> list[str]:
    """Open a 2025-11-25 session on ``owner``, then list tools in it via ``via``."""
    head = {"Authorization": f"Bearer {TOKENS['alice']}",
            "Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(verify=pool.context(pool.caller), timeout=60,
                                  headers=head) as http:
        init = await http.post(pool.url(owner), json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "pool-tls-test", "version": "1"}}})
        assert init.status_code == 200, init.text
        sid = init.headers["mcp-session-id"]
        assert sid.startswith(f"{owner}.")
        session = {"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
        done = await http.post(pool.url(via), headers=session, json={
            "jsonrpc": "2.0", "method": "notifications/initialized"})
        assert done.status_code == 202, done.text
        listed = await http.post(pool.url(via), headers=session, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert listed.status_code == 200, listed.text
        names = [t["name"] for t in rpc_result(listed)["tools"]]
        return sorted(n for n in names if n in ("status", "subagent.spawn"))


async def test_relay_over_https_with_mtls(agentd_bin, tmp_path) -> None:
    pool = TlsPool(tmp_path)
    try:
        for wid in IDS:
            pool.start(agentd_bin, wid)
        for wid in ("w2", "w3"):  # the probes cross the mTLS link too
            pool.workers[wid].wait_event("pool.peer", lambda r: r.get("peer") == "w1"
                                         and r.get("status") == "alive")
        async with tls_client(pool, "w1", "alice") as a1:
            r = await a1.call_tool("subagent.spawn", {"instruction": "[slow] x", "async": True})
            handle = r.structured_content["handle"]
            assert handle.startswith("served.w1.")
        async with tls_client(pool, "w2", "alice") as a2:
            r = await a2.call_tool("subagent.status", {"handle": handle})
            assert not r.is_error, r.content[0].text
            assert r.structured_content["status"] == "running"
            body = json.loads((await a2.read_resource(
                f"agent://subagent/{handle}")).contents[0].text)
            assert body["handle"] == handle and body["done"] is False
        async with tls_client(pool, "w3", "bob") as b3:  # the principal crosses the link
            r = await b3.call_tool("subagent.status", {"handle": handle})
            assert r.is_error and r.content[0].text == f"unknown handle: {handle}"
        relayed = pool.workers["w1"].events("pool.relayed")
        assert relayed, "w1 answered no relayed request"

        from agentd.pool import handles as ph

        body = json.dumps({"op": "cancel", "handle": handle}).encode()
        signed = ph.sign_request(ph.PoolKey(POOL_KEY.encode()), "w2", time.time(),
                                 "nonce-tls-1", "POST", "/pool/relay", body, "alice",
                                 receiver="w1")
        # no client certificate, or one from another CA: refused by the handshake
        stranger = pool.issue("w2.pool.test", "stranger", ca=trustme.CA())
        for cert in (None, stranger):
            assert _handshake(pool, "w1", cert, body, signed) == b""
        # each refusal is logged, naming the caller's address and OpenSSL's reason
        refused = pool.workers["w1"].wait_event("mcp.serve.tls_refused", count=2)
        assert {r["level"] for r in refused} == {"warning"}
        assert all(r["peer"].startswith("127.0.0.1:") for r in refused)
        assert {r["reason"] for r in refused} == {"PEER_DID_NOT_RETURN_A_CERTIFICATE",
                                                  "CERTIFICATE_VERIFY_FAILED"}
        # a certificate of the pool's CA without the pool MAC: 401
        peer_cert = pool.issue("w2.pool.test", "w2-again")
        answer = _handshake(pool, "w1", peer_cert, body, {})
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        # the run was not touched by any refused request
        async with tls_client(pool, "w3", "alice") as a3:
            r = await a3.call_tool("subagent.status", {"handle": handle})
            assert r.structured_content["status"] == "running"
            r = await a3.call_tool("subagent.cancel", {"handle": handle})  # relayed cancel
            assert not r.is_error and r.structured_content["status"] == "cancelled"
        async with tls_client(pool, "w1", "alice") as a1:  # the owner sees it cancelled
            r = await a1.call_tool("subagent.status", {"handle": handle})
            assert r.structured_content["status"] == "cancelled"
            assert r.structured_content["done"] is True
        assert any(e["op"] == "cancel" for e in pool.workers["w1"].events("pool.relayed"))
        # a 2025-11-25 session opened on w1 answers through w3 (proxied over mTLS)
        assert await _session_through(pool, "w1", "w3") == ["status", "subagent.spawn"]
    finally:
        pool.stop()
