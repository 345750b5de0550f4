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

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from peer_venv import PeerVenv
from peers import ROOT, SUPPORT

PIN = "inspect-ai==0.3.285"
PROBE = "import inspect_ai, openai, agentd; from inspect_ai.agent import BridgedToolsSpec"


# the editable agentd runs inside the `local` sandbox: its pure-Python twins suffice
INSPECT = PeerVenv("inspect", (PIN, "openai", "-e", str(ROOT)), PROBE,
                   "inspect_ai's sandbox agent bridge", env={"AGENTD_NO_NATIVE": "1"})


@pytest.fixture(scope="session")
def inspect_eval() -> Callable[[str, Path], dict[str, dict[str, Any]]]:
    """`run(task_file, log_dir)`: inspect's eval logs of every task in the file, by task name."""
    INSPECT.ensure()

    def run(task_file: str, log_dir: Path) -> dict[str, dict[str, Any]]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [str(INSPECT.path / "bin" / "inspect"), "eval", task_file, "--model", "mockllm/model",
             "--max-samples", "1", "--log-dir", str(log_dir), "--log-format", "json",
             "--display", "none"],
            cwd=SUPPORT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"inspect eval failed: {done.stderr[-3000:]}"
        logs = [json.loads(p.read_text()) for p in sorted(log_dir.glob("*.json"))]
        return {log["eval"]["task"]: log for log in logs}

    return run
