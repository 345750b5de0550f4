"""The playback script and readings shared by the trajectory tests: a run that
calls a tool of the official SDK server, spawns a subagent that calls one too,
and echoes a secret of the server's header (which no trajectory may hold)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentd_proc import agentd_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SECRET = "tr4j-s3cret-0815"
USAGE = {"prompt_tokens": 11, "completion_tokens": 4}


def env() -> dict[str, str]:
    return agentd_env(PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def script(path: Path) -> Path:
    """Each sample echoes the secret, spawns a child that echoes too, then answers."""
    path.write_text(json.dumps({"playback": 1, "scripts": [
        {"name": "child", "match": "[child]", "usage": USAGE, "turns": [
            {"tool_calls": [{"name": "sdk__echo", "arguments": {"text": "from the child"}}]},
            {"expect": "from the child", "content": "child done"}]},
        {"name": "sample", "match": "sample", "usage": USAGE, "turns": [
            {"content": "two at once", "tool_calls": [
                {"name": "sdk__echo", "arguments": {"text": f"key {SECRET}"}, "id": "e1"},
                {"name": "agentd__subagent_spawn", "id": "s1",
                 "arguments": {"instruction": "[child] echo something"}}]},
            {"expect": "child done", "content": f"done, the key was {SECRET}",
             "usage": {"prompt_tokens": 30, "completion_tokens": 9}}]}]}))
    return path


def all_runs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [doc, *(r for sub in doc.get("subagent_trajectories") or () for r in all_runs(sub))]


def tokens(doc: dict[str, Any]) -> tuple[int, int]:
    steps = [s for r in all_runs(doc) for s in r["steps"] if "metrics" in s]
    return (sum(s["metrics"]["prompt_tokens"] for s in steps),
            sum(s["metrics"]["completion_tokens"] for s in steps))


