"""The polling fallback's rules (agentd.reactive.polling): `PollPlan` fed `now`
by hand, and `Poller` driven by an injected clock against a scripted read.
No sockets and no sleeps: the poll timing is the plan's arithmetic.
"""

from __future__ import annotations

import asyncio

import pytest
from logcapture import events

from agentd.errors import ToolFault
from agentd.reactive.polling import Change, Poller, PollPlan


def test_plan_is_due_at_interval_steps_from_each_poll() -> None:
    plan = PollPlan(5.0)
    assert plan.due_at() is None and plan.take(100.0) == []
    plan.add("a", 10.0)
    plan.add("b", 12.0)
    plan.add("a", 99.0)  # polled already: unchanged
    assert plan.due_at() == 10.0
    assert plan.take(9.99) == []
    assert plan.take(10.0) == ["a"]
    assert plan.due_at() == 12.0
    # a late poll is spaced from when it ran, never bunched to catch up
    assert plan.take(13.0) == ["b"]
    assert plan.due_at() == 15.0  # a: 10 + 5 (b: 13 + 5)
    assert plan.take(40.0) == ["a", "b"]  # both late: one read each, in added order
    assert plan.due_at() == 45.0
    assert plan.take(44.0) == []
    plan.remove("b")
    assert plan.take(45.0) == ["a"] and "b" not in plan and len(plan) == 1


def test_plan_first_body_is_the_baseline_then_changes_are_seen() -> None:
    plan = PollPlan(1.0)
    plan.add("a", 0.0)
    assert plan.observed("a", "v1") == (Change.BASELINE, False)
    assert plan.observed("a", "v1") == (Change.SAME, False)
    assert plan.observed("a", "v2") == (Change.CHANGED, False)
    assert plan.observed("a", "v2") == (Change.SAME, False)
    assert plan.observed("a", "v1") == (Change.CHANGED, False)  # back again is a change
    assert plan.observed("gone", "x") == (Change.SAME, False)  # removed mid-read


def test_plan_failures_are_a_streak_and_keep_the_last_body() -> None:
    plan = PollPlan(1.0)
    plan.add("a", 0.0)
    assert plan.failed("a") is True  # before any body: still logged once
    assert plan.failed("a") is False
    assert plan.observed("a", "v1") == (Change.BASELINE, True)
    assert plan.failed("a") is True  # a new streak
    assert plan.failed("a") is False
    # the body before the failures is what the next read is compared with
    assert plan.observed("a", "v1") == (Change.SAME, True)
    assert plan.observed("a", "v2") == (Change.CHANGED, False)
    assert plan.failed("missing") is False


def test_plan_invalidated_body_wakes_on_the_next_read() -> None:
    """A wake whose read failed: the change it stood for is not lost."""
    plan = PollPlan(1.0)
    plan.add("a", 0.0)
    plan.invalidate("a")  # before a baseline: nothing to invalidate
    assert plan.observed("a", "v1") == (Change.BASELINE, False)
    assert plan.observed("a", "v2") == (Change.CHANGED, False)
    plan.invalidate("a")
    assert plan.observed("a", "v2") == (Change.CHANGED, False)
    assert plan.observed("a", "v2") == (Change.SAME, False)
    plan.invalidate("gone")


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_plan_needs_a_positive_interval(interval: float) -> None:
    with pytest.raises(ValueError):
        PollPlan(interval)


class Obs:
    def __init__(self, text: str, is_error: bool = False) -> None:
        self.text, self.is_error, self.structured = text, is_error, None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_poller_baseline_then_wake_on_change_and_failures_logged_once(logs) -> None:
    clock = Clock()
    bodies: list[object] = ["v1"]
    woken: list[str] = []

    async def read(uri: str) -> Obs:
        item = bodies[0]
        if isinstance(item, BaseException):
            raise item
        return item if isinstance(item, Obs) else Obs(str(item))

    poller = Poller(5.0, read, woken.append, clock=clock)
    await poller.add("u")  # the baseline, read before add returns
    assert poller.reads == 1 and woken == [] and poller.plan.due_at() == 1005.0
    await poller.add("u")  # already polled: no second baseline
    assert poller.reads == 1
    await poller.poll("u")
    assert woken == []  # same body
    bodies[0] = "v2"
    await poller.poll("u")
    assert woken == ["u"] and poller.changes == 1
    bodies[0] = ToolFault("srv", "server unavailable (reconnecting)", retryable=True)
    await poller.poll("u")
    await poller.poll("u")
    bodies[0] = Obs("resource not found", is_error=True)
    await poller.poll("u")
    assert woken == ["u"]
    bodies[0] = "v2"  # back, unchanged since the last body read: no wake
    await poller.poll("u")
    assert woken == ["u"]
    failed = events(logs, "reactive.poll.failed")
    assert [(e["uri"], e["kind"]) for e in failed] == [("u", "retry")]
    assert len(events(logs, "reactive.poll.recovered")) == 1
    assert [e["uri"] for e in events(logs, "reactive.poll.changed")] == ["u"]


async def test_poller_run_sleeps_until_due_then_reads_in_its_owners_taskgroup() -> None:
    clock = Clock()
    reads: list[tuple[str, float]] = []
    read_done = asyncio.Event()

    async def read(uri: str) -> Obs:
        reads.append((uri, clock.now))
        read_done.set()
        return Obs("same")

    poller = Poller(0.01, read, lambda uri: None, clock=clock)
    async with asyncio.TaskGroup() as tg:
        running = tg.create_task(poller.run())
        await poller.add("a")  # baseline at 1000.0; next due at 1000.01
        read_done.clear()
        clock.now = 1000.02  # past due: the run loop's sleep ends and it reads
        async with asyncio.timeout(30):
            await read_done.wait()
        poller.remove("a")
        running.cancel()
    assert reads[0] == ("a", 1000.0)
    assert reads[1] == ("a", 1000.02)
    assert poller.plan.due_at() is None


def test_watch_report_on_readyz_is_escaped_and_redacted() -> None:
    from agentd.obs import health
    from agentd.obs.http import watch_lines

    health.reset()
    try:
        remove = health.set_watched(lambda: [
            {"uri": "https://user:s3cret@h.example/a b\nwatch x", "server": "s", "mode": "poll"},
            {"uri": "mem://notes/1", "server": "notes", "mode": "listen"}])
        assert health.watched()[0]["uri"] == "https://***@h.example/a b\nwatch x"
        assert watch_lines() == ("watch poll s https://***@h.example/a%20b%0Awatch%20x\n"
                                 "watch listen notes mem://notes/1\n")
        assert "s3cret" not in watch_lines()
        remove()
        assert health.watched() == [] and watch_lines() == ""
    finally:
        health.reset()
