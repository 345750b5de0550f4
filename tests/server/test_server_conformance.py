"""`@modelcontextprotocol/conformance` server scenarios against agentd's self-MCP.

The server is `tests/support/conformance_server.py` (the self-MCP on loopback http with
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

from pathlib import Path

import pytest
from conformance_runs import SCENARIOS, run_scenario
from peers import ensure_npm_peers, python_peer

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
