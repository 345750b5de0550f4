"""The reactive router on real asyncio: debounce, per-URI coalescing, the bounded
pending set, bursts, await_resource claims. Counts, ordering and final state are
asserted — never durations."""

from __future__ import annotations

import asyncio

import pytest
from logcapture import events

from agentd.reactive.router import Coalescer, Router
from agentd.reactive.waiters import Waiters


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# -- the sans-IO core ------------------------------------------------------

def test_coalescer_window_zero_is_due_at_once_and_coalesces_per_uri() -> None:
    c = Coalescer(0.0)
    assert c.take(0.0) is None and c.due_at() is None
    assert c.notify("file:///a", 1.0) is True  # first pending: tell the consumer
    assert c.notify("file:///b", 1.0) is False
    assert c.notify("file:///a", 1.0) is False
    wake = c.take(1.0)
    assert wake is not None
    assert wake.uris == ("file:///a", "file:///b")  # first-notified order
    assert wake.counts == {"file:///a": 2, "file:///b": 1}
    assert wake.coalesced == 3 and wake.seq == 1 and not wake.resync
    assert c.take(1.0) is None and not c.pending


def test_coalescer_trailing_debounce_and_max_delay() -> None:
    c = Coalescer(1.0, max_delay=3.0)
    c.notify("u", 10.0)
    assert c.due_at() == 11.0
    assert c.take(10.5) is None
    c.notify("u", 10.9)  # a later update pushes the trailing edge
    assert c.due_at() == pytest.approx(11.9)
    assert c.take(11.5) is None
    # a steady stream cannot push the wake past first + max_delay
    for t in (11.8, 12.7, 12.95):
        c.notify("u", t)
    assert c.due_at() == 13.0
    wake = c.take(13.0)
    assert wake is not None and wake.counts == {"u": 5}


def test_coalescer_bounded_pending_set_marks_resync_instead_of_dropping() -> None:
    c = Coalescer(0.0, capacity=3)
    for i in range(5):
        c.notify(f"u{i}", 0.0)
    c.notify("u0", 0.0)  # known URIs still coalesce by name
    wake = c.take(0.0)
    assert wake is not None
    assert wake.uris == ("u0", "u1", "u2")
    assert wake.counts == {"u0": 2, "u1": 1, "u2": 1}
    assert wake.resync and wake.overflow == 2 and wake.coalesced == 6
    assert c.take(0.0) is None


def test_coalescer_flush_takes_pending_before_due() -> None:
    c = Coalescer(5.0)
    c.notify("u", 0.0)
    assert c.take(1.0) is None
    wake = c.flush()
    assert wake is not None and wake.counts == {"u": 1}
    assert c.flush() is None


def test_negative_window_rejected() -> None:
    with pytest.raises(ValueError):
        Coalescer(-1.0)


# -- the asyncio driver ----------------------------------------------------



async def test_burst_of_1000_gives_few_wakes_last_sees_final_state(logs) -> None:
    """The consumer reads the 'resource' on each wake (notify-then-read)."""
    state = {"v": 0}
    router = Router(0.0)
    seen: list[int] = []
    folded: list[int] = []

    async def producer() -> None:
        for i in range(1, 1001):
            state["v"] = i  # the server changes the resource, then notifies
            router.notify("file:///inbox")
            if i % 50 == 0:
                await asyncio.sleep(0)  # let the consumer run now and then
        router.close()

    async def consumer() -> None:
        while (wake := await router.next_wake()) is not None:
            folded.append(wake.coalesced)
            seen.append(state["v"])  # fresh read of the current state
            await asyncio.sleep(0)  # the loop is "busy" running

    async with asyncio.TaskGroup() as tg:
        tg.create_task(consumer())
        tg.create_task(producer())
    leftover = router.drain()
    if leftover is not None:
        folded.append(leftover.coalesced)
        seen.append(state["v"])
    assert sum(folded) == 1000  # every update is accounted for: none lost
    assert 1 <= len(seen) <= 40  # a few wakes, not 1,000
    assert seen[-1] == 1000  # the last wake saw the final state
    assert seen == sorted(seen)
    wakes = events(logs, "reactive.wake")
    assert len(wakes) == len(seen)
    assert sum(w["coalesced"] for w in wakes) == 1000
    assert all(w["uris"] == ["file:///inbox"] for w in wakes)


async def test_debounced_burst_is_one_wake() -> None:
    """With a window and a burst delivered without yielding, one wake."""
    router = Router(0.05)
    for _ in range(1000):
        router.notify("file:///x")
    wake = await router.next_wake()
    assert wake.counts == {"file:///x": 1000} and wake.seq == 1
    assert router.take_now() is None


async def test_busy_consumer_coalesces_across_uris_in_bounded_queue() -> None:
    router = Router(0.0, capacity=4)
    first = asyncio.Event()
    release = asyncio.Event()
    wakes = []

    async def consumer() -> None:
        for _ in range(2):
            wakes.append(await router.next_wake())
            first.set()
            await release.wait()  # the loop is busy with the first wake

    async with asyncio.TaskGroup() as tg:
        tg.create_task(consumer())
        router.notify("a")
        await first.wait()
        for i in range(100):
            router.notify(["a", "b", "c"][i % 3])
        for i in range(10):
            router.notify(f"extra{i}")  # beyond capacity 4: folded into resync
        release.set()
    assert wakes[0].counts == {"a": 1}
    w = wakes[1]
    assert w.uris == ("a", "b", "c", "extra0")
    assert w.counts == {"a": 34, "b": 33, "c": 33, "extra0": 1}
    assert w.resync and w.overflow == 9 and w.coalesced == 110


async def test_wakes_keep_order_and_uris_per_wake() -> None:
    router = Router(0.0)
    router.notify("x")
    w1 = await router.next_wake()
    router.notify("y")
    router.notify("x")
    w2 = await router.next_wake()
    assert (w1.seq, w1.uris) == (1, ("x",))
    assert (w2.seq, w2.uris) == (2, ("y", "x"))


async def test_pump_reads_client_updates_queue() -> None:
    q: asyncio.Queue = asyncio.Queue()
    router = Router(0.0)
    for _ in range(10):
        q.put_nowait(("srv", "res://a"))
    q.put_nowait(("srv", "res://b"))
    async with asyncio.TaskGroup() as tg:
        pump = tg.create_task(router.pump(q))
        wake = await router.next_wake()
        pump.cancel()
    assert wake.counts == {"res://a": 10, "res://b": 1}
    assert q.empty()


async def test_close_wakes_a_waiting_consumer() -> None:
    router = Router(0.0)
    outcome: list[str] = []

    async def consumer() -> None:
        if await router.next_wake() is None:
            outcome.append("closed")

    async with asyncio.TaskGroup() as tg:
        tg.create_task(consumer())
        await asyncio.sleep(0)
        router.close()
    assert outcome == ["closed"]


async def test_await_resource_claims_update_instead_of_waking() -> None:
    waiters = Waiters()
    router = Router(0.0, claim=waiters.claim)
    async with asyncio.TaskGroup() as tg:
        t = tg.create_task(waiters.wait("res://w", 30))
        await asyncio.sleep(0)
        assert waiters.waiting("res://w")
        router.notify("res://w")  # claimed by the waiter
        router.notify("res://other")  # not awaited: a wake
    assert t.result() is True
    assert router.stats() == {"received": 1, "wakes": 0, "claimed": 1}
    wake = router.take_now()
    assert wake is not None and wake.uris == ("res://other",)
    assert not waiters.waiting("res://w")


async def test_await_resource_times_out_false() -> None:
    waiters = Waiters()
    assert await waiters.wait("res://never", 0) is False
    assert not waiters.waiting("res://never")
