"""inspect_ai as a peer: its `sandbox_agent_bridge` and the MCP server it bridges host tools through.

inspect_ai is heavy and not a dependency of agentd, so it lives in a venv of
its own under `tests/.venvs/inspect` (gitignored), created once by the session
fixture `inspect_eval` (`python -m venv`, then `pip install inspect-ai==<PIN>
openai -e <this repo>`; `openai` is what the bridge needs, and the editable
agentd is what runs inside the `local` sandbox; built with AGENTD_NO_NATIVE=1,
the pure-Python twins being enough there) and reused while it imports. The
version is pinned: `BridgedToolsSpec` and the bridge's proposal check are
recent and change between releases. Without the venv the tests skip with the
reason; under CI=true they fail (tests/support/peers.py `unavailable`).

`inspect_eval(task_file, log_dir)` runs `inspect eval` of a task file of
tests/support (tests/support/inspect_task.py) with `mockllm/model`, one sample
at a time (the `local` sandbox shares `/var/tmp`, where inspect injects its
tools: docs/batch.md), and returns inspect's JSON eval logs by task name.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from peers import ROOT, SUPPORT, unavailable

VENV = ROOT / "tests" / ".venvs" / "inspect"
PIN = "inspect-ai==0.3.285"
PROBE = "import inspect_ai, openai, agentd; from inspect_ai.agent import BridgedToolsSpec"


def _ready() -> bool:
    py = VENV / "bin" / "python"
    return py.exists() and subprocess.run(
        [str(py), "-c", PROBE], capture_output=True, timeout=300).returncode == 0


def _build() -> str | None:
    """Create the venv; None when it worked, else why not."""
    shutil.rmtree(VENV, ignore_errors=True)
    env = {**os.environ, "AGENTD_NO_NATIVE": "1"}
    steps = ([sys.executable, "-m", "venv", str(VENV)],
             [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", PIN, "openai",
              "-e", str(ROOT)])
    for argv in steps:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
        if done.returncode != 0:
            return f"{' '.join(argv[:5])} failed: {done.stderr[-500:]}"
    return None


@pytest.fixture(scope="session")
def inspect_eval() -> Callable[[str, Path], dict[str, dict[str, Any]]]:
    """`run(task_file, log_dir)`: inspect's eval logs of every task in the file, by task name."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / ".inspect.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _ready():
            why = _build()
            if why is not None or not _ready():
                unavailable(f"inspect_ai's sandbox agent bridge: {why or 'inspect_ai does not import'}")

    def run(task_file: str, log_dir: Path) -> dict[str, dict[str, Any]]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [str(VENV / "bin" / "inspect"), "eval", task_file, "--model", "mockllm/model",
             "--max-samples", "1", "--log-dir", str(log_dir), "--log-format", "json",
             "--display", "none"],
            cwd=SUPPORT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"inspect eval failed: {done.stderr[-3000:]}"
        logs = [json.loads(p.read_text()) for p in sorted(log_dir.glob("*.json"))]
        return {log["eval"]["task"]: log for log in logs}

    return run
