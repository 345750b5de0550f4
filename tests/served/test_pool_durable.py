"""Durable pool owners (a worker with a journal), at the PoolServed level over real
loopback sockets: two workers' relays on aiohttp listeners, real signed probes and
relayed operations between them.  Only the runs are scripted (``ScriptedBackend``,
the tree's contract without a tree) and the prober's clock is injected, so "dead"
is reached by moving the clock, not by waiting.

The owner ``w2`` journals its runs: its probes say ``durable: true`` and its
incarnation is its journal's id, marked durable.  While it is down its handles
stay its own on ``w1`` (the retryable refusal, a subscriber's watch waits), even
when ``w1`` started after it went down and never heard it answer (the handle's
incarnation says so); restarted on the same journal it adopts its run's pool name
and answers it again; restarted on another journal (a node loss) its former
handles read "worker lost".
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
import peers
import pytest
from aiohttp import web
from scripted_backend import ScriptedBackend
from waiting import until

from agentd.agent.subagents import SpawnRequest, Unknown
from agentd.config.model import PoolPeer, PoolSpec
from agentd.errors import PoolError
from agentd.obs import health
from agentd.pool import handles
from agentd.pool.link.prober import Prober
from agentd.served.backend import LocalServed
from agentd.served.pool import PoolBackend, PoolServed, Where, _PlacedSpawn

KEY = "pool-key-for-durable-tests-7c1e"
JOURNAL = b"jrnl1"
OTHER_JOURNAL = b"jrnl2"
INCARNATION = handles.incarnation(JOURNAL, durable=True)  # what w2's probes answer
OTHER_INCARNATION = handles.incarnation(OTHER_JOURNAL, durable=True)


class Worker:
    """One pool member: PoolServed + PoolBackend over a scripted backend, its relay
    mounted on a real loopback listener (``up``/``down``: the process's lifetime)."""

    def __init__(self, me: str, ports: dict[str, int], *, journal: bytes | None = None,
                 capacity: int = 4) -> None:
        spec = PoolSpec(id=me, key=KEY, peers=tuple(
            PoolPeer(p, f"http://127.0.0.1:{port}") for p, port in ports.items() if p != me))
        self.port = ports[me]
        self.runs = ScriptedBackend()
        self.pool = PoolServed(spec, capacity=capacity, journal_id=journal)
        self.backend = PoolBackend(LocalServed(self.runs), self.pool)
        self._runner: web.AppRunner | None = None

    async def up(self) -> None:
        app = web.Application()
        self.pool.relay.mount(app, self.backend)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def down(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()
        await self.pool.close()


@contextlib.asynccontextmanager
async def observer(ports: dict[str, int]):
    """``w1``, probing ``w2`` on an injected clock (``now[0]``), its watches served."""
    w1 = Worker("w1", ports)
    now = [0.0]
    w1.pool.prober = Prober(w1.pool.relay, w1.pool.membership, clock=lambda: now[0])
    stop = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(w1.pool.prober.run(stop))
            w1.pool.watches_in(tg)
            try:
                yield w1, now
            finally:
                stop.set()
                w1.pool.stop_watches()
    finally:
        await w1.pool.close()


def _ports() -> dict[str, int]:
    return {"w1": peers.free_port(), "w2": peers.free_port()}


async def _answered(w1: Worker, incarnation: bytes) -> None:
    await until(lambda: w1.pool.membership.status("w2") == "alive"
                and w1.pool.membership.peers["w2"].incarnation == incarnation,
                what="w1's probe of w2 answered")


async def _back(w1: Worker, now: list[float], ended: asyncio.Event,
                handle: str) -> dict:
    """w2 answers again: w1 hears it on its next probe, the held watch ends on the
    run's terminal body, and a status through w1 reads the run's end."""
    now[0] += w1.pool.membership.interval
    await _answered(w1, INCARNATION)
    await asyncio.wait_for(ended.wait(), 60)  # the watch saw the terminal body
    back = await w1.backend.operate("status", handle, None, "alice")
    assert isinstance(back, dict) and back["result"] == "the answer"
    return back


async def test_a_durable_owner_down_then_back_keeps_its_runs_then_a_node_loss_loses_them(
) -> None:
    ports = _ports()
    w2 = Worker("w2", ports, journal=JOURNAL)
    await w2.up()
    body = await w2.backend.spawn(SpawnRequest("work", mode="async"), "alice")
    assert isinstance(body, dict)
    handle = body["handle"]
    w2.runs.finish("served.1", "the answer")
    async with observer(ports) as (w1, now):
        await _answered(w1, INCARNATION)
        assert w1.pool.membership.peers["w2"].durable  # carried by the signed probe
        done = await w1.backend.operate("status", handle, None, "alice")
        assert isinstance(done, dict) and done["result"] == "the answer"

        # the owner stops (a rollout's SIGTERM, a crash): called dead, not lost
        await w2.down()
        now[0] += 100.0
        await until(lambda: w1.pool.membership.status("w2") == "dead", what="w2 called dead")
        assert w1.pool.where(handle, "alice") == Where(owner="w2", durable=True)
        with pytest.raises(PoolError, match="pool member w2 holding this run is not answering "
                                            r"\(restarting\?\); its runs are journaled there: "
                                            "retry") as refused:
            await w1.backend.operate("status", handle, None, "alice")
        assert refused.value.kind == "unavailable"
        ended = asyncio.Event()
        uri = f"agent://subagents/{handle}"
        assert w1.backend.subscribe(uri, handle, "alice", None,
                                    lambda _: ended.set()) == "held"
        with pytest.raises(PoolError, match="journaled there"):  # still down: still held
            await w1.backend.operate("status", handle, None, "alice")
        assert not ended.is_set()

        # restarted on the same journal: the run (resumed by the tree) takes back its name
        w2b = Worker("w2", ports, journal=JOURNAL)
        w2b.runs.states.clear()
        again = await w2b.backend.spawn(SpawnRequest("work", mode="async"), "alice")
        assert isinstance(again, dict)
        assert w2b.pool.where(handle, "alice") is None  # not adopted yet: unknown
        assert w2b.pool.adopt("served.1", handle)
        w2b.runs.finish("served.1", "the answer")
        await w2b.up()
        back = await _back(w1, now, ended, handle)
        assert back["status"] == "completed" and back["handle"] == handle
        # a forged or another principal's handle stays unknown, here and relayed
        forged = handle[:-1] + ("a" if handle[-1] != "a" else "b")
        assert isinstance(await w1.backend.operate("status", forged, None, "alice"), Unknown)
        assert isinstance(await w1.backend.operate("status", handle, None, "bob"), Unknown)

        # a node loss: w2 comes back with another journal; the former run is lost
        await w2b.down()
        w2c = Worker("w2", ports, journal=OTHER_JOURNAL)
        await w2c.up()
        now[0] += 100.0
        await _answered(w1, OTHER_INCARNATION)
        lost = await w1.backend.operate("status", handle, None, "alice")
        assert isinstance(lost, dict) and lost["status"] == "failed"
        assert lost["result"].startswith("worker lost: pool member w2")
        # and on w2 itself a handle of another journal's incarnation reads lost
        assert w2c.pool.where(handle, "alice").lost is not None
        await w2c.down()


async def test_a_peer_that_never_heard_a_durable_owner_holds_its_handles() -> None:
    """w1 starts while w2 is down (a pool restarted at once) and calls it dead
    without ever hearing it answer: w2's handle says it journals its runs, so w1
    refuses retryably and waits, and the run answers once w2 is back.  A handle
    of an owner without a journal, in the same spot, reads "worker lost"."""
    ports = _ports()
    w2 = Worker("w2", ports, journal=JOURNAL)
    body = await w2.backend.spawn(SpawnRequest("work", mode="async"), "alice")
    plain = Worker("w2", ports)  # the same owner id, without a journal
    plain_body = await plain.backend.spawn(SpawnRequest("work", mode="async"), "alice")
    await plain.pool.close()
    assert isinstance(body, dict) and isinstance(plain_body, dict)
    handle = body["handle"]
    async with observer(ports) as (w1, now):
        await until(lambda: "w2" in w1.pool.membership.peers, what="w1 knows its peer")
        now[0] += 100.0  # w2 never answered: dead
        await until(lambda: w1.pool.membership.status("w2") == "dead", what="w2 called dead")
        assert w1.pool.membership.peers["w2"].incarnation is None  # never heard
        assert w1.pool.where(handle, "alice") == Where(owner="w2", durable=True)
        with pytest.raises(PoolError, match="its runs are journaled there: retry") as refused:
            await w1.backend.operate("status", handle, None, "alice")
        assert refused.value.kind == "unavailable"
        lost = await w1.backend.operate("status", plain_body["handle"], None, "alice")
        assert isinstance(lost, dict) and lost["result"].startswith("worker lost")
        ended = asyncio.Event()
        assert w1.backend.subscribe(f"agent://subagents/{handle}", handle, "alice", None,
                                    lambda _: ended.set()) == "held"
        # w2 comes up (its run resumed, its name adopted) and answers
        w2.runs.finish("served.1", "the answer")
        await w2.up()
        await _back(w1, now, ended, handle)
        await w2.down()


async def test_adopt_takes_only_this_workers_own_names() -> None:
    ports = _ports()
    w2 = Worker("w2", ports, journal=JOURNAL)
    body = await w2.backend.spawn(SpawnRequest("work", mode="async"), "alice")
    assert isinstance(body, dict)
    handle = body["handle"]
    assert w2.pool.where(handle, "alice") == Where(internal="served.1")
    other = Worker("w2", ports, journal=OTHER_JOURNAL)
    renamed = Worker("w3", {**ports, "w3": peers.free_port()}, journal=JOURNAL)
    assert not other.pool.adopt("served.1", handle)  # another journal's name
    assert not renamed.pool.adopt("served.1", handle)  # another --pool-id's
    assert not w2.pool.adopt("served.1.2", handle)  # a run's name, not a subagent's
    assert not w2.pool.adopt("served.1", "served.w2.not-a-token")
    assert other.pool.where(handle, "alice").lost is not None
    for worker in (w2, other, renamed):
        await worker.pool.close()
    with pytest.raises(ValueError, match="a journal id has 5 bytes, not 4"):
        PoolServed(PoolSpec(id="w2", key=KEY), capacity=1, journal_id=b"shrt")


async def test_a_draining_worker_answers_no_free_slots() -> None:
    ports = _ports()
    w2 = Worker("w2", ports, capacity=2)
    await w2.up()
    try:
        async with observer(ports) as (w1, now):
            await until(lambda: w1.pool.membership.place() == "w2", what="w2 offers room")
            assert not w1.pool.membership.peers["w2"].durable  # no journal: as before
            health.set_draining()  # w2's SIGTERM (one process here: both read it)
            now[0] += w1.pool.membership.interval
            await until(lambda: w1.pool.membership.peers["w2"].free == 0,
                        what="w2's probe answers free=0")
            assert w1.pool.membership.place() is None
            assert w2.backend.status_extra()["pool"]["free"] == 0
    finally:
        health.set_draining(False)
        await w2.down()


def test_a_placed_spawn_carries_only_the_members_it_sets() -> None:
    """A spawn placed on a peer is encoded without its defaults, so a member added
    later (``a2a_context``) reaches the peer only when set: a peer of the version
    before it, which decodes placements strictly, still takes every other spawn
    while a rolling upgrade runs both versions."""
    class Before(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
        instruction: str  # SpawnRequest's members before a2a_context
        output_contract: str | None = None
        tool_scope: tuple[str, ...] | None = None
        mode: str = "sync"

    plain = msgspec.to_builtins(SpawnRequest("x", tool_scope=("fs__read",), mode="async"))
    assert msgspec.convert(plain, Before) == Before("x", None, ("fs__read",), "async")
    placed = msgspec.convert(plain, _PlacedSpawn)
    assert (placed.instruction, placed.tool_scope, placed.a2a_context) == ("x", ("fs__read",), None)
    assert msgspec.to_builtins(SpawnRequest("x", a2a_context="ctx")) == {
        "instruction": "x", "a2a_context": "ctx"}
