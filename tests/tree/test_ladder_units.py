"""The kill ladder's plan (agentd/tree/ladder.py), walked by hand: no process,
no sleep -- ``now`` is the test's clock.  The real-process side (a child that
ignores every rung meets the SIGKILL, and is reaped) is
tests/tree/test_tree_faults.py and tests/tree/test_drain_bound.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.tree.ladder import ASK_SHARE, EOF_SHARE, REAP_FLOOR, TERM_SHARE, Ladder


def walk(plan: Ladder, now: float, spent: list[float]) -> list[tuple[str, float]]:
    """Every rung with its wait; ``spent[i]`` is how long rung i really took
    (a wait cut short by the child's exit, or stretched by a busy loop)."""
    out = []
    for took in spent:
        step = plan.next(now)
        if step is None:
            break
        out.append(step)
        now += took
    return out


def test_a_child_that_ignores_every_rung_waits_each_share_then_the_kill() -> None:
    plan = Ladder(10.0, 100.0, ask=True)
    steps = walk(plan, 100.0, [4.0, 2.0, 3.0, 1.0])
    assert steps == [("ask", 10 * ASK_SHARE), ("eof", 10 * EOF_SHARE),
                     ("sigterm", 10 * TERM_SHARE),
                     ("sigkill", pytest.approx(10 * (1 - ASK_SHARE - EOF_SHARE - TERM_SHARE)))]
    assert plan.next(110.0) is None  # nothing after the SIGKILL but the reap


def test_no_ask_when_the_wire_cannot_carry_it_starts_at_eof() -> None:
    steps = walk(Ladder(10.0, 0.0, ask=False), 0.0, [2.0, 3.0, 1.0])
    assert [r for r, _ in steps] == ["eof", "sigterm", "sigkill"]


def test_time_lost_on_a_rung_is_taken_from_the_next_never_past_the_budget() -> None:
    plan = Ladder(10.0, 0.0, ask=True)
    assert plan.next(0.0) == ("ask", 4.0)
    assert plan.next(9.5) == ("eof", 0.5)  # the ask's wait ran long: 0.5 s are left
    assert plan.next(10.5) == ("sigterm", 0.0)  # past the end: signalled, not waited on
    assert plan.next(10.5) == ("sigkill", REAP_FLOOR)  # the reap is always awaited a while


def test_a_tiny_budget_still_awaits_the_reap() -> None:
    steps = walk(Ladder(0.01, 0.0, ask=True), 0.0, [0.004, 0.002, 0.003, 1.0])
    assert steps[-1] == ("sigkill", REAP_FLOOR)


@given(budget=st.floats(0.001, 1e4), lag=st.lists(st.floats(0.0, 2.0), min_size=4, max_size=4))
def test_no_rung_waits_past_the_budget_and_the_kill_is_always_reaped(
        budget: float, lag: list[float]) -> None:
    """Whatever each rung really took (its wait plus a lag), the waits are never
    negative, EOF and SIGTERM never wait past the budget's end, and the SIGKILL
    awaits the reap for the rest of the budget, at least REAP_FLOOR."""
    plan = Ladder(budget, 0.0, ask=True)
    now = 0.0
    rungs = []
    for extra in lag:
        step = plan.next(now)
        assert step is not None
        rung, wait = step
        rungs.append(rung)
        assert wait >= 0.0
        if rung in ("eof", "sigterm"):
            assert now + wait <= max(budget, now) + 1e-9
        if rung == "sigkill":
            assert wait >= max(REAP_FLOOR, budget - now) - 1e-9
        now += wait + extra
    assert rungs == ["ask", "eof", "sigterm", "sigkill"]
