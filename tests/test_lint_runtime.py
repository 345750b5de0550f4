"""Project hygiene that CI enforces: ruff is clean; processes run on uvloop."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_ruff_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_runtime_runs_on_uvloop():
    import asyncio

    import uvloop

    from agentd import runtime

    async def loop_type():
        return type(asyncio.get_running_loop())

    assert runtime.run(loop_type()) is uvloop.Loop
