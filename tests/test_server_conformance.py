"""`@modelcontextprotocol/conformance` server scenarios against agentd's self-MCP.

The server is `tests/conformance_server.py` (the self-MCP on loopback http with
the `Unavailable` backend) in a subprocess; the CLI needs Node >= 22, which the
npm package `node` in tests/peers provides (put first on PATH).  Every check of
every scenario must be SUCCESS or INFO: no failure and no warning.

The two subscribe scenarios subscribe to the suite's fixture URI
``test://watched-resource``, which the self-MCP refuses (-32602: nothing would
ever fire for it, docs/server.md); they run against the generic engine (the
same script, ``engine``: a bare ``Handler`` that tracks any URI).

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
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
]
ENGINE_SCENARIOS = ["resources-subscribe", "resources-unsubscribe"]


@pytest.fixture(scope="module")
def launcher():
    ensure_npm_peers("conformance", "node")
    with python_peer("conformance_server.py") as peer:
        yield peer


@pytest.fixture(scope="module")
def engine():
    ensure_npm_peers("conformance", "node")
    with python_peer("conformance_server.py", "engine") as peer:
        yield peer


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance_scenario(launcher, scenario, tmp_path: Path):
    run_scenario(launcher.url, scenario, tmp_path)


@pytest.mark.parametrize("scenario", ENGINE_SCENARIOS)
def test_conformance_engine_scenario(engine, scenario, tmp_path: Path):
    run_scenario(engine.url, scenario, tmp_path)


def run_scenario(url: str, scenario: str, tmp_path: Path, *, conformance: str = "conformance",
                 spec_version: str | None = None,
                 not_testable: dict[str, str] | None = None) -> None:
    """Run one scenario; every check is SUCCESS or INFO, except the checks in
    ``not_testable`` (check id -> the start of the suite's own message), which
    must come out FAILURE or SKIPPED with exactly that message: they need the
    suite's fixture tools or a feature the self-MCP does not offer
    (docs/server.md), never anything else.  ``conformance`` is the executable
    (the 2026-07-28 pre-release lives in tests/peers_2026), ``spec_version``
    the suite's ``--spec-version``."""
    not_testable = not_testable or {}
    version = ["--spec-version", spec_version] if spec_version else []
    proc = subprocess.run(
        [conformance, "server", "--url", url, "--scenario", scenario, *version,
         "-o", str(tmp_path)], env=npm_env(), capture_output=True, text=True, timeout=120)
    text = proc.stdout + proc.stderr
    files = list(tmp_path.glob("*/checks.json"))
    assert files, text
    checks = json.loads(files[0].read_text())
    bad = [c for c in checks if c["status"] not in ("SUCCESS", "INFO")
           and not (c["id"] in not_testable
                    and str(c.get("errorMessage") or c.get("description")).startswith(
                        not_testable[c["id"]]))]
    assert not bad, json.dumps(bad, indent=1)
    missed = set(not_testable) - {c["id"] for c in checks if c["status"] not in ("SUCCESS",
                                                                              "INFO")}
    assert not missed, f"now testable, drop from not_testable: {sorted(missed)}"
    assert any(c["status"] == "SUCCESS" for c in checks), text
    failed = sum(c["status"] == "FAILURE" for c in checks)
    assert f"{failed} failed, 0 warnings" in text, text
