"""A 2025-11-25 session answers only the principal that opened it (one worker).

Real listeners on loopback: the served endpoint over https with mTLS (two
client certificates, trustme) and over http with two named bearers.  Bob,
holding Alice's ``Mcp-Session-Id``, gets the 404 of an unknown session for a
POST, the GET stream and a DELETE; Alice's session is untouched by all three
(her GET stream opens, her calls are answered) and her own DELETE ends it.
"""

from __future__ import annotations

import ssl

import aiohttp
import orjson
import pytest
import trustme

from agentd.mcp.server.auth import server_ssl_context
from agentd.mcp.server.http.server import serve
from agentd.served.selfmcp import SelfMCP

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}
HDRS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
TOKENS = {"alice": "tok-alice-0c1d2e", "bob": "tok-bob-7f8e9d"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key, client_ca = d / "server.crt", d / "server.key", d / "clients.crt"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(client_ca))
    return {"server": server_ssl_context(str(cert), str(key), str(client_ca)), "ca": ca,
            "alice": ca.issue_cert("alice@example"), "bob": ca.issue_cert("bob@example")}


def _ctx(pki, who: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    pki["ca"].configure_trust(ctx)
    pki[who].configure_cert(ctx)
    return ctx


async def _exchange(url: str, method: str, *, ssl_ctx=None, headers=None, body=None):
    """One request on a fresh connection: status, headers, and the first bytes of the body."""
    async with aiohttp.ClientSession() as http, \
            http.request(method, url, ssl=ssl_ctx if ssl_ctx is not None else True,
                         data=orjson.dumps(body) if body is not None else None,
                         headers={**HDRS, **(headers or {})}) as r:
        first = await r.content.readany() if r.status == 200 else await r.read()
        return r.status, r.headers, first


async def _check_owner_only(url: str, alice: dict, bob: dict) -> None:
    """``alice``/``bob``: each one's ``ssl_ctx`` and ``headers`` for :func:`_exchange`."""
    status, headers, _ = await _exchange(url, "POST", body=INIT, **alice)
    assert status == 200
    sid = {"Mcp-Session-Id": headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}
    as_bob = {**bob, "headers": {**bob["headers"], **sid}}
    as_alice = {**alice, "headers": {**alice["headers"], **sid}}
    for method, body in (("POST", LIST), ("GET", None), ("DELETE", None)):
        status, _, text = await _exchange(url, method, body=body, **as_bob)
        assert status == 404, (method, status, text)
        assert b"unknown or ended session" in text  # as for an id never minted
    status, _, text = await _exchange(url, "POST", body=LIST, **as_alice)
    assert status == 200 and b'"subagent.spawn"' in text  # Bob's DELETE ended nothing
    status, headers, first = await _exchange(url, "GET", **as_alice)
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert first.startswith(b": stream open")
    status, _, _ = await _exchange(url, "DELETE", **as_alice)
    assert status == 200
    status, _, _ = await _exchange(url, "POST", body=LIST, **as_alice)
    assert status == 404  # her own DELETE did end it


async def test_an_mtls_session_answers_only_its_certificate(pki) -> None:
    runner = await serve(SelfMCP(), port=0, ssl_context=pki["server"])
    try:
        await _check_owner_only(runner.url, {"ssl_ctx": _ctx(pki, "alice"), "headers": {}},
                                {"ssl_ctx": _ctx(pki, "bob"), "headers": {}})
    finally:
        await runner.stop()


async def test_a_bearer_session_answers_only_its_bearer() -> None:
    runner = await serve(SelfMCP(), port=0, bearers=TOKENS)
    try:
        await _check_owner_only(
            runner.url, {"headers": {"Authorization": f"Bearer {TOKENS['alice']}"}},
            {"headers": {"Authorization": f"Bearer {TOKENS['bob']}"}})
    finally:
        await runner.stop()
