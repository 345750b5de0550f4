"""The one request/response dispatcher (agentd.wire.dispatch), without sockets.

Answers, abandonment and fail-all are fed by hand on a bare event loop; the
MCP client and the control wire over it are tested against real peers in
tests/test_client_*.py and tests/test_tree*.py.
"""

from __future__ import annotations

import asyncio

import pytest

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
