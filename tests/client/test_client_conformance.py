"""The official MCP conformance suite's client scenarios, through tests/support/conformance_client.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from peers import ROOT, SUPPORT, ensure_conformance_2026, ensure_npm_peers, npm_env


@pytest.mark.parametrize("scenario", ["initialize", "tools_call", "sse-retry"])
def test_conformance_client_scenario(scenario):
    bin_dir = ensure_npm_peers("conformance", "node")
    adapter = f"{sys.executable} {SUPPORT / 'conformance_client.py'}"
    proc = subprocess.run(
        [str(bin_dir / "conformance"), "client", "--command", adapter, "--scenario", scenario],
        capture_output=True, text=True, timeout=120, env=npm_env(), cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "OVERALL: PASSED" in out, out
    assert " 0 failed, 0 warnings" in out, out


def test_conformance_request_metadata_retries_with_a_supported_version():
    """2026-07-28 (SEP-2575): the mock refuses the first request with -32022 and
    ``data.supported: ["2026-07-28"]``; agentd asks again at that version (never
    falls back to ``initialize``), and every POST carries the revision's ``_meta``
    and a matching ``MCP-Protocol-Version``."""
    conformance = ensure_conformance_2026()
    adapter = f"{sys.executable} {SUPPORT / 'conformance_client.py'}"
    proc = subprocess.run(
        [str(conformance), "client", "--command", adapter, "--scenario", "request-metadata"],
        capture_output=True, text=True, timeout=120, env=npm_env(), cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "OVERALL: PASSED" in out, out
    assert " 0 failed, 0 warnings" in out, out
    assert "sep-2575-client-retry-supported-version" in out and "FAILURE" not in out, out
