"""Running `@modelcontextprotocol/conformance` server scenarios against a URL and
judging their checks; the scenarios the self-MCP passes as they are.

Used by the server conformance tests and by the pool's (a pool worker is judged
as a self-MCP).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from peers import npm_env

SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
]


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
