"""The type checker is part of the suite: `python -m mypy` is clean on `agentd/`
and `agentd_native/`.

It runs from the repository root with the `[tool.mypy]` section of
pyproject.toml (which names the files), in a subprocess, as a developer would
run it. mypy is in the `test` extra; without it the test skips, and fails
under CI=true. The incremental cache (`.mypy_cache/`) keeps a re-run short.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from peers import require_modules

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)  # a cold cache on a busy machine; warm runs take seconds
def test_mypy_is_clean() -> None:
    require_modules("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    report, code = (proc.stdout + proc.stderr).strip(), proc.returncode
    assert code == 0, f"mypy found type errors:\n{report}"
    assert "Success" in report, report
