"""Composition (spec §3) as the tests run it: a worker agentd serving its
self-MCP over HTTPS (bearer, or mTLS with a test CA), and a parent agentd that
declares it as an ordinary MCP server, drives it and subscribes to it, all with
playback intelligence. `run_composition` runs one and checks the invariants
every variant shares (the worker stays up, no secret in any log or result).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import peers
from agentd_proc import Agentd

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
