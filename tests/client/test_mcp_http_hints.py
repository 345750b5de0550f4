"""An MCP server's HTTP fault in the user's words, with its fix (agentd/mcp/client/http_hints.py),
through the real `agentd` console script against FastMCP 4 (tests/support/fastmcp_server.py:
plain, TLS with a test CA, behind a bearer): the exact `mcp.server.failed` line and
exit 6 for each mistake a person makes when declaring a server."""

from __future__ import annotations

import json
from pathlib import Path

import peers
import pytest
from agentd_proc import Done, run_agentd
from aiohttp import web
from peers import free_port, python_peer, require_modules

FASTMCP = ("fastmcp", "uvicorn")
TOKEN = "tok-5b1e0c7d93a2"


@pytest.fixture(scope="module")
def playback(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("pb") / "script.json"
    path.write_text(json.dumps({"turns": [{"content": "done"}]}))
    return f"playback:{path}"


async def run(agentd_bin: str, playback: str, *extra: str) -> Done:
    return await run_agentd(agentd_bin, ["--instruction", "x", "--intelligence", playback,
                                         *extra])


def failure(done: Done) -> str:
    assert done.rc == 6, done.stderr
    [failed] = done.events("mcp.server.failed")
    return failed["error"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[Path, Path, Path]:
    trustme = peers.import_peer("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    d = tmp_path_factory.mktemp("tls")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    return d / "ca.pem", d / "cert.pem", d / "key.pem"


async def test_nothing_listening(agentd_bin, playback) -> None:
    port = free_port()
    done = await run(agentd_bin, playback, "--mcp", f"s=http://127.0.0.1:{port}/mcp")
    assert failure(done) == (f"s: nothing is listening on 127.0.0.1:{port}: is the server "
                             "running? (--mcp NAME=URL)")


async def test_a_url_without_its_mcp_path(agentd_bin, playback) -> None:
    require_modules(*FASTMCP)
    with python_peer("fastmcp_server.py") as peer:
        base = f"http://127.0.0.1:{peer.port}"
        done = await run(agentd_bin, playback, "--mcp", f"s={base}")
    assert failure(done) == (f"s: initialize failed: HTTP 404: Not Found: is {base} the MCP "
                             f"endpoint? most servers serve it at the /mcp path ({base}/mcp)")


async def test_plain_http_to_a_tls_port(agentd_bin, playback, certs) -> None:
    require_modules(*FASTMCP)
    _ca, cert, key = certs
    with python_peer("fastmcp_server.py", "--tls", str(cert), str(key)) as peer:
        done = await run(agentd_bin, playback, "--mcp", f"s=http://127.0.0.1:{peer.port}/mcp")
    assert failure(done) == (
        f"s: initialize failed: 127.0.0.1:{peer.port} closed the connection without an HTTP "
        f"answer: if it speaks TLS, use https:// in the URL (https://127.0.0.1:{peer.port}/mcp)")


async def test_a_private_ca_names_ca_file(agentd_bin, playback, certs, tmp_path) -> None:
    require_modules(*FASTMCP)
    ca, cert, key = certs
    with python_peer("fastmcp_server.py", "--tls", str(cert), str(key)) as peer:
        url = f"https://127.0.0.1:{peer.port}/mcp"
        done = await run(agentd_bin, playback, "--mcp", f"s={url}")
        conf = tmp_path / "agentd.toml"
        conf.write_text(f'[[mcp_servers]]\nname = "s"\nurl = "{url}"\nca_file = "{ca}"\n')
        fixed = await run(agentd_bin, playback, "--config", str(conf))
    assert failure(done) == (
        f"s: the TLS certificate of 127.0.0.1:{peer.port} is not trusted ([SSL: "
        "CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer "
        "certificate (_ssl.c:1006)): for a private CA, set ca_file to its CA bundle (PEM) in "
        "the server's mcp_servers entry of --config")
    assert fixed.rc == 0, fixed.stderr


HEADERS_KEY = ("the server's headers in --config (mcp_servers = [{name, url, headers = "
               '{Authorization = "Bearer {{secret:NAME}}"}}])')


async def test_a_wrong_bearer_names_the_headers_key(agentd_bin, playback, tmp_path) -> None:
    """No revision fallback: the 401 at server/discover ends the handshake."""
    require_modules(*FASTMCP)
    with python_peer("fastmcp_server.py", "--bearer", TOKEN) as peer:
        conf = tmp_path / "agentd.toml"
        conf.write_text(f'[[mcp_servers]]\nname = "s"\nurl = "{peer.url}"\n'
                        '[mcp_servers.headers]\nAuthorization = "Bearer wrong-token"\n')
        done = await run(agentd_bin, playback, "--config", str(conf))
    assert failure(done) == ('s: HTTP 401: {"error":"invalid_token"}: the server refused the '
                             f"Authorization header agentd sent: check {HEADERS_KEY}")
    assert done.events("mcp.discover.fallback") == []
    assert "wrong-token" not in done.stderr


async def test_no_bearer_tries_oauth_then_names_the_headers_key(agentd_bin, playback) -> None:
    require_modules(*FASTMCP)
    with python_peer("fastmcp_server.py", "--bearer", TOKEN) as peer:
        done = await run(agentd_bin, playback, "--mcp", f"s={peer.url}")
    origin = f"http://127.0.0.1:{peer.port}"
    assert failure(done) == (
        f"s: authorization failed: no authorization server metadata for {origin} (tried "
        f"{origin}/.well-known/oauth-authorization-server, {origin}/.well-known/openid-"
        f"configuration); if it takes a static token, set {HEADERS_KEY}")


async def test_an_html_page_is_named_not_decoded(agentd_bin, playback) -> None:
    """A web app that answers every path with its index page (a single-page app's
    dev server): a small misbehaving peer, written for this test."""
    async def index(_request: web.Request) -> web.Response:
        return web.Response(text="<!doctype html><html><body>app</body></html>",
                            content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", index)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/mcp"
    try:
        done = await run(agentd_bin, playback, "--mcp", f"s={url}")
    finally:
        await runner.cleanup()
    assert failure(done) == (f"s: initialize failed: the server answered HTML, not JSON: "
                             f"is {url} the MCP endpoint?")
