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
import ssl
import urllib.error
import urllib.request

import peers
import pytest
from agentd_proc import Agentd
from composition import ASYNC_MARK, SYNC_MARK, Certs, run_composition, scripts, worker_argv


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
