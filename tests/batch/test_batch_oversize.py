"""One sample's model answer too big for its control wire ends that sample, not the
batch (issue 37): `agentd batch` (the real CLI) over the test gateway
(tests/support/gateway.py), where sample 1 is answered with 20 MiB (under
--intelligence-max-bytes, over the 16 MiB control frame) while the other samples
are in flight, their answers held until sample 1's end is logged."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from agentd_proc import agentd_env, start_agentd
from batch_helpers import SAMPLE_RE, read_results, write_tasks
from gateway import Gateway, Reply
from peers import ROOT as CHECKOUT
from waiting import until

from agentd.child.control import answer_limit
from agentd_native import MAX_FRAME

pytestmark = pytest.mark.timeout(180)
ROOT = str(CHECKOUT)  # on the children's PYTHONPATH
BIG = 20 * 1024 * 1024
N = 4


async def test_a_samples_oversized_answer_fails_that_sample_only(tmp_path, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    ids = write_tasks(tasks, N)
    gate = asyncio.Event()
    asked: set[int] = set()

    def answer(body: dict[str, Any]) -> Reply:
        text = next(m["content"] for m in body["messages"] if m["role"] == "user")
        n = int(SAMPLE_RE.search(text).group(1))  # type: ignore[union-attr]
        asked.add(n)
        if n == 1:
            return Reply.text("x" * BIG)
        return Reply(content=f"done {n}", gate=gate)

    env = agentd_env(PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    async with Gateway([answer] * (2 * N)) as gw:
        ag = await start_agentd(agentd_bin, [
            "batch", "--tasks", str(tasks), "--out", str(out), "--intelligence", gw.url,
            "--model", "test", "--parallel", str(N)], env=env)
        await until(lambda: len(asked) == N)  # every sample is in flight
        await ag.wait_for_event("batch.sample.end", id="t001", status="failed")
        gate.set()  # only now may the others answer
        done = await ag.done()
    assert done.rc == 1, done.stderr[-3000:]  # a sample failed; the batch itself did not
    by_id = {r["id"]: r for r in read_results(out)}
    assert sorted(by_id) == ids  # a result line for every sample
    big = by_id["t001"]
    assert big["status"] == "failed"
    assert f"{answer_limit(MAX_FRAME)} bytes" in big["error"] and "control wire" in big["error"]
    for i in (0, 2, 3):
        r = by_id[f"t{i:03d}"]
        assert r["status"] == "completed" and r["result"] == f"done {i}", r
    [end] = done.events("batch.end")
    assert end["by_status"] == {"completed": N - 1, "failed": 1}
    assert not done.events("run.failed")
