"""Many subagents alive at once: every result reaches its run, once (issue 43).

At 2,048 live children up to 80 runs a round ended `failed: exited with code 0
before its result`.  The cause: the forkserver answers fork requests in the
order they reach its socket, and a spawn that found the socket full (its queue
is short) took its place among the awaited answers *before* it retried, so a
spawn sent meanwhile overtook it and the two runs got each other's pid.  A run
then waited for, signalled and reported the other's process: cancelling or
tearing down one killed the other, whose end was reported with the first's
exit code.  The regression test makes the first of two spawns find its path
blocked until the second has gone through (an injected fault, no luck needed).
"""

from __future__ import annotations

import asyncio
import os
import resource

import pytest
from gateway import Gateway, Reply
from tree_helpers import make_config, precompile
from waiting import until

from agentd.agent.subagents import HandleState, Refusal, SpawnRequest
from agentd.app.compose import open_supervisor
from agentd.child.boot import FAULT_ENV
from agentd.obs import metrics
from agentd.tree import forkserver, procs


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


class _FullSocketFirst:
    """Injected fault for `socket.send_fds`: the first fork request finds the
    forkserver's socket full (EAGAIN, as a burst of spawns does) until a later
    request has gone out."""

    def __init__(self, real) -> None:
        self.real = real
        self.first: list[int] | None = None
        self.later_sent = False

    def __call__(self, sock, buffers, fds, *rest):
        if self.first is None:
            self.first = list(fds)
        if list(fds) == self.first and not self.later_sent:
            raise BlockingIOError(11, "the forkserver's socket is full")
        out = self.real(sock, buffers, fds, *rest)
        if list(fds) != self.first:
            self.later_sent = True
        return out


def _hold_first_spawn(monkeypatch, spawn: str) -> None:
    """The first spawn's start is held until the second's has gone through."""
    if spawn == "forkserver":
        monkeypatch.setattr(forkserver.socket, "send_fds",
                            _FullSocketFirst(forkserver.socket.send_fds))
        return
    real = procs.open_channel
    second_done = asyncio.Event()
    calls = []

    async def held(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            await second_done.wait()
            return await real(*args, **kwargs)
        try:
            return await real(*args, **kwargs)
        finally:
            second_done.set()

    monkeypatch.setattr(procs, "open_channel", held)


def _own_pid(pid: int) -> bool:
    """Is `pid` a live subagent of this process's tree (a session leader)?"""
    try:
        return os.getsid(pid) == pid
    except ProcessLookupError:
        return False


@pytest.mark.timeout(120)
async def test_a_spawn_overtaken_on_its_way_keeps_its_own_child(tmp_path, spawn, monkeypatch):
    """A, held on its way out, and B overtaking it: cancelling A ends A's child only;
    B, whose model answers after, completes with its result."""
    _hold_first_spawn(monkeypatch, spawn)
    gate = asyncio.Event()
    async with Gateway([Reply(content='{"b": "done"}', gate=gate)] * 2) as gw:
        cfg = make_config(tmp_path, spawn=spawn, intelligence=gw.url)
        async with open_supervisor(cfg) as sup:
            a, b = await asyncio.gather(  # a first: its spawn is the one held
                sup.spawn("served", SpawnRequest("task a", mode="async")),
                sup.spawn("served", SpawnRequest("task b", mode="async")))
            await until(lambda: len(gw.bodies) == 2, what="both children waiting on the model")
            pa, pb = sup.process(a.handle), sup.process(b.handle)
            assert pa is not None and pb is not None and pa.pid != pb.pid
            assert _own_pid(pa.pid) and _own_pid(pb.pid)
            cancelled = await sup.cancel("served", a.handle)
            await until(lambda: sup.status("served", a.handle).done, what="a ended")
            assert sup.status("served", a.handle).status == "cancelled"
            gate.set()
            await until(lambda: sup.status("served", b.handle).done, what="b ended")
            state = sup.status("served", b.handle)
            assert (state.status, state.result) == ("completed", '{"b": "done"}'), \
                f"b was ended with a's child: {state.status} {state.result}"
            assert cancelled is not None


@pytest.mark.timeout(600)
async def test_hundreds_alive_at_once_each_result_arrives_once(tmp_path):
    """N children all waiting on the model at the same time (the gateway answers
    none until it holds all N calls); every run ends completed, exactly once,
    with its own result."""
    n = 240
    gate = asyncio.Event()

    def answer(body: dict) -> Reply:
        task = body["messages"][-1]["content"]
        return Reply(content=f'{{"task": "{task}"}}', gate=gate)

    ended: dict[str, int] = {}
    async with Gateway([answer] * n) as gw:
        cfg = make_config(tmp_path, spawn="forkserver", intelligence=gw.url,
                          max_children=n, max_subagents=n, max_inflight_intelligence=n,
                          drain_timeout=10.0)
        async with open_supervisor(cfg) as sup:
            sup.on_terminal(lambda s: ended.__setitem__(s.handle, ended.get(s.handle, 0) + 1))
            acks = [await sup.spawn("served", SpawnRequest(f"task {i}", mode="async"))
                    for i in range(n)]
            await until(lambda: len(gw.bodies) == n, limit=400, what="all N on the model")
            live = [sup.process(x.handle) for x in acks]
            assert all(p is not None and p.returncode is None for p in live)
            assert sup.counts()["running"] == n
            gate.set()
            await until(lambda: len(ended) == n, limit=400, what="every run terminal")
            states = [sup.status("served", x.handle) for x in acks]
    assert [h for h, k in ended.items() if k != 1] == []
    wrong = [(s.handle, s.status, s.result) for i, s in enumerate(states)
             if (s.status, s.result) != ("completed", f'{{"task": "task {i}"}}')]
    assert wrong == []


@pytest.mark.timeout(180)
async def test_out_of_fds_mid_fan_out_is_a_refusal_and_the_live_runs_go_on(
        tmp_path, spawn, monkeypatch):
    """The process's RLIMIT_NOFILE lowered to ~100 fds more than it holds (its
    children and forkserver inherit it, as under `prlimit`): a fan-out of children
    that wait until cancelled runs out of fds; the spawn that cannot start is
    refused, naming the limit, and counted; the runs started are untouched and end
    with their true outcome (cancelled), none `failed`."""
    monkeypatch.setenv(FAULT_ENV, "hang")  # each child's run waits until cancelled
    n = 200
    cfg = make_config(tmp_path, spawn=spawn, max_children=n, max_subagents=n)
    refused0 = metrics.REFUSALS.get("nofile")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ended: list[HandleState] = []
    async with open_supervisor(cfg) as sup:
        sup.on_terminal(ended.append)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 100,
                                                    hard))
        try:
            answers = [await sup.spawn("served", SpawnRequest(f"task {i}", mode="async"))
                       for i in range(n)]
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        started = [a for a in answers if isinstance(a, HandleState)]
        refusals = [a.text for a in answers if isinstance(a, Refusal)]
        assert started and refusals, "the fds never ran out: lower the limit"
        assert all("RLIMIT_NOFILE" in t and t.startswith("spawn refused: ") for t in refusals)
        assert metrics.REFUSALS.get("nofile") - refused0 == len(refusals)
        assert ended == []  # a refused spawn is no run: nothing reported
        counts = sup.counts()
        assert (counts["spawned"], counts["running"]) == (len(started), len(started))
        for s in started:  # alive and untouched
            proc = sup.process(s.handle)
            assert proc is not None and proc.returncode is None
            assert sup.status("served", s.handle).status == "running"
        again = await sup.spawn("served", SpawnRequest("after", mode="async"))
        assert isinstance(again, HandleState)  # fds back: spawns start again
        for s in [*started, again]:
            await sup.cancel("served", s.handle)
        await until(lambda: len(ended) == len(started) + 1, what="every started run ended")
    assert sorted(s.handle for s in ended) == sorted(s.handle for s in [*started, again])
    assert {s.status for s in ended} == {"cancelled"}
