"""The MCP client's sans-IO units, fed ``(event, now)`` by hand: no sockets.

* :class:`agentd.mcp.client.rules.liveness.Liveness` -- when a ping is due, when a server
  is stale; :class:`~agentd.mcp.client.rules.liveness.Reconnect` -- one recovery's plan;
* :class:`agentd.mcp.client.rules.listen_plan.ListenPlan` -- the 2026-07-28 listen state
  machine (filter epochs, what is honoured, what ended);
* :class:`agentd.mcp.client.rules.catalogue.Freshness` -- the catalogue's ttl;
* :class:`agentd.mcp.client.tasks.Tasks` -- the TaskGroup one runner task opens and
  closes, whose children's bugs propagate.

The IO over them runs against real servers in tests/test_client_*.py.
"""

from __future__ import annotations

import asyncio
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from logcapture import events

from agentd import log
from agentd.errors import ToolFault
from agentd.mcp.client.rules.catalogue import Freshness
from agentd.mcp.client.rules.listen_plan import ListenPlan
from agentd.mcp.client.rules.liveness import STALE_AFTER_MISSES, Liveness, Reconnect
from agentd.mcp.client.tasks import Tasks
from agentd.wire import mcp2026 as m26

# ------------------------------------------------------------------ liveness


def test_an_idle_session_is_due_once_per_interval_and_traffic_defers_it() -> None:
    live = Liveness(5.0, now=100.0)
    assert not live.due(104.9, connected=True, pings=True)
    assert live.due(105.0, connected=True, pings=True)
    live.heard(106.0)  # any inbound message proves the server alive
    assert not live.due(110.0, connected=True, pings=True)
    assert live.due(111.0, connected=True, pings=True)


def test_no_ping_when_disconnected_at_2026_or_without_an_interval() -> None:
    for live, kw in ((Liveness(1.0), {"connected": False, "pings": True}),
                     (Liveness(1.0), {"connected": True, "pings": False}),
                     (Liveness(None), {"connected": True, "pings": True}),
                     (Liveness(0), {"connected": True, "pings": True})):
        live.misses = 2
        assert not live.due(1e9, **kw)
        assert live.misses == 0  # nothing to judge: the count starts over


def test_stale_after_the_misses_in_a_row_then_counting_restarts() -> None:
    live = Liveness(1.0)
    verdicts = [live.missed() for _ in range(STALE_AFTER_MISSES)]
    assert verdicts == [False] * (STALE_AFTER_MISSES - 1) + [True]
    assert live.misses == 0
    live.missed()
    live.answered()  # an answer (even a JSON-RPC error) clears the misses
    assert [live.missed() for _ in range(STALE_AFTER_MISSES - 1)] == \
        [False] * (STALE_AFTER_MISSES - 1)


@given(st.lists(st.sampled_from(["miss", "answer"]), max_size=40))
def test_stale_exactly_when_the_last_misses_run_reaches_the_bound(steps: list[str]) -> None:
    live = Liveness(1.0, stale_after=3)
    run = 0
    for step in steps:
        if step == "answer":
            live.answered()
            run = 0
            continue
        run += 1
        stale = live.missed()
        assert stale == (run == 3)
        if stale:
            run = 0


def test_a_blip_probes_the_session_first_and_backs_off_from_the_second_try() -> None:
    plan = Reconnect(expired=False, drop=False)
    assert not plan.reopen()
    assert plan.next_try() == 0  # the first try does not wait
    assert plan.probes(has_session=True) and not plan.handshakes(has_session=True)
    plan.failed(handshake=False)  # the probe's connection failed: probe again, later
    assert plan.next_try() == 1 and plan.probes(has_session=True)
    plan.session_lost()  # the probe says the server forgot us: re-initialize now
    assert not plan.probes(has_session=True) and plan.handshakes(has_session=True)


def test_a_stale_server_is_reopened_once_and_re_initialized() -> None:
    plan = Reconnect(expired=False, drop=True)
    assert plan.reopen() and not plan.reopen()
    assert not plan.probes(has_session=True) and plan.handshakes(has_session=True)


def test_no_session_to_probe_or_a_failed_handshake_re_initializes() -> None:
    plan = Reconnect(expired=False, drop=False)
    assert not plan.probes(has_session=False) and plan.handshakes(has_session=False)
    plan.failed(handshake=True)
    assert plan.handshakes(has_session=True)


# ------------------------------------------------------------------ listen plan


def _flt(plan: ListenPlan, subs: set[str], *, tools: bool = False) -> m26.SubscriptionFilter:
    flt = plan.filter(subs, subscribe=True, tools_changed=tools, resources_changed=False)
    assert flt is not None
    return flt


def test_the_filter_names_what_is_watched_and_none_when_nothing_is() -> None:
    plan = ListenPlan()
    assert plan.filter(set(), subscribe=True, tools_changed=False,
                       resources_changed=False) is None
    flt = _flt(plan, {"b://2", "a://1"}, tools=True)
    assert flt.resourceSubscriptions == ["a://1", "b://2"] and flt.toolsListChanged is True
    # a server without resources.subscribe is asked for list changes only
    only = plan.filter({"a://1"}, subscribe=False, tools_changed=True, resources_changed=False)
    assert only is not None and not only.resourceSubscriptions


def test_a_subscribe_waits_for_the_epoch_it_made_and_sees_what_is_honoured() -> None:
    plan = ListenPlan()
    want = plan.changed("a://1")
    assert not plan.acked(want)
    subs = {"a://1", "b://2"}
    asked = _flt(plan, subs)
    ended = plan.opened(plan.epoch, asked, m26.SubscriptionFilter(
        resourceSubscriptions=["a://1"]), reopened=False)
    assert plan.acked(want) and plan.opens == 1 and ended == frozenset()
    assert plan.honours("a://1") and not plan.honours("b://2")
    later = plan.changed("c://3")  # an acknowledgement of an older filter is not enough
    assert not plan.acked(later)


def test_a_reopened_stream_that_drops_a_uri_ends_it_until_subscribed_again() -> None:
    plan = ListenPlan()
    subs = {"a://1", "b://2"}
    both = m26.SubscriptionFilter(resourceSubscriptions=["a://1", "b://2"])
    plan.opened(plan.changed("a://1"), _flt(plan, subs), both, reopened=False)
    plan.lost()
    assert plan.listening == frozenset()
    ended = plan.opened(plan.epoch, _flt(plan, subs),
                        m26.SubscriptionFilter(resourceSubscriptions=["a://1"]), reopened=True)
    assert ended == {"b://2"}
    assert plan.watched(subs) == ["a://1"]  # it has nothing left to fire: out of the filter
    plan.changed("b://2")  # subscribed again: asked for again
    assert plan.watched(subs) == ["a://1", "b://2"]


def test_a_server_without_listen_settles_every_waiter_unhonoured() -> None:
    plan = ListenPlan()
    want = plan.changed("a://1")
    plan.refused()
    assert plan.unsupported and plan.acked(want) and not plan.honours("a://1")
    plan.adopted()  # rediscovered: asked again
    assert not plan.unsupported


def test_nothing_to_listen_for_settles_the_epoch() -> None:
    plan = ListenPlan()
    want = plan.changed("a://1")  # and unsubscribed at once: an empty filter
    plan.idle(plan.epoch)
    assert plan.acked(want) and plan.listening == frozenset()


# ------------------------------------------------------------------ catalogue ttl


def test_freshness_honours_the_ttl_and_list_changed() -> None:
    f = Freshness()
    assert f.stale("tools", 0.0)  # never listed
    f.listing("tools")
    f.listed("tools", 30_000, now=100.0)
    assert not f.stale("tools", 129.9) and f.stale("tools", 130.0)
    f.invalidate("tools")  # a list_changed: stale whatever the ttl says
    assert f.stale("tools", 100.0)
    f.listing("tools")  # a re-list starts: a change from now on is a new one
    f.listed("tools", 0, now=200.0)  # no ttl: stale at once
    assert f.stale("tools", 200.0)
    assert f.stale("resources", 200.0)  # parts are independent


# ------------------------------------------------------------------ task ownership


async def test_tasks_open_and_close_the_group_in_one_runner_and_typed_faults_stay_local(
        logs: io.StringIO) -> None:
    failures: list[BaseException] = []
    tasks = Tasks(log.log, failures.append)
    await tasks.start()

    async def peer_mistake() -> None:
        raise ToolFault("s", "bad answer", retryable=False)

    sibling_done = asyncio.Event()

    async def sibling() -> None:
        await asyncio.sleep(0)
        sibling_done.set()

    t1 = tasks.spawn(peer_mistake(), "relist.tools")
    t2 = tasks.spawn(sibling(), "other")
    assert t1 is not None and t2 is not None
    await asyncio.wait((t1, t2))
    assert sibling_done.is_set() and failures == []  # a typed fault ends that child alone
    await tasks.stop()
    assert tasks.spawn(sibling(), "late") is None  # closed: nothing new starts
    assert [e["task"] for e in events(logs, "mcp.task.failed")] == ["relist.tools"]


async def test_a_childs_bug_propagates_to_the_owner_and_cancels_its_siblings() -> None:
    failures: list[BaseException] = []
    tasks = Tasks(log.log, failures.append)
    await tasks.start()
    hang = asyncio.Event()
    sibling = tasks.spawn(hang.wait(), "waits")

    async def bug() -> None:
        raise KeyError("a bug, not a peer's mistake")

    tasks.spawn(bug(), "buggy")
    assert sibling is not None
    with pytest.raises(asyncio.CancelledError):
        await sibling  # the group cancelled it
    with pytest.raises(KeyError):
        await tasks.stop()  # the owner sees the bug
    assert len(failures) == 1 and isinstance(failures[0], KeyError)
