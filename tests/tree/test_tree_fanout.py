"""256 async children with the playback intelligence: all complete, every one reaped."""

from __future__ import annotations

import pytest
from tree_helpers import exists, make_config, precompile
from waiting import until

from agentd.agent.subagents import SpawnRequest
from agentd.app.compose import open_supervisor

N = 256


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


@pytest.mark.timeout(420)
@pytest.mark.parametrize("spawn", ["exec", "forkserver"])
async def test_256_async_children_complete_and_are_reaped(tmp_path, spawn):
    cfg = make_config(tmp_path, spawn=spawn, max_children=N, max_subagents=N,
                      drain_timeout=10.0)
    async with open_supervisor(cfg) as sup:
        acks = [await sup.spawn("0", SpawnRequest(f"task {i}", mode="async"))
                for i in range(N)]
        assert len({a.handle for a in acks}) == N
        assert await until(lambda: all(sup.status("0", a.handle).done for a in acks), limit=360)
        states = [sup.status("0", a.handle) for a in acks]
        bad = [(s.handle, s.status, s.result) for s in states if s.status != "completed"]
        assert bad == []
        assert {sup.status("0", a.handle).result for a in acks} == {'{"ok": true}'}
        pids = [sup.process(a.handle).pid for a in acks]
        assert await until(lambda: not any(exists(p) for p in pids), limit=30)
        counts = sup.counts()
        assert counts["completed"] == N and counts["running"] == 0
