"""HTTPS with mTLS and bearer auth, certificates minted in the test (trustme)."""

from __future__ import annotations

import ssl

import aiohttp
import orjson
import pytest
import trustme

from agentd.app.serving import serve_self_mcp
from agentd.config.model import ServeSpec
from agentd.config.serve import parse_serve
from agentd.mcp.server.auth import BearerAuth, server_ssl_context
from agentd.mcp.server.http.server import serve
from agentd.served.selfmcp import SelfMCP

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}
HDRS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    server_ca, client_ca, rogue_ca = trustme.CA(), trustme.CA(), trustme.CA()
    leaf = server_ca.issue_cert("127.0.0.1", "localhost")
    files = {"cert": d / "server.crt", "key": d / "server.key", "client_ca": d / "clients.crt"}
    leaf.cert_chain_pems[0].write_to_path(str(files["cert"]))
    for blob in leaf.cert_chain_pems[1:]:
        blob.write_to_path(str(files["cert"]), append=True)
    leaf.private_key_pem.write_to_path(str(files["key"]))
    client_ca.cert_pem.write_to_path(str(files["client_ca"]))
    return {"files": {k: str(v) for k, v in files.items()}, "server_ca": server_ca,
            "good": client_ca.issue_cert("peer@example"), "rogue": rogue_ca.issue_cert("x")}


def client_ctx(pki, cert=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    pki["server_ca"].configure_trust(ctx)
    if cert is not None:
        cert.configure_cert(ctx)
    return ctx


async def initialize(url, ctx, headers=None):
    async with aiohttp.ClientSession() as http, \
            http.post(url, data=orjson.dumps(INIT), headers={**HDRS, **(headers or {})},
                      ssl=ctx) as r:
        return r.status, r.headers, await r.read()


async def test_mtls(pki):
    f = pki["files"]
    runner = await serve(SelfMCP(), port=0,
                         ssl_context=server_ssl_context(f["cert"], f["key"], f["client_ca"]))
    try:
        assert runner.url.startswith("https://")
        status, headers, body = await initialize(runner.url, client_ctx(pki, pki["good"]))
        assert status == 200 and "Mcp-Session-Id" in headers
        assert orjson.loads(body)["result"]["serverInfo"]["name"] == "agentd"
        for cert in (pki["rogue"], None):  # wrong CA, no certificate: the handshake fails
            with pytest.raises(aiohttp.ClientError):
                await initialize(runner.url, client_ctx(pki, cert))
        # an Origin from another site is refused even for an authenticated client
        status, _, _ = await initialize(runner.url, client_ctx(pki, pki["good"]),
                                        {"Origin": "https://evil.example.com"})
        assert status == 403
    finally:
        await runner.stop()


async def test_bearer_over_https(pki):
    f = pki["files"]
    runner = await serve(SelfMCP(), port=0, bearer="s3cret-token",
                         ssl_context=server_ssl_context(f["cert"], f["key"]))
    ctx = client_ctx(pki)
    try:
        status, headers, _ = await initialize(runner.url, ctx,
                                              {"Authorization": "Bearer s3cret-token"})
        assert status == 200
        sid = headers["Mcp-Session-Id"]
        for auth in ({"Authorization": "Bearer wrong"}, {}, {"Authorization": "s3cret-token"},
                     {"Authorization": "Bearer s3cret-token-and-more"}):
            status, headers, body = await initialize(runner.url, ctx, auth)
            assert status == 401 and headers["WWW-Authenticate"] == "Bearer" and body == b""
        # the session id alone is not enough: every request carries the bearer
        async with aiohttp.ClientSession() as http:
            async with http.post(runner.url, data=b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
                                 headers={**HDRS, "Mcp-Session-Id": sid}, ssl=ctx) as r:
                assert r.status == 401
            async with http.post(runner.url, data=b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
                                 headers={**HDRS, "Mcp-Session-Id": sid,
                                          "Authorization": "Bearer s3cret-token"},
                                 ssl=ctx) as r:
                assert r.status == 200
            # missing session -> 400, ended session -> 404
            async with http.delete(runner.url, headers={"Mcp-Session-Id": sid,
                                                        "Authorization": "Bearer s3cret-token"},
                                   ssl=ctx) as r:
                assert r.status == 200
            for h, want in (({}, 400), ({"Mcp-Session-Id": sid}, 404)):
                async with http.post(runner.url, data=b'{"jsonrpc":"2.0","id":3,"method":"ping"}',
                                     headers={**HDRS, **h, "Authorization": "Bearer s3cret-token"},
                                     ssl=ctx) as r:
                    assert r.status == want
    finally:
        await runner.stop()


async def test_serve_self_mcp_with_mtls_and_bearer(pki):
    f = pki["files"]
    spec = parse_serve("https://127.0.0.1:0", f["cert"], f["key"], f["client_ca"], "tok-tok")
    runner = await serve_self_mcp(spec, run_id="r", mode="task")
    try:
        ok = client_ctx(pki, pki["good"])
        status, _, _ = await initialize(runner.url, ok)  # cert but no bearer: both required
        assert status == 401
        status, _, _ = await initialize(runner.url, ok, {"Authorization": "Bearer tok-tok"})
        assert status == 200
    finally:
        await runner.stop()


async def test_unauthenticated_non_loopback_is_refused():
    spec = ServeSpec(url="http://0.0.0.0:0", scheme="http", host="0.0.0.0", port=0)
    with pytest.raises(ValueError):
        await serve_self_mcp(spec)
    with pytest.raises(ValueError):
        await serve(SelfMCP(), host="0.0.0.0", port=0)


def test_bearer_check_is_exact():
    b = BearerAuth("abc-def")
    assert b.check("Bearer abc-def")
    for bad in (None, "", "Bearer abc", "bearer abc-def", "Bearer abc-def ", "Basic abc-def"):
        assert not b.check(bad)
    assert "abc" not in repr(b)
