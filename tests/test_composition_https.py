"""Composition (spec §3): a parent agentd drives and subscribes to a worker agentd
over the worker's self-MCP, across HTTPS — bearer, and mTLS — with playback
intelligence in every process (parent, worker, the worker's subagents).

The worker is the spec's example: `--mode reactive --subscribe file:///nowhere`,
no `--mcp`, serving its self-MCP. The parent declares it in a config file as an
ordinary MCP server (`reviewer`), the bearer header as `{{secret:REVIEWER_TOKEN}}`
(resolved from env at connect time) and the test CA as `ca_file`:

* drive — `reviewer__subagent_spawn` (sync) returns the worker's distillate;
* subscribe — `reviewer__subagent_spawn {async}` returns `served.N`, then
  `agentd__await_resource agent://subagent/served.N` sends `resources/subscribe`
  to the worker, is woken by its `notifications/resources/updated` and reads the
  distillate fresh.

The parent's result (its final answer, parsed as JSON by the output contract)
carries both distillates; its playback `expect`s prove it was shown them.
Nothing in the parent knows the server is an agent.
"""

from __future__ import annotations

import json
import signal
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import peers
import pytest
from test_reactive_cli import Agentd

TOKEN = "tok-3f9c2a7e51b84d06"
SYNC_MARK = "LGTM-SYNC-7731"
ASYNC_MARK = "LGTM-ASYNC-4242"


def scripts(*, subscribe: bool = True) -> dict:
    parent_turns = [
        {"tool_calls": [{"name": "reviewer__subagent_spawn",
                         "arguments": {"instruction": "[review-sync] review a.py",
                                       "output_contract": "JSON {verdict}"}}]},
    ]
    if subscribe:
        parent_turns += [
            {"expect": SYNC_MARK,
             "tool_calls": [{"name": "reviewer__subagent_spawn",
                             "arguments": {"instruction": "[review-async] review b.py",
                                           "output_contract": "JSON {verdict}",
                                           "async": True}}]},
            {"expect": "served.2",
             "tool_calls": [{"name": "agentd__await_resource",
                             "arguments": {"uri": "agent://subagent/served.2",
                                           "timeout": 120}}]},
            {"expect": [ASYNC_MARK, "updated"],
             "content": json.dumps({"sync": SYNC_MARK, "async": ASYNC_MARK})},
        ]
    else:
        parent_turns += [{"expect": SYNC_MARK,
                          "content": json.dumps({"sync": SYNC_MARK})}]
    return {"playback": 1, "scripts": [
        {"name": "review-sync", "match": "[review-sync]",
         "turns": [{"content": json.dumps({"verdict": SYNC_MARK})}]},
        # long enough that the parent subscribes while it is still running
        {"name": "review-async", "match": "[review-async]",
         "turns": [{"delay": 1.0, "content": json.dumps({"verdict": ASYNC_MARK})}]},
        {"name": "worker", "match": "code-review worker", "turns": [{"content": "idle"}]},
        {"name": "parent", "match": "[parent]", "turns": parent_turns},
    ]}


class Certs:
    """A test CA (trustme), a server cert for the worker's address, a client cert."""

    def __init__(self, tmp: Path, host: str = "127.0.0.1") -> None:
        trustme = peers.import_peer("trustme")
        ca = trustme.CA()
        server = ca.issue_cert(host)
        client = ca.issue_cert("parent.agentd.test")
        self.ca = tmp / "ca.pem"
        self.cert = tmp / "server.pem"
        self.key = tmp / "server.key"
        self.client_cert = tmp / "client.pem"
        self.client_key = tmp / "client.key"
        ca.cert_pem.write_to_path(str(self.ca))
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        server.private_key_pem.write_to_path(str(self.key))
        client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))


def worker_argv(agentd_bin: str, book: Path, url: str, certs: Certs, *,
                mtls: bool) -> list[str]:
    argv = [agentd_bin, "--instruction", "Be a reusable code-review worker",
            "--intelligence", f"playback:{book}",
            "--mode", "reactive", "--subscribe", "file:///nowhere",
            "--serve-mcp", url, "--serve-cert", str(certs.cert), "--serve-key", str(certs.key)]
    if mtls:
        argv += ["--serve-client-ca", str(certs.ca)]
    else:
        argv += ["--serve-bearer", TOKEN]
    return argv


def parent_config(tmp: Path, url: str, certs: Certs, *, mtls: bool) -> Path:
    lines = ["[[mcp_servers]]", 'name = "reviewer"', f'url = "{url}"',
             f'ca_file = "{certs.ca}"']
    if mtls:
        lines += [f'client_cert = "{certs.client_cert}"', f'client_key = "{certs.client_key}"']
    else:
        lines += ['headers = { Authorization = "Bearer {{secret:REVIEWER_TOKEN}}" }']
    path = tmp / "parent.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_composition(agentd_bin: str, tmp: Path, *, mtls: bool, subscribe: bool,
                    host: str = "127.0.0.1", worker_prefix: list[str] | None = None,
                    parent_prefix: list[str] | None = None, port: int | None = None) -> dict:
    certs = Certs(tmp, host)
    book = tmp / "playback.json"
    book.write_text(json.dumps(scripts(subscribe=subscribe)))
    port = port or peers.free_port()
    serve_url = f"https://{host}:{port}"
    worker = Agentd(worker_argv(agentd_bin, book, serve_url, certs, mtls=mtls), tmp, "worker",
                    prefix=worker_prefix)
    try:
        worker.wait_event("reactive.ready")
        parent = Agentd([agentd_bin, "--instruction", "[parent] orchestrate the nightly review",
                         "--intelligence", f"playback:{book}",
                         "--output-contract", "JSON {sync, async}",
                         "--config", str(parent_config(tmp, f"{serve_url}/mcp", certs,
                                                       mtls=mtls)),
                         "--ping-interval", "60"],
                        tmp, "parent", env={"AGENTD_SECRET_REVIEWER_TOKEN": TOKEN},
                        prefix=parent_prefix)
        code = parent.proc.wait(timeout=180)
        assert code == 0, "\n".join(parent.err.read_text().splitlines()[-40:])
        result = parent.result()
        assert worker.proc.poll() is None  # the worker stays up, serving
    finally:
        wcode = worker.stop(signal.SIGTERM)
    assert wcode == 130
    assert worker.result()["status"] == "interrupted"
    # secrets never reach a log line or the result
    for f in (parent.err, parent.out, worker.err, worker.out):
        assert TOKEN not in f.read_text()
    handshake = parent.events("mcp.handshake")
    assert handshake and handshake[0]["server"] == "reviewer"
    if handshake[0]["protocol_version"] == "2026-07-28":  # server/discover (no subscribe:
        assert set(handshake[0]["capabilities"]) == {"tools", "resources"}  # listen is core)
    else:
        assert handshake[0]["capabilities"] == {"tools": {}, "resources": {"subscribe": True}}
    return {"result": result, "parent": parent, "worker": worker}


@pytest.mark.parametrize("subscribe", [False, True], ids=["drive", "drive+subscribe"])
def test_parent_drives_and_subscribes_worker_over_https_bearer(agentd_bin, tmp_path,
                                                               subscribe) -> None:
    out = run_composition(agentd_bin, tmp_path, mtls=False, subscribe=subscribe)
    res = out["result"]
    assert res["status"] == "completed"
    assert res["result"]["sync"] == SYNC_MARK
    if subscribe:
        assert res["result"]["async"] == ASYNC_MARK
        parent = out["parent"]
        awaited = parent.events("reactive.await")
        assert [(e["uri"], e["updated"]) for e in awaited] == \
            [("agent://subagent/served.2", True)]
        worker = out["worker"]
        term = worker.events("selfmcp.terminal")
        assert any(e["handle"] == "served.2" and e["notified"] == 1 for e in term)


def test_mtls_worker_refuses_a_client_without_certificate(agentd_bin, tmp_path) -> None:
    certs = Certs(tmp_path)
    book = tmp_path / "playback.json"
    book.write_text(json.dumps(scripts()))
    port = peers.free_port()
    worker = Agentd(worker_argv(agentd_bin, book, f"https://127.0.0.1:{port}", certs,
                                mtls=True), tmp_path, "worker")
    try:
        worker.wait_event("reactive.ready")
        ctx = ssl.create_default_context(cafile=str(certs.ca))
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        req = urllib.request.Request(f"https://127.0.0.1:{port}/mcp", data=body,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream"})
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(req, context=ctx, timeout=30).read()
        # with the client certificate the TLS handshake and the request go through
        ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"}}}).encode()
        req = urllib.request.Request(f"https://127.0.0.1:{port}/mcp", data=init,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream"})
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            assert r.status == 200
            assert b'"subscribe":true' in r.read().replace(b" ", b"")
    finally:
        assert worker.stop() == 130


@pytest.mark.parametrize("subscribe", [True], ids=["drive+subscribe"])
def test_parent_drives_and_subscribes_worker_over_mtls(agentd_bin, tmp_path,
                                                       subscribe) -> None:
    out = run_composition(agentd_bin, tmp_path, mtls=True, subscribe=subscribe)
    res = out["result"]
    assert res["status"] == "completed"
    assert res["result"] == {"sync": SYNC_MARK, "async": ASYNC_MARK}
