"""Admission, the terminal retention and the ownership rule, without a process.

`agentd.tree.admission.admit` is pure (caps, scope narrowing, minting),
`agentd.tree.registry.Retention` takes `now` on every call, and
`agentd.tree.ownership` is the one rule of who may touch a handle: all three
are checked here on values alone, and the registry on an injected clock.  The same refusals with real children are
in tests/tree/test_tree_supervisor.py.
"""

from __future__ import annotations

import msgspec
import pytest

from agentd.agent.subagents import SpawnRequest, depth_of, top_of, within
from agentd.tree.admission import Admitted, CallerView, Denied, TreeView, admit
from agentd.tree.child_run import ChildRun
from agentd.tree.ownership import Owners
from agentd.tree.registry import Registry, Retention

TREE = TreeView(max_depth=4, max_children=2, max_subagents=3, live=0, tokens=0, ceiling=100)
ROOT = CallerView(handle="0", running=True, scope=frozenset({"fs", "web"}), live_children=0,
                  minted=0)


def refusal(tree=TREE, handle="0", caller=ROOT, request=SpawnRequest("x")) -> str:
    verdict = admit(tree, handle, caller, request)
    assert isinstance(verdict, Denied)
    assert verdict.text.startswith("spawn refused: ")
    return verdict.text


def test_an_admitted_spawn_is_minted_under_its_caller_with_the_narrowed_scope():
    verdict = admit(TREE, "0", ROOT, SpawnRequest("x", tool_scope=("fs",)))
    assert verdict == Admitted("0.1", 2, frozenset({"fs"}))
    after = msgspec.structs.replace(ROOT, minted=7)
    assert admit(TREE, "0", after, SpawnRequest("x")) == Admitted("0.8", 2,
                                                                   frozenset({"fs", "web"}))
    served = CallerView(handle="served", running=True, scope=frozenset(), live_children=0,
                        minted=0)
    assert admit(TREE, "served", served, SpawnRequest("x")) == Admitted("served.1", 2,
                                                                         frozenset())


def test_each_refusal_in_its_words_and_with_its_cap():
    assert refusal(tree=msgspec.structs.replace(TREE, closing=True)) == \
        "spawn refused: shutting down"
    assert refusal(handle="0.7", caller=None) == \
        "spawn refused: caller handle 0.7 is not running"
    ended = msgspec.structs.replace(ROOT, handle="0.7", running=False)
    assert refusal(handle="0.7", caller=ended) == \
        "spawn refused: caller handle 0.7 is not running"
    assert refusal(handle="0.2.1.3") == "spawn refused: max_depth=4 reached at handle 0.2.1.3"
    assert refusal(request=SpawnRequest("x", mode="later")) == \
        "spawn refused: unknown mode 'later'"
    assert refusal(request=SpawnRequest("x", tool_scope=("fs", "shell", "db"))) == (
        "spawn refused: tool_scope widens the caller's scope at handle 0 "
        "(not in scope: db, shell)")
    full = msgspec.structs.replace(ROOT, live_children=2)
    assert refusal(caller=full) == "spawn refused: max_children=2 reached at handle 0"
    assert refusal(tree=msgspec.structs.replace(TREE, live=3)) == \
        "spawn refused: max_subagents=3 reached at handle 0"
    assert refusal(tree=msgspec.structs.replace(TREE, tokens=100)) == \
        "spawn refused: token_ceiling=100 reached at handle 0"
    assert isinstance(admit(msgspec.structs.replace(TREE, tokens=10**9, ceiling=None), "0",
                            ROOT, SpawnRequest("x")), Admitted)


def test_the_checks_come_in_their_documented_order():
    everything = msgspec.structs.replace(TREE, live=3, tokens=100)
    crowded = msgspec.structs.replace(ROOT, live_children=2)
    wide = SpawnRequest("x", tool_scope=("shell",))
    # depth before scope, scope before the child cap, then the tree cap, then tokens
    assert "max_depth" in refusal(tree=everything, handle="0.1.1.1", caller=crowded,
                                  request=wide)
    assert "tool_scope" in refusal(tree=everything, caller=crowded, request=wide)
    assert "max_children" in refusal(tree=everything, caller=crowded)
    assert "max_subagents" in refusal(tree=everything)
    caps = {admit(t, "0", c, SpawnRequest("x")).cap  # type: ignore[union-attr]
            for t, c in ((msgspec.structs.replace(TREE, closing=True), ROOT), (TREE, None),
                         (everything, crowded), (everything, ROOT))}
    assert caps == {"shutting_down", "not_running", "max_children", "max_subagents"}


def test_retention_keeps_terminal_handles_for_a_ttl_and_at_most_keep():
    r = Retention(ttl=10.0, keep=2)
    r.ended("a", 0.0)
    r.ended("b", 1.0)
    assert list(r.expired(5.0)) == []
    assert r.left("a", 5.0) == 5.0 and r.left("nope", 5.0) is None
    r.ended("c", 6.0)  # three kept: the oldest goes first
    assert list(r.expired(6.0)) == ["a"]
    r.ended("b", 99.0)  # the first end stands
    assert list(r.expired(11.0)) == ["b"]
    assert r.left("c", 11.0) == 5.0
    assert list(r.expired(16.0)) == ["c"] and r.left("c", 16.0) is None
    zero = Retention(ttl=0.0)
    zero.ended("x", 3.0)
    assert list(zero.expired(3.0)) == ["x"]  # a TTL of 0: gone at the next look


@pytest.mark.parametrize(("handle", "ancestor", "inside"), [
    ("0.3.1", "0.3", True), ("0.3", "0.3", False), ("0.31", "0.3", False),
    ("served.2.1", "served", True), ("served.2", "0", False)])
def test_a_tree_caller_touches_only_its_own_subtree(handle, ancestor, inside):
    assert within(handle, ancestor) is inside


def test_a_served_run_belongs_to_the_principal_that_spawned_it():
    owners = Owners(keep=2)
    owners.claim("served.1", "alice")
    owners.claim("served.1", "mallory")  # a first claim stands
    assert owners.may("served.1", "alice") and owners.may("served.1.4.2", "alice")
    assert not owners.may("served.1", "mallory") and not owners.may("served.9", "alice")
    owners.claim("served.2", "bob")
    owners.claim("served.3", "carol")  # beyond keep: the oldest claim is forgotten
    assert "served.1" not in owners and owners.owner("served.3.1") == "carol"
    owners.forget("served.2.7")
    assert owners.owner("served.2") is None
    assert top_of("served.3.1.2") == "served.3" and depth_of("0.2.1.3") == 4


def test_the_registry_evicts_on_its_clock_and_tells_the_readers():
    now = [0.0]
    root = ChildRun("0", "", frozenset(), "root", None)
    reg = Registry((root,), Retention(ttl=10.0, keep=5), clock=lambda: now[0])
    gone: list[str] = []
    reg.on_evicted(gone.append)
    run = ChildRun("0.1", "0", frozenset(), "sync", SpawnRequest("x"))
    reg.add(run)
    assert reg.counts()["running"] == 1 and root.live_children == {"0.1"}
    assert reg.retained("0.1") is None  # running: not retained, just live
    run.state.status = "completed"
    reg.ended(run)
    assert root.live_children == set() and reg.counts()["running"] == 0
    assert reg.retained("0.1") == 10.0
    now[0] = 4.0
    assert reg.retained("0.1") == 6.0 and reg.run("0.1") is run
    now[0] = 10.0
    assert reg.retained("0.1") is None and gone == ["0.1"]
    assert reg.run("0.1") is None  # evicted: unknown
    assert reg.run("0") is None and reg.get("0") is not None  # a root is no subagent
    counts = reg.counts()
    assert counts["evicted"] == 1 and counts["completed"] == 1 and counts["spawned"] == 1
