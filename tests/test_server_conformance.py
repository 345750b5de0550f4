"""`@modelcontextprotocol/conformance` server scenarios against agentd's self-MCP.

The server is `tests/conformance_server.py` (the self-MCP on loopback http with
the `Unavailable` backend) in a subprocess; the CLI needs Node >= 22, which the
npm package `node` in tests/peers provides (put first on PATH).  Every check of
every scenario must be SUCCESS or INFO: no failure and no warning.

The other listed scenarios exercise features the self-MCP does not offer by
design (prompts, logging, completions, sampling, elicitation, the suite's
`test_*` fixture tools and resources); docs/server.md says why, one by one.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from peers import ensure_npm_peers, npm_env, python_peer

SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "resources-subscribe",
    "resources-unsubscribe",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
]


@pytest.fixture(scope="module")
def launcher():
    ensure_npm_peers("conformance", "node")
    with python_peer("conformance_server.py") as peer:
        yield peer


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance_scenario(launcher, scenario, tmp_path: Path):
    proc = subprocess.run(
        ["conformance", "server", "--url", launcher.url, "--scenario", scenario,
         "-o", str(tmp_path)], env=npm_env(), capture_output=True, text=True, timeout=120)
    text = proc.stdout + proc.stderr
    files = list(tmp_path.glob("*/checks.json"))
    assert files, text
    checks = json.loads(files[0].read_text())
    bad = [c for c in checks if c["status"] not in ("SUCCESS", "INFO")]
    assert not bad, json.dumps(bad, indent=1)
    assert any(c["status"] == "SUCCESS" for c in checks), text
    assert "0 failed, 0 warnings" in text, text
