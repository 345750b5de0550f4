"""benchmarks/fast_agent_batch.py: where fast-agent cannot be had, the benchmark's
column says why instead of crashing (the version probe runs a real child process)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fast_agent_batch


def test_an_interpreter_too_old_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    old = tmp_path / "python3.11"  # a stand-in that reports itself as 3.11, as a real one would
    old.write_text("#!/bin/sh\necho 3 11\n")
    old.chmod(0o755)
    with pytest.raises(fast_agent_batch.Unavailable, match=r"is not a Python >= 3\.12"):
        fast_agent_batch.find_python(str(old))


def test_a_missing_interpreter_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(fast_agent_batch.Unavailable, match="is not a Python"):
        fast_agent_batch.find_python(str(tmp_path / "no-python"))


def test_the_project_points_fast_agent_at_the_bench_gateway_and_server(tmp_path: Path) -> None:
    home, card, program = fast_agent_batch.write_project(
        tmp_path, "http://127.0.0.1:1/v1", "http://127.0.0.1:2/mcp")

    config = json.loads((home / "fast-agent.yaml").read_text())
    assert config["generic"]["base_url"] == "http://127.0.0.1:1/v1"
    assert config["mcp"]["servers"]["sdk"] == {"transport": "http",
                                               "url": "http://127.0.0.1:2/mcp"}
    assert json.loads(card.read_text())["servers"] == ["sdk"]
    assert "BatchRunner" in program.read_text()
