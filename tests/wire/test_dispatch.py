"""The one request/response dispatcher (agentd.wire.dispatch), without sockets.

Answers, abandonment and fail-all are fed by hand on a bare event loop (and
the seam to the HTTP transport: ``on_settled`` setting an
:class:`~agentd.mcp.client.answered.Answered`); the
MCP client and the control wire over it are tested against real peers in
tests/test_client_*.py and tests/test_tree*.py.
"""

from __future__ import annotations

import asyncio

import pytest

from agentd.mcp.client.answered import Answered
from agentd.wire.dispatch import Dispatcher


def _hooked() -> tuple[Dispatcher[int], list[tuple[int, str]]]:
    seen: list[tuple[int, str]] = []
    return Dispatcher(lambda rid, why: seen.append((rid, why))), seen


async def test_answers_settle_their_own_futures_and_leave_the_table() -> None:
    d, seen = _hooked()
    a, b = d.expect(1), d.expect(2)
    assert len(d) == 2 and 1 in d
    assert d.resolve(2, "two") and d.fail(1, ValueError("one"))
    assert b.result() == "two"
    with pytest.raises(ValueError, match="one"):
        a.result()
    assert len(d) == 0 and seen == []
    assert not d.resolve(2, "again")  # a second answer finds nobody waiting
    assert not d.fail(3, ValueError("never asked"))


async def test_a_cancelled_future_abandons_its_id_once() -> None:
    d, seen = _hooked()
    fut = d.expect(7)
    fut.cancel()
    await asyncio.sleep(0)  # done callbacks run on the next loop iteration
    assert seen == [(7, "cancelled")] and 7 not in d
    assert not d.resolve(7, "late")  # a late answer is dropped


async def test_cancel_abandons_false_leaves_the_reason_to_the_caller() -> None:
    d, seen = _hooked()
    fut = d.expect(1, cancel_abandons=False)
    fut.cancel()
    await asyncio.sleep(0)
    assert seen == [] and 1 in d  # the caller ends it, with its reason
    d.forget(1)
    assert 1 not in d and seen == []
    d.expect(2, cancel_abandons=False)
    d.abandon(2, "timeout")
    assert seen == [(2, "timeout")]
    d.abandon(2, "timeout")  # abandoned already: the hook runs once
    assert seen == [(2, "timeout")]


async def test_forget_drops_an_id_without_the_hook() -> None:
    d, seen = _hooked()
    fut = d.expect(5)
    d.forget(5)
    await asyncio.sleep(0)
    assert fut.cancelled() and seen == [] and len(d) == 0


async def test_wait_times_out_and_abandons_with_the_reason() -> None:
    d, seen = _hooked()
    fut = d.expect(3, cancel_abandons=False)
    with pytest.raises(TimeoutError):
        await d.wait(3, fut, 0)
    assert seen == [(3, "timeout")] and 3 not in d


async def test_wait_returns_the_answer() -> None:
    d, seen = _hooked()
    fut = d.expect(4)
    asyncio.get_running_loop().call_soon(d.resolve, 4, {"ok": True})
    assert await d.wait(4, fut, None) == {"ok": True}
    assert seen == []


async def test_cancelling_the_waiter_abandons() -> None:
    d, seen = _hooked()
    fut = d.expect(9, cancel_abandons=False)
    task = asyncio.create_task(d.wait(9, fut, None))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [(9, "cancelled")]


async def test_fail_all_fails_every_waiter_with_a_fresh_error() -> None:
    d, seen = _hooked()
    futs = [d.expect(i) for i in range(3)]
    d.fail_all(lambda: ConnectionError("closed"))
    errs = [f.exception() for f in futs]
    assert all(isinstance(e, ConnectionError) for e in errs)
    assert len({id(e) for e in errs}) == 3  # one error object per waiter
    assert len(d) == 0 and seen == []


async def test_an_id_reused_while_awaited_cancels_the_older_waiter() -> None:
    d, _ = _hooked()
    old = d.expect(1)
    new = d.expect(1)
    assert old.cancelled() and not new.done()
    assert d.resolve(1, "x") and new.result() == "x"


async def test_on_settled_runs_once_and_at_once_on_every_settling_path() -> None:
    """The hook runs synchronously, the future already settled, exactly once --
    answer, error, forget, abandon, fail-all, reuse of the id, or a cancel from
    outside the table (that one a loop turn later, as the future's callbacks)."""
    d, seen = _hooked()
    calls: list[tuple[int, bool]] = []
    futs: dict[int, asyncio.Future[object]] = {}

    def expect(rid: int) -> None:
        futs[rid] = d.expect(rid, cancel_abandons=rid != 7,
                             on_settled=lambda: calls.append((rid, futs[rid].done())))

    for rid in range(1, 8):
        expect(rid)
    d.resolve(1, "one")
    d.fail(2, ValueError("two"))
    d.forget(3)
    d.abandon(4, "timeout")
    assert calls == [(1, True), (2, True), (3, True), (4, True)]
    old = futs[5]
    expect(5)  # reused while awaited: the older waiter's hook runs, not the new one's
    assert calls[-1] == (5, True) and old.cancelled() and not futs[5].done()
    futs[6].cancel()
    assert len(calls) == 5  # not yet: the future's own callbacks are a loop turn away
    await asyncio.sleep(0)
    assert calls[-1] == (6, True) and seen == [(4, "timeout"), (6, "cancelled")]
    d.fail_all(lambda: ConnectionError("closed"))
    futs[2].exception()
    assert sorted(calls[6:]) == [(5, True), (7, True)]
    d.resolve(5, "late")  # nobody waits: no second run
    d.forget(7)
    await asyncio.sleep(0)
    assert len(calls) == 8


async def test_answered_is_set_at_once_and_wakes_its_watcher_a_loop_turn_later() -> None:
    """What the transport reads: ``is_set`` true the moment the dispatcher settles
    the id (so an answer read on the watched stream is seen at once), the
    watcher woken once and only after the reader had its turn."""
    d: Dispatcher[int] = Dispatcher()
    answered = Answered()
    woken: list[bool] = []
    answered.watch(lambda: woken.append(answered.is_set()))
    d.expect(1, cancel_abandons=False, on_settled=answered.set)
    assert not answered.is_set()
    assert d.resolve(1, "x")
    assert answered.is_set() and woken == []
    answered.set()  # idempotent: one wake-up
    await asyncio.sleep(0)
    assert woken == [True]
    late = Answered()
    late.watch(lambda: woken.append(False))
    late.watch(None)  # the reader is done: nobody to wake
    late.set()
    await asyncio.sleep(0)
    assert woken == [True] and late.is_set()
