"""OAuth for remote MCP servers (agentd.mcp.client.oauth), against real peers, through the
real console script:

* the official conformance suite's client ``auth/*`` scenarios
  (tests/support/conformance_auth_client.py drives ``agentd auth login`` and a run);
* an official-SDK MCP server protected by the SDK's own OAuth
  (tests/support/oauth_sdk_server.py): login, stored tokens (0600, never printed),
  refresh on 401, logout, ``--auth-interactive``, the exit-6 line without it,
  and bad input -- a wrong ``iss``, a missing promised ``iss``, a metadata
  document on another origin, a mismatched resource, an expired refresh token,
  a token endpoint answering HTML, a pre-registration bound to another issuer.

``$BROWSER`` is tests/support/oauth_browser.py: it follows the authorization redirect
to agentd's loopback listener as a person's browser would.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from peers import ROOT, SUPPORT, PythonPeer, ensure_npm_peers, npm_env, require_modules

from agentd.mcp.client.oauth.challenge import parse_challenge
from agentd.mcp.client.oauth.discovery import canonical_resource, resource_matches
from agentd.mcp.client.oauth.store import TokenRecord, TokenStore

BROWSER = str(SUPPORT / "oauth_browser.py")
AGENTD = [sys.executable, "-m", "agentd"]

# Every client auth scenario of @modelcontextprotocol/conformance 0.1.16 that applies
# to agentd (docs/security.md lists the two that do not, and why).
CONFORMANCE_AUTH = [
    "auth/metadata-default", "auth/metadata-var1", "auth/metadata-var2",
    "auth/metadata-var3", "auth/basic-cimd", "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/scope-from-www-authenticate", "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined", "auth/scope-step-up", "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none", "auth/pre-registration",
    "auth/client-credentials-basic", "auth/client-credentials-jwt",
    "auth/resource-mismatch", "auth/offline-access-scope",
    "auth/offline-access-not-supported",
]


@pytest.mark.parametrize("scenario", CONFORMANCE_AUTH)
def test_conformance_auth_scenario(scenario):
    if scenario == "auth/client-credentials-jwt":
        require_modules("jwt", "cryptography")
    bin_dir = ensure_npm_peers("conformance", "node")
    adapter = f"{sys.executable} {SUPPORT / 'conformance_auth_client.py'}"
    proc = subprocess.run(
        [str(bin_dir / "conformance"), "client", "--command", adapter, "--scenario", scenario,
         "--timeout", "150000"],  # three agentd commands in a row, on a busy machine
        capture_output=True, text=True, timeout=240, env=npm_env(), cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "OVERALL: PASSED" in out, out
    assert " 0 failed, 0 warnings" in out, out


# ------------------------------------------------------------------ helpers


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AGENTD_INTELLIGENCE", "AGENTD_MODEL", "AGENTD_STATE"))}
    env["BROWSER"] = BROWSER
    env["AGENTD_LOG_LEVEL"] = "debug"
    env.update(extra)
    return env


def _agentd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*AGENTD, *args], capture_output=True, text=True, timeout=120,
                          env=env or _env(), cwd=ROOT)


def _stats(peer: PythonPeer) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{peer.port}/test/stats", timeout=10) as r:
        return json.loads(r.read())


def _post(peer: PythonPeer, path: str) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{peer.port}{path}", method="POST")
    with urllib.request.urlopen(req, timeout=10):
        pass


def _playback(tmp: Path) -> Path:
    script = tmp / "playback.json"
    script.write_text(json.dumps({"playback": 1, "scripts": [{"name": "root", "turns": [
        {"tool_calls": [{"name": "sdk__echo", "arguments": {"text": "through oauth"}}]},
        {"expect": "through oauth", "content": "done"}]}]}))
    return script


def _run_args(tmp: Path, peer: PythonPeer, *extra: str) -> list[str]:
    return ["--mcp", f"sdk={peer.url}", "--state-dir", str(tmp / "state"),
            "--instruction", "echo through oauth", "--intelligence",
            f"playback:{_playback(tmp)}", "--spawn", "exec", "--ping-interval", "60", *extra]


def _login(tmp: Path, peer: PythonPeer, *extra: str) -> subprocess.CompletedProcess:
    return _agentd("auth", "login", "sdk", "--mcp", f"sdk={peer.url}", "--state-dir",
                   str(tmp / "state"), "--timeout", "30", *extra)


def _tokens(tmp: Path) -> list[TokenRecord]:
    return TokenStore(str(tmp / "state")).tokens()


@pytest.fixture
def sdk_oauth():
    require_modules("mcp", "uvicorn")
    peers: list[PythonPeer] = []

    def start(*args: str, port: int | None = None) -> PythonPeer:
        peer = PythonPeer("oauth_sdk_server.py", *args, port=port)
        peers.append(peer.start())  # type: ignore[arg-type]
        return peer

    yield start
    for peer in peers:
        peer.stop()


# ------------------------------------------------------------------ the SDK's OAuth


def test_login_status_refresh_logout(sdk_oauth, tmp_path):
    peer = sdk_oauth()
    login = _login(tmp_path, peer)
    assert login.returncode == 0, login.stderr
    assert "logged in to sdk" in login.stdout
    assert "/authorize?" in login.stderr  # the URL is printed for a person, too
    [rec] = _tokens(tmp_path)
    assert rec.issuer == f"http://127.0.0.1:{peer.port}"
    assert rec.resource == f"http://127.0.0.1:{peer.port}/mcp"
    assert rec.refresh_token and rec.access_token.startswith("at-")
    root = tmp_path / "state" / "oauth"
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    status = _agentd("auth", "status", "--mcp", f"sdk={peer.url}", "--state-dir",
                     str(tmp_path / "state"), "--json")
    assert status.returncode == 0, status.stderr
    row = json.loads(status.stdout)
    assert row["server"] == "sdk" and row["refresh_token"] is True
    # the access token is forgotten by the server: the run refreshes on the 401
    _post(peer, "/test/expire-access")
    run = _agentd(*_run_args(tmp_path, peer))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["result"] == "done"
    assert _stats(peer)["refresh"] == 1
    [new] = _tokens(tmp_path)
    assert new.access_token != rec.access_token and new.refresh_token != rec.refresh_token
    # no token ever reaches output or logs
    for text in (login.stdout, login.stderr, status.stdout, status.stderr, run.stdout,
                 run.stderr):
        for secret in (rec.access_token, rec.refresh_token, new.access_token,
                       new.refresh_token):
            assert secret not in text
    out = _agentd("auth", "logout", "sdk", "--mcp", f"sdk={peer.url}", "--state-dir",
                  str(tmp_path / "state"))
    assert out.returncode == 0 and "1 stored login(s) removed" in out.stdout
    assert _tokens(tmp_path) == []


def test_token_near_expiry_is_refreshed_before_use(sdk_oauth, tmp_path):
    """A stored access token about to expire is refreshed before it is sent again
    (the server never had to refuse it: it is still valid there)."""
    peer = sdk_oauth()
    assert _login(tmp_path, peer).returncode == 0
    store = TokenStore(str(tmp_path / "state"))
    [rec] = store.tokens()
    rec.expires_at = time.time() + 5  # inside the 60 s refresh margin
    store.save_token(rec)
    run = _agentd(*_run_args(tmp_path, peer))
    assert run.returncode == 0, run.stderr
    assert _stats(peer)["refresh"] == 1
    [new] = store.tokens()
    assert new.access_token != rec.access_token and not new.expires_within(60)


def test_run_without_login_names_the_login_command(sdk_oauth, tmp_path):
    peer = sdk_oauth()
    run = _agentd(*_run_args(tmp_path, peer))
    assert run.returncode == 6, run.stderr
    assert "run `agentd auth login sdk`" in json.loads(run.stdout)["result"]["error"]
    failed = [json.loads(line) for line in run.stderr.splitlines()
              if '"mcp.server.failed"' in line]
    assert failed and "agentd auth login sdk" in failed[0]["error"]
    assert _stats(peer)["authorize"] == 0  # nobody was sent to a browser


def test_auth_interactive_logs_in_during_the_run(sdk_oauth, tmp_path):
    peer = sdk_oauth()
    run = _agentd(*_run_args(tmp_path, peer, "--auth-interactive"))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["result"] == "done"
    assert _stats(peer)["token"] == 1
    assert len(_tokens(tmp_path)) == 1
    again = _agentd(*_run_args(tmp_path, peer))  # the stored login serves the next run
    assert again.returncode == 0, again.stderr
    assert _stats(peer)["authorize"] == 1


def test_expired_refresh_token_asks_for_a_new_login(sdk_oauth, tmp_path):
    peer = sdk_oauth()
    assert _login(tmp_path, peer).returncode == 0
    _post(peer, "/test/expire-refresh")  # access and refresh tokens both gone
    run = _agentd(*_run_args(tmp_path, peer))
    assert run.returncode == 6, run.stderr
    assert "stored login was refused" in run.stdout
    assert "agentd auth login sdk" in run.stdout
    assert _tokens(tmp_path) == []  # the dead login is removed, not retried forever


@pytest.mark.parametrize(("args", "message"), [
    (("--iss", "wrong"), "RFC 9207"),
    (("--iss", "omit", "--advertise-iss"), "carries no iss"),
])
def test_authorization_response_iss_is_checked(sdk_oauth, tmp_path, args, message):
    peer = sdk_oauth(*args)
    login = _login(tmp_path, peer)
    assert login.returncode == 1
    assert message in login.stderr
    assert _stats(peer)["token"] == 0  # the code was never redeemed
    assert _tokens(tmp_path) == []


def test_right_iss_advertised_is_accepted(sdk_oauth, tmp_path):
    peer = sdk_oauth("--iss", "right", "--advertise-iss")
    login = _login(tmp_path, peer)
    assert login.returncode == 0, login.stderr
    assert len(_tokens(tmp_path)) == 1


@pytest.mark.parametrize(("public", "message"), [
    ("http://localhost:{port}/mcp", "on another origin"),
    ("http://127.0.0.1:{port}/other", "not this server"),
])
def test_metadata_that_does_not_name_this_server_is_refused(sdk_oauth, tmp_path, public,
                                                            message):
    peer = sdk_oauth("--public-url", public)
    login = _login(tmp_path, peer)
    assert login.returncode == 1
    assert message in login.stderr and "refused" in login.stderr
    stats = _stats(peer)
    assert stats["register"] == 0 and stats["authorize"] == 0


def test_token_endpoint_answering_html(sdk_oauth, tmp_path):
    peer = sdk_oauth("--token-html")
    login = _login(tmp_path, peer)
    assert login.returncode == 1
    assert "token endpoint" in login.stderr and "text/html, not JSON" in login.stderr
    assert _tokens(tmp_path) == []


def test_pre_registration_is_bound_to_its_issuer(sdk_oauth, tmp_path):
    peer = sdk_oauth()
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'[[mcp_servers]]\nname = "sdk"\nurl = "{peer.url}"\n'
                   'auth = { type = "oauth", client_id = "ours", '
                   'client_secret = "{{secret:SDK_SECRET}}", '
                   'issuer = "https://auth.example.com" }\n')
    env = _env(AGENTD_SECRET_SDK_SECRET="s3cret-value")
    login = _agentd("auth", "login", "sdk", "--config", str(cfg), "--state-dir",
                    str(tmp_path / "state"), env=env)
    assert login.returncode == 1
    assert "configured issuer https://auth.example.com is not among" in login.stderr
    assert _stats(peer) == {"authorize": 0, "token": 0, "refresh": 0, "register": 0}
    assert "s3cret-value" not in login.stderr + login.stdout


def test_a_login_from_another_issuer_is_not_refreshed_there(sdk_oauth, tmp_path):
    """A stored login whose issuer is no longer the server's: its refresh token is
    never sent anywhere; the run asks for a new login."""
    peer = sdk_oauth()
    store = TokenStore(str(tmp_path / "state"))
    store.save_token(TokenRecord(
        issuer="http://127.0.0.1:9/old-as", resource=canonical_resource(peer.url),
        server=canonical_resource(peer.url), access_token="at-stale-token",
        refresh_token="rt-of-the-old-as", client_id="old"))
    run = _agentd(*_run_args(tmp_path, peer))
    assert run.returncode == 6, run.stderr
    assert '"oauth.issuer.changed"' in run.stderr
    assert "agentd auth login sdk" in run.stdout
    assert _stats(peer)["refresh"] == 0
    assert "rt-of-the-old-as" not in run.stderr


def test_a_changed_authorization_server_forces_re_registration(sdk_oauth, tmp_path):
    """The server now names another authorization server: the old login is not
    used there and the client registers anew with the new issuer."""
    first = sdk_oauth()
    assert _login(tmp_path, first).returncode == 0
    first.stop()
    moved = sdk_oauth("--issuer-path", "/v2", port=first.port)
    run = _agentd(*_run_args(tmp_path, moved, "--auth-interactive"))
    assert run.returncode == 0, run.stderr
    assert '"oauth.issuer.changed"' in run.stderr
    assert _stats(moved)["register"] == 1
    clients = {c.issuer: c.client_id for c in TokenStore(str(tmp_path / "state")).clients()}
    old_issuer = f"http://127.0.0.1:{first.port}"
    assert set(clients) == {old_issuer, old_issuer + "/v2"}
    assert clients[old_issuer] != clients[old_issuer + "/v2"]
    assert {t.issuer for t in _tokens(tmp_path)} == {old_issuer, old_issuer + "/v2"}


# ------------------------------------------------------------------ config contract


@pytest.mark.parametrize(("auth", "message"), [
    ('{ type = "oauth", client_id = "a", client_secret = "literal" }',
     "must be a {{secret:NAME}} reference"),
    ('{ type = "oauth", scope = "x" }', "unknown field `scope`"),
    ('{ type = "oauth", client_id_metadata_url = "http://example.com/c.json" }',
     "https:// URL with a path"),
    ('{ type = "client_credentials", client_id = "a" }', "exactly one of client_secret"),
    ('{ type = "client_credentials", client_id = "a", private_key_file = "/nonexistent" }',
     "not readable"),
    ('{ type = "bearer" }', "auth"),
])
def test_bad_auth_config_is_exit_2(tmp_path, auth, message):
    cfg = tmp_path / "agentd.toml"
    cfg.write_text('[[mcp_servers]]\nname = "s"\nurl = "https://mcp.example.com/mcp"\n'
                   f"auth = {auth}\n")
    proc = _agentd("--config", str(cfg), "--instruction", "x", "--intelligence",
                   "playback:/nonexistent")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ sans-IO parts


def test_www_authenticate_parsing():
    c = parse_challenge('Basic realm="x", Bearer error="insufficient_scope", '
                        'scope="a  b", resource_metadata="https://h/.well-known/x", '
                        'error_description="needs \\"b\\", really"')
    assert c is not None and c.insufficient_scope and c.scope == "a b"
    assert c.resource_metadata == "https://h/.well-known/x"
    assert c.params["error_description"] == 'needs "b", really'
    assert parse_challenge("Basic realm=x") is None
    assert parse_challenge(["Negotiate abc", "Bearer"]).params == {}


def test_resource_matching():
    assert resource_matches("https://h.example/mcp", "https://H.example:443/mcp")
    assert resource_matches("https://h.example", "https://h.example/mcp")
    assert not resource_matches("https://h.example/mc", "https://h.example/mcp")
    assert not resource_matches("https://evil.example/mcp", "https://h.example/mcp")
    assert not resource_matches("http://h.example/mcp", "https://h.example/mcp")
    assert canonical_resource("HTTPS://H.Example:443/mcp/") == "https://h.example/mcp"
