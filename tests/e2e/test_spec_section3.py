"""Spec §3's two command lines, run as printed (the real console script).

The worker line names no certificate: `--serve-cert`/`--serve-key` default to
`/etc/agentd/tls/server.crt`/`server.key` (spec §2). The test runs it in a
network namespace made here, which is also a throw-away root for those paths:
`ip netns exec` bind-mounts `/etc/netns/<ns>/agentd` over `/etc/agentd` and
`/etc/netns/<ns>/hosts` over `/etc/hosts` in its own mount namespace, so the
test CA's server certificate sits exactly where the defaults point while the
machine's `/etc` is untouched (an empty `/etc/agentd` mount point is made only
if there is none, and removed after). `0.0.0.0:8443` there clashes with nothing.

The parent line names the worker by host and port alone (no `/mcp`): the
self-MCP answers at `/`. Its bearer comes from the config file's entry for
`reviewer` (spec §1.2: headers are declared in the config file; a `--mcp` flag
naming a file's server sets its endpoint), the CA from `SSL_CERT_FILE`.
`https://gw.example/v1` is a test-owned OpenAI-compatible gateway
(tests/support/tls_gateway.py) in the same namespace, `gw.example` pointed at it by the
namespace's hosts file. The parent drives the worker (`subagent.spawn`), the
worker's subagent answers, and the parent completes with the worker's mark.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import peers
import pytest
from agentd_proc import Agentd

TOKEN = "rev-tok-6a0e2d91c4"
# The lines name no model: an http(s) gateway needs one (docs/cli.md), which the
# operator's environment gives, as a deployment would.
MODEL_ENV = {"AGENTD_MODEL": "review-model"}
WORKER = ('agentd --instruction "Be a reusable code-review worker" '
          '--intelligence https://gw.example/v1 '
          '--mode reactive --subscribe file:///nowhere '
          '--serve-mcp https://0.0.0.0:8443 --serve-bearer "$REVIEWER_TOKEN"')
PARENT = ('agentd --instruction "Orchestrate the nightly review across the repo" '
          '--intelligence https://gw.example/v1 '
          '--mcp reviewer=https://reviewer.internal:8443')


def test_worker_line_without_certificates_names_the_missing_file(agentd_bin, tmp_path):
    env = {**os.environ, "REVIEWER_TOKEN": TOKEN, "AGENTD_TLS_DIR": str(tmp_path / "none"),
           "PATH": f"{Path(agentd_bin).parent}:{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["sh", "-c", WORKER], capture_output=True, text=True, timeout=60,
                          env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentd: error: ")
    assert str(tmp_path / "none" / "server.crt") in lines[0] and "--serve-cert" in lines[0]


@pytest.fixture
def netns():
    if shutil.which("ip") is None or os.geteuid() != 0:
        peers.unavailable("needs root and iproute2 for a network namespace")
    name = f"agentd-s3-{secrets.token_hex(3)}"
    made_mountpoint = False
    made_netns_dir = not Path("/etc/netns").exists()
    etc = Path("/etc/netns") / name
    try:
        subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, timeout=30)
        if not Path("/etc/agentd").exists():
            Path("/etc/agentd").mkdir()
            made_mountpoint = True
        (etc / "agentd" / "tls").mkdir(parents=True)
        yield name, etc
    finally:
        subprocess.run(["ip", "netns", "del", name], timeout=30)
        shutil.rmtree(etc, ignore_errors=True)
        if made_mountpoint:
            Path("/etc/agentd").rmdir()
        if made_netns_dir and Path("/etc/netns").exists() and not any(Path("/etc/netns").iterdir()):
            Path("/etc/netns").rmdir()


def test_section3_lines_as_printed(agentd_bin, tmp_path, netns):
    trustme = peers.import_peer("trustme")
    name, etc = netns
    ca = trustme.CA()
    cert = ca.issue_cert("reviewer.internal", "gw.example", "127.0.0.1")
    tls = etc / "agentd" / "tls"
    cert.cert_chain_pems[0].write_to_path(str(tls / "server.crt"))
    cert.private_key_pem.write_to_path(str(tls / "server.key"))
    (etc / "hosts").write_text("127.0.0.1 localhost reviewer.internal gw.example\n")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    gw_log = tmp_path / "gateway.jsonl"
    parent_cfg = tmp_path / "parent.toml"
    parent_cfg.write_text('[[mcp_servers]]\nname = "reviewer"\n'
                          'url = "https://reviewer.internal:8443"\n'
                          'headers = { Authorization = "Bearer {{secret:REVIEWER_TOKEN}}" }\n')
    path = f"{Path(agentd_bin).parent}:{os.environ.get('PATH', '')}"
    prefix = ["ip", "netns", "exec", name]
    gateway = subprocess.Popen(
        [*prefix, sys.executable, str(peers.SUPPORT / "tls_gateway.py"), "0.0.0.0",
         "443", str(tls / "server.crt"), str(tls / "server.key"), str(gw_log)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    worker = None
    try:
        assert gateway.stdout is not None and gateway.stdout.readline().startswith("listening")
        # the worker line exactly as printed (`exec`: the shell becomes agentd)
        worker = Agentd([*prefix, "sh", "-c", "exec " + WORKER], tmp_path, "worker",
                        env={"REVIEWER_TOKEN": TOKEN, "PATH": path,
                             "SSL_CERT_FILE": str(ca_file), **MODEL_ENV})
        listening = worker.wait_event("mcp.serve.listening")[0]
        assert listening["url"].startswith("https://0.0.0.0:8443")
        # the parent line exactly as printed; its bearer for `reviewer` from the file
        parent = subprocess.run(
            [*prefix, "sh", "-c", PARENT + f" --config {parent_cfg}"],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "PATH": path, "SSL_CERT_FILE": str(ca_file),
                 "AGENTD_SECRET_REVIEWER_TOKEN": TOKEN, **MODEL_ENV})
    finally:
        code = worker.stop() if worker is not None else None
        gateway.terminate()
        gateway.wait(timeout=30)
    assert parent.returncode == 0, parent.stderr[-3000:]
    out = json.loads(parent.stdout)
    assert out["status"] == "completed" and out["result"] == "review collected: LGTM-S3-4471"
    events = [json.loads(ln) for ln in parent.stderr.splitlines() if ln.startswith("{")]
    handshake = [e for e in events if e["event"] == "mcp.handshake"]
    assert handshake[0]["server"] == "reviewer"
    assert handshake[0]["server_info"]["name"] == "agentd"
    # the gateway saw the parent offered the worker's tools, and the worker's subagent
    seen = [json.loads(ln) for ln in gw_log.read_text().splitlines()]
    assert "reviewer__subagent_spawn" in seen[0]["tools"]
    assert any(r["answer"].get("content") == "LGTM-S3-4471" for r in seen)
    assert code == 130
    assert TOKEN not in worker.err.read_text() + parent.stderr + parent.stdout
