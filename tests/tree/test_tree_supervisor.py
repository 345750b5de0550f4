"""The supervisor with real child processes: modes, caps, scope, cancel, eviction.

Every test runs twice: `--spawn exec` and `--spawn forkserver` must behave alike.
"""

from __future__ import annotations

import os

import pytest
from tree_helpers import exists, make_config, parent_of, precompile, running
from waiting import until

from agentd.agent.subagents import Refusal, SpawnRequest, Unknown
from agentd.app.compose import open_supervisor

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


def sup_for(tmp_path, spawn, **over):
    return open_supervisor(make_config(tmp_path, spawn=spawn, **over))


async def test_sync_async_warm_send_status(tmp_path, spawn):
    async with sup_for(tmp_path, spawn) as sup:
        st = await sup.spawn("0", SpawnRequest("hello"))
        assert st.handle == "0.1"
        assert st.body() == {"handle": "0.1", "status": "completed", "done": True,
                             "partial": False, "result": '{"ok": true}'}
        ack = await sup.spawn("0", SpawnRequest("later", mode="async"))
        assert ack.handle == "0.2" and ack.body()["status"] == "running"
        assert ack.body()["done"] is False and "age_ms" in ack.body()
        assert await until(lambda: sup.status("0", "0.2").done)
        assert sup.status("0", "0.2").status == "completed"
        warm = await sup.spawn("0", SpawnRequest("session", mode="warm"))
        reply = await sup.send("0", warm.handle, "and another thing")
        assert reply.body()["status"] == "running" and reply.body()["result"] == '{"ok": true}'
        proc = sup.process(warm.handle)
        assert proc is not None and running(proc.pid)
        counts = sup.counts()
        assert counts["spawned"] == 3 and counts["completed"] == 2 and counts["running"] == 1
        assert sup.status("0", "0.99") == Unknown("0.99")
        # a send to a run that is no warm session: unknown, with the reason the wire adds
        assert await sup.send("0", "0.1", "more?") == Unknown("0.1", "is not a warm session")
        assert await sup.send("0.2", warm.handle, "not yours") == Unknown(warm.handle)
    assert sup.status("0", warm.handle).status == "cancelled"  # drained on exit
    assert not exists(proc.pid)


async def test_nested_spawn_goes_through_the_root_chokepoint(tmp_path, spawn):
    async with sup_for(tmp_path, spawn) as sup:
        st = await sup.spawn("0", SpawnRequest("spawn-child please"))
        assert st.status == "completed" and st.result == '{"parent": "done"}'
        leaf = sup.status("0", "0.1.1")  # minted from the caller's pipe, depth 3
        assert leaf.status == "completed"
        assert sup.counts()["spawned"] == 2


async def test_a_childs_stray_handles_are_unknown_in_the_same_words(tmp_path, spawn):
    """A real child asks up the control wire about handles that are no warm
    session, never existed, or are not under it: each comes back as the one
    unknown-handle answer its model sees, and the child's run goes on."""
    async with sup_for(tmp_path, spawn) as sup:
        st = await sup.spawn("0", SpawnRequest("stray-handles"))
        assert st.handle == "0.1"
        assert (st.status, st.result) == ("completed", '{"strays": "answered"}')
        assert sup.counts()["spawned"] == 2  # the child and its one leaf


def test_unknown_handle_words_on_the_control_wire() -> None:
    assert Unknown("0.1", "is not a warm session").words() == (
        "unknown handle 0.1 is not a warm session")
    assert Unknown("0.7").words() == "unknown handle 0.7"


async def test_served_handles(tmp_path, spawn):
    async with sup_for(tmp_path, spawn) as sup:
        a = await sup.spawn("served", SpawnRequest("one", mode="async"))
        b = await sup.spawn("served", SpawnRequest("two"))
        assert (a.handle, b.handle) == ("served.1", "served.2")
        assert await until(lambda: sup.status("served", "served.1").done)


async def test_max_depth_refusal_text(tmp_path, spawn):
    async with sup_for(tmp_path, spawn) as sup:
        await sup.spawn("0", SpawnRequest("first", mode="warm"))       # 0.1
        await sup.spawn("0", SpawnRequest("second", mode="warm"))      # 0.2
        await sup.spawn("0.2", SpawnRequest("third", mode="warm"))     # 0.2.1
        await sup.spawn("0.2.1", SpawnRequest("a"))                    # 0.2.1.1
        await sup.spawn("0.2.1", SpawnRequest("b"))                    # 0.2.1.2
        await sup.spawn("0.2.1", SpawnRequest("c", mode="warm"))       # 0.2.1.3
        assert await sup.spawn("0.2.1.3", SpawnRequest("too deep")) == Refusal(
            "spawn refused: max_depth=4 reached at handle 0.2.1.3")
        assert sup.counts()["refused"] == 1


async def test_child_cap_total_cap_token_ceiling(tmp_path, spawn):
    async with sup_for(tmp_path, spawn, max_children=2, max_subagents=3,
                       token_ceiling=100) as sup:
        await sup.spawn("0", SpawnRequest("one", mode="warm"))
        await sup.spawn("0", SpawnRequest("two", mode="warm"))
        assert await sup.spawn("0", SpawnRequest("three")) == Refusal(
            "spawn refused: max_children=2 reached at handle 0")
        await sup.spawn("0.1", SpawnRequest("nested", mode="warm"))  # 3 live now
        assert await sup.spawn("0.2", SpawnRequest("four")) == Refusal(
            "spawn refused: max_subagents=3 reached at handle 0.2")
        await sup.cancel("0", "0.1")
        sup.ledger.report("0", 100)  # the root's own tokens, on the tree's ledger
        assert await sup.spawn("0", SpawnRequest("costs")) == Refusal(
            "spawn refused: token_ceiling=100 reached at handle 0")


async def test_children_usage_counts_toward_the_ceiling(tmp_path, spawn):
    async with sup_for(tmp_path, spawn, token_ceiling=15) as sup:
        st = await sup.spawn("0", SpawnRequest("costly"))
        assert st.status == "completed" and sup.tree_tokens >= 15
        refused = await sup.spawn("0", SpawnRequest("more"))
        assert isinstance(refused, Refusal)
        assert refused.text.startswith("spawn refused: token_ceiling=15 reached")


async def test_scope_narrows_and_widening_is_refused(tmp_path, spawn):
    async with open_supervisor(make_config(tmp_path, spawn=spawn), scope=["fs", "web"]) as sup:
        assert await sup.spawn("0", SpawnRequest("x", tool_scope=("fs", "shell"))) == Refusal(
            "spawn refused: tool_scope widens the caller's scope at handle 0 (not in scope: shell)")
        await sup.spawn("0", SpawnRequest("narrow", tool_scope=("fs",), mode="warm"))
        assert await sup.spawn("0.1", SpawnRequest("y", tool_scope=("web",))) == Refusal(
            "spawn refused: tool_scope widens the caller's scope at handle 0.1 "
            "(not in scope: web)")
        # the same refusal, asked by a real child's loop: an isError observation to it
        st = await sup.spawn("0", SpawnRequest("widen-scope", tool_scope=("fs",)))
        assert st.status == "completed" and st.result == '{"widen": "answered"}'
        assert sup.status("0", "0.2.1") == Unknown("0.2.1")
        assert sup.counts()["refused"] == 3


async def test_cancel_a_three_level_subtree_leaves_no_process(tmp_path, spawn):
    async with sup_for(tmp_path, spawn) as sup:
        await sup.spawn("0", SpawnRequest("top", mode="warm"))          # 0.1
        await sup.spawn("0.1", SpawnRequest("middle", mode="warm"))     # 0.1.1
        await sup.spawn("0.1.1", SpawnRequest("bottom", mode="warm"))   # 0.1.1.1
        await sup.spawn("0.1.1", SpawnRequest("hang", mode="async"))    # 0.1.1.2
        sibling = await sup.spawn("0", SpawnRequest("sibling", mode="warm"))  # 0.2
        handles = ["0.1", "0.1.1", "0.1.1.1", "0.1.1.2"]
        assert await until(lambda: all(sup.process(h) for h in handles))
        pids = [sup.process(h).pid for h in handles]
        state = await sup.cancel("0", "0.1")
        assert state.status == "cancelled"
        for h in handles:
            assert sup.status("0", h).done
        assert [p for p in pids if exists(p)] == []
        assert sup.status("0", sibling.handle).status == "running"
        assert running(sup.process(sibling.handle).pid)
        assert await sup.cancel("0", "0.77") == Unknown("0.77")


async def test_terminal_handles_are_evicted(tmp_path, spawn):
    async with open_supervisor(make_config(tmp_path, spawn=spawn), terminal_ttl=0.0) as sup:
        st = await sup.spawn("0", SpawnRequest("short"))
        assert st.status == "completed"
        assert sup.status("0", st.handle) == Unknown(st.handle)
        assert sup.counts()["evicted"] == 1


async def test_on_terminal_once_per_run(tmp_path, spawn):
    seen = []
    async with sup_for(tmp_path, spawn) as sup:
        sup.on_terminal(lambda s: seen.append((s.handle, s.status)))
        await sup.spawn("0", SpawnRequest("a"))
        await sup.spawn("0", SpawnRequest("b", mode="async"))
        assert await until(lambda: len(seen) == 2)
    assert sorted(seen) == [("0.1", "completed"), ("0.2", "completed")]


async def test_every_child_is_our_child_and_reaped(tmp_path, spawn):
    async with sup_for(tmp_path, spawn, max_children=8) as sup:
        for i in range(4):
            await sup.spawn("0", SpawnRequest(f"a{i}", mode="async"))
        assert await until(lambda: all(sup.status("0", f"0.{i}").done for i in range(1, 5)))
        pids = [sup.process(f"0.{i}").pid for i in range(1, 5)]
        warm = [await sup.spawn("0", SpawnRequest(f"w{i}", mode="warm")) for i in range(2)]
        assert await until(lambda: all(sup.process(w.handle) for w in warm))
        live = [sup.process(w.handle).pid for w in warm]
        # every live child hangs off the supervisor: directly (exec) or through its
        # forkserver, which is itself the supervisor's own child
        parents = {parent_of(p) for p in live}
        if spawn == "exec":
            assert parents == {os.getpid()}
        else:
            (fs,) = parents
            assert fs != os.getpid() and parent_of(fs) == os.getpid()
    assert all(not exists(p) for p in pids + live)


async def test_a_stray_agentd_in_the_cwd_is_not_what_runs(tmp_path, spawn, monkeypatch):
    bogus = tmp_path / "cwd" / "agentd"
    bogus.mkdir(parents=True)
    (bogus / "__init__.py").write_text("raise SystemExit(99)\n")
    (bogus / "__main__.py").write_text("raise SystemExit(99)\n")
    monkeypatch.chdir(bogus.parent)
    async with sup_for(tmp_path, spawn) as sup:
        st = await sup.spawn("0", SpawnRequest("hello"))
        assert st.status == "completed"
