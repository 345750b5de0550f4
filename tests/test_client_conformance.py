"""The official MCP conformance suite's client scenarios, through tests/conformance_client.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from peers import ROOT, ensure_npm_peers, npm_env


@pytest.mark.parametrize("scenario", ["initialize", "tools_call", "sse-retry"])
def test_conformance_client_scenario(scenario):
    bin_dir = ensure_npm_peers("conformance", "node")
    adapter = f"{sys.executable} {ROOT / 'tests' / 'conformance_client.py'}"
    proc = subprocess.run(
        [str(bin_dir / "conformance"), "client", "--command", adapter, "--scenario", scenario],
        capture_output=True, text=True, timeout=120, env=npm_env(), cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "OVERALL: PASSED" in out, out
    assert " 0 failed, 0 warnings" in out, out
