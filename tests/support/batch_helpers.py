"""Helpers of the `agentd batch` tests and benchmark: tasks files, results, and a
gateway responder that plays one two-step sample per instruction and counts
the samples it sees in flight at once (a real recording gateway, tests/support/gateway.py)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentd_proc import agentd_env
from gateway import Gateway, Reply
from peers import ROOT

SAMPLE_RE = re.compile(r"sample (\d+)")
ECHO_RE = re.compile(r"echo \d+")

def env(*first: str) -> dict[str, str]:
    """`agentd_env()` with ``first``, then this checkout, on the children's PYTHONPATH."""
    return agentd_env(PYTHONPATH=os.pathsep.join(
        p for p in (*first, str(ROOT), os.environ.get("PYTHONPATH")) if p))


def batch_args(tasks: Path, out: Path, gw: Gateway, sdk, *extra: str) -> list[str]:
    return ["batch", "--tasks", str(tasks), "--out", str(out), "--intelligence", gw.url,
            "--mcp", f"sdk={sdk.url}", "--spawn", "forkserver", *extra]


def cassette_of(rec: Path, sample_id: str) -> Path:
    from agentd.batch.cassette import cassette_path

    return rec / Path(cassette_path(str(rec), sample_id)).name


def write_tasks(path: Path, n: int, **extra: Any) -> list[str]:
    ids = [f"t{i:03d}" for i in range(n)]
    with path.open("w") as f:
        for i, tid in enumerate(ids):
            f.write(json.dumps({"id": tid, "instruction": f"sample {i}: echo it", **extra})
                    + "\n")
    return ids


def read_results(path: Path) -> list[dict[str, Any]]:
    """Every line of a results file; each must be one whole JSON object."""
    text = path.read_text() if path.exists() else ""
    assert not text or text.endswith("\n"), f"a torn last line: {text[-200:]!r}"
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class Samples:
    """A gateway responder: a sample's first call asks for `sdk__echo`, its second
    (after the tool result) answers `done N` with the echoed text.

    `open` holds the samples between their first and their last model call: each
    is certainly in flight then, so `max_open` is a lower bound of the batch's
    concurrency that a batch over its --parallel would push over it. `stall(i)`
    returning a number makes sample i's first call hang that long (or until the
    gateway closes).
    """

    def __init__(self, stall: Callable[[int], float] | None = None,
                 usage: dict[str, int] | None = None, latency: float = 0.0) -> None:
        self.open: set[int] = set()
        self.max_open = 0
        self.first: list[int] = []
        self.stall = stall
        self.usage = usage
        self.latency = latency  # every answer takes this long (a model's time; benchmarks)

    def __call__(self, body: dict[str, Any]) -> Reply:
        msgs = body["messages"]
        instruction = next(m["content"] for m in msgs if m["role"] == "user")
        n = int(SAMPLE_RE.search(instruction).group(1))  # type: ignore[union-attr]
        if msgs[-1]["role"] == "tool":
            self.open.discard(n)
            echoed = ECHO_RE.search(msgs[-1]["content"])
            return Reply(content=f"done {n}: {echoed.group(0) if echoed else '?'}",
                         usage=self.usage, hang=self.latency)
        self.open.add(n)
        self.max_open = max(self.max_open, len(self.open))
        self.first.append(n)
        reply = Reply.tools(("sdk__echo", {"text": f"echo {n}"}), usage=self.usage)
        reply.hang = self.latency
        if self.stall is not None and (hang := self.stall(n)):
            reply.hang = hang
        return reply
