"""Project hygiene that CI enforces: ruff is clean; processes run on uvloop, and
how `agentd.runtime` sets up a process (each case in a fresh interpreter, since
it changes process-wide state)."""

from __future__ import annotations

import subprocess
import sys

from peers import ROOT


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


def _fresh(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_run_settles_the_gc():
    out = _fresh(
        "import gc\n"
        "from agentd import runtime\n"
        "async def main():\n"
        "    return gc.get_threshold()[0], gc.get_freeze_count() > 0\n"
        "print(gc.get_threshold()[0], runtime.run(main()))\n")
    assert out == "700 (10000, True)"


def test_run_to_exit_is_a_bare_uvloop_without_a_sigint_handler():
    out = _fresh(
        "import asyncio, os, signal, sys\n"
        "from agentd import runtime\n"
        "async def main():\n"
        "    print(type(asyncio.get_running_loop()).__module__,\n"
        "          signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)\n"
        "    os._exit(0)\n"
        "runtime.run_to_exit(main())\n")
    assert out == "uvloop True"
