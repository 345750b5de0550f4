"""Brokered I/O of subagents (issue 17): real children, a recording gateway, SDK servers.

Children use the OpenAI-compatible path through their parent: the test
gateway (tests/support/gateway.py) records every request the parent makes for them;
the official SDK's server (tests/support/sdk_servers.py) is their MCP side.
"""

from __future__ import annotations

import asyncio
import json
import os

import aiohttp
import pytest
from gateway import Gateway, Reply
from logcapture import events
from peers import python_peer, require_modules
from tree_helpers import forkservers, make_config, parent_of, precompile
from waiting import until

from agentd.agent.subagents import SpawnRequest
from agentd.app.compose import open_supervisor
from agentd.child.control import IO_SCOPE, IoCall, IoRead, IoSubscribe
from agentd.config.model import ServerSpec
from agentd.errors import ToolFault
from agentd.wire.jsonrpc import ErrorObject

SECRET_KEY = "sk-test-intelligence-0f9a8b7c6d5e"
SECRET_TOKEN = "tok-test-server-1a2b3c4d5e6f"


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


def _instruction(body: dict) -> str:
    for m in body["messages"]:
        if m["role"] == "user":
            return m["content"]
    return ""


def _turn(body: dict) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def _tool_texts(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def _responder(fn, n: int = 4000) -> list:
    return [fn] * n


def _environ(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        return fh.read()


def _memory(pid: int) -> bytes:
    """Every readable mapping of a live process (ours: /proc/PID/mem), concatenated."""
    out = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if "r" not in perms or line.rstrip().endswith(("[vvar]", "[vsyscall]")):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                out.append(mem.read(end - start))
            except OSError:  # a mapping that cannot be read (a guard page)
                continue
    return b"".join(out)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("spawn", ["forkserver", "exec"])
async def test_a_child_holds_no_secret(tmp_path, monkeypatch, spawn):
    """The key and the server token stay in the parent: not in the child's (or the
    forkserver's) environment, not in its configuration; the parent uses them."""
    require_modules("mcp")
    monkeypatch.setenv("AGENTD_INTELLIGENCE_KEY", SECRET_KEY)
    monkeypatch.setenv("AGENTD_SECRET_TOKEN", SECRET_TOKEN)
    with python_peer("sdk_servers.py") as peer:
        async with Gateway(_responder(lambda b: Reply.text('{"ok": 1}'))) as gw:
            spec = ServerSpec(name="sdk", url=peer.url,
                              headers={"X-Token": "{{secret:TOKEN}}"})
            cfg = make_config(tmp_path, spawn=spawn, intelligence=gw.url, mcp=(spec,))
            async with open_supervisor(cfg) as sup:
                st = await sup.spawn("0", SpawnRequest("hello", mode="warm"))
                assert await until(lambda: sup.status("0", st.handle).result is not None)
                assert sup.status("0", st.handle).result == '{"ok": 1}'
                pid = sup.process(st.handle).pid
                env = _environ(pid)
                assert SECRET_KEY.encode() not in env and SECRET_TOKEN.encode() not in env
                assert b"AGENTD_INTELLIGENCE_KEY" not in env
                if spawn == "forkserver":
                    assert forkservers()  # the child forked from one
                    for server in forkservers():
                        fs_env = _environ(server)
                        assert SECRET_KEY.encode() not in fs_env
                        assert SECRET_TOKEN.encode() not in fs_env
                # what went down the wire is in the child now: a catalogue, and no
                # spec, no URL, no secret anywhere in its memory
                memory = _memory(pid)
                for needle in (SECRET_KEY, SECRET_TOKEN, gw.url, peer.url, "{{secret:TOKEN}}"):
                    assert needle.encode() not in memory, needle
                assert b"sdk__echo" in memory
    # the parent made every call, with the key (the child has none)
    assert gw.headers and all(h["Authorization"] == f"Bearer {SECRET_KEY}" for h in gw.headers)
    # and the child was offered the server's tools without listing them itself
    assert "sdk__echo" in {t["function"]["name"] for t in gw.bodies[0]["tools"]}


@pytest.mark.timeout(120)
async def test_a_child_cannot_reach_a_server_outside_its_scope(tmp_path):
    """Scope `a` only: B's tools are not offered, a model call of one is refused, and
    a request for B on the wire (tool, read, subscribe) is refused by the parent."""
    require_modules("mcp")
    with python_peer("sdk_servers.py") as a, python_peer("sdk_servers.py") as b:
        def script(body: dict) -> Reply:
            if _turn(body) == 0:
                return Reply.tools(("b__echo", {"text": "via b"}), ("a__echo", {"text": "via a"}))
            return Reply.text(json.dumps({"seen": _tool_texts(body)}))

        async with Gateway(_responder(script)) as gw:
            cfg = make_config(tmp_path, intelligence=gw.url,
                              mcp=(ServerSpec(name="a", url=a.url),
                                   ServerSpec(name="b", url=b.url)))
            async with open_supervisor(cfg) as sup:
                st = await sup.spawn("0", SpawnRequest("use tools", tool_scope=("a",)))
                assert st.status == "completed", st.result
                handle = st.handle
                for req in (IoCall("b__echo", {"text": "x"}),
                            IoRead("mem://greeting", "b"),
                            IoSubscribe("mem://watched", "b")):
                    refused = await sup.broker.serve(handle, frozenset({"a"}), req)
                    assert isinstance(refused, ErrorObject) and refused.code == IO_SCOPE
                    assert refused.message.endswith("is not in this subagent's tool_scope")
                async with aiohttp.ClientSession() as http:
                    stats_a = await (await http.get(f"http://127.0.0.1:{a.port}/stats")).json()
                    stats_b = await (await http.get(f"http://127.0.0.1:{b.port}/stats")).json()
    offered = {t["function"]["name"] for t in gw.bodies[0]["tools"]}
    assert "a__echo" in offered and not any(n.startswith("b__") for n in offered)
    seen = json.loads(st.result)["seen"] if isinstance(st.result, str) else st.result["seen"]
    assert any("no tool named 'b__echo'" in t for t in seen)
    assert any("via a" in t for t in seen)
    assert stats_b["calls"] == 0 and stats_b["subscribe"] == 0
    assert stats_a["calls"] == 1


@pytest.mark.timeout(300)
async def test_64_children_stay_within_the_tree_ceiling(tmp_path):
    """64 children at once, each calling until refused: the tree total ends within
    ceiling - 1 + M * T (M calls in flight, T the largest call), every call the gateway
    answered is charged, and every child ends budget_exhausted with a partial result."""
    n, per_call, ceiling, inflight = 64, 15, 20 * 64, 64

    def script(body: dict) -> Reply:
        return Reply.tools(("agentd__read_resource", {"uri": "agent://status"}),
                           content=f"step {_turn(body)}",
                           usage={"prompt_tokens": 10, "completion_tokens": 5})

    async with Gateway(_responder(script, 10_000)) as gw:
        cfg = make_config(tmp_path, intelligence=gw.url, token_ceiling=ceiling,
                          max_children=n, max_subagents=n, max_inflight_intelligence=inflight)
        async with open_supervisor(cfg) as sup:
            acks = await asyncio.gather(*(sup.spawn("0", SpawnRequest(f"work {i}", mode="async"))
                                          for i in range(n)))
            assert await until(lambda: all(sup.status("0", a.handle).done for a in acks), limit=240)
            states = [sup.status("0", a.handle) for a in acks]
            total = sup.tree_tokens
            refused = sup.ledger.refused
    assert {s.status for s in states} == {"budget_exhausted"}, [s.result for s in states][:3]
    assert all(s.partial for s in states)
    assert total == per_call * len(gw.bodies)  # charged where the call is made, all of it
    assert ceiling <= total <= ceiling - 1 + inflight * per_call
    assert refused >= n


@pytest.mark.timeout(180)
async def test_429_pauses_the_whole_tree_and_loses_no_child(tmp_path):
    """One 429 with Retry-After: 1 holds every call of the tree for that second
    (not only the one that got it); every child then completes.

    The gateway runs in the test's loop beside the tree's gate, so each request
    says whether it arrived while the pause was in force: only calls already past
    the gate when the 429 came (at most max_inflight - 1) may; the rest wait it out."""
    n, inflight = 16, 4
    gate: list = []  # the tree's FlowGate, once the Supervisor is up
    arrivals: list[tuple[bool, bool]] = []  # (after a pause began, during one)

    def seen() -> None:
        g = gate[0]
        arrivals.append((g.pauses >= 1, g.paused))

    def first(body: dict) -> Reply:
        seen()
        return Reply.error(429, retry_after="1")

    def rest(body: dict) -> Reply:
        seen()
        return Reply.text('{"done": true}')

    async with Gateway([first, *_responder(rest, 200)]) as gw:
        cfg = make_config(tmp_path, intelligence=gw.url, max_children=n, max_subagents=n,
                          max_inflight_intelligence=inflight)
        async with open_supervisor(cfg) as sup:
            gate.append(sup.broker.intelligence.gate)
            acks = await asyncio.gather(*(sup.spawn("0", SpawnRequest(f"job {i}", mode="async"))
                                          for i in range(n)))
            assert await until(lambda: all(sup.status("0", a.handle).done for a in acks), limit=150)
            states = [sup.status("0", a.handle) for a in acks]
            pauses = sup.broker.intelligence.gate.pauses
    assert [s.status for s in states] == ["completed"] * n
    assert len(gw.bodies) == n + 1  # the refused call was retried once, nothing lost
    assert pauses >= 1
    assert arrivals[0] == (False, False)  # the 429 itself, before any pause
    during = [a for a in arrivals if a[1]]
    waited = [a for a in arrivals if a == (True, False)]  # sent once the pause was over
    assert len(during) <= inflight - 1, arrivals
    assert len(waited) >= n - inflight, arrivals


@pytest.mark.timeout(120)
async def test_an_update_reaches_only_the_child_that_subscribed(tmp_path):
    """Child `watcher` awaits mem://watched through the broker; child `idle` is in the
    same scope; the root never subscribed: only the watcher gets the update."""
    require_modules("mcp")
    with python_peer("sdk_servers.py") as peer:
        def script(body: dict) -> Reply:
            if "watch" in _instruction(body) and _turn(body) == 0:
                return Reply.tools(("agentd__await_resource",
                                    {"uri": "mem://watched", "timeout": 90}))
            return Reply.text(json.dumps({"seen": _tool_texts(body)}))

        async with Gateway(_responder(script)) as gw:
            cfg = make_config(tmp_path, intelligence=gw.url,
                              mcp=(ServerSpec(name="sdk", url=peer.url),))
            async with open_supervisor(cfg) as sup:
                idle = await sup.spawn("0", SpawnRequest("stay idle", mode="warm"))
                watcher = await sup.spawn("0", SpawnRequest("watch it", mode="async"))
                assert await until(lambda: sup.broker.holds(watcher.handle), limit=60)
                async with aiohttp.ClientSession() as http:
                    await http.post(f"http://127.0.0.1:{peer.port}/update?value=v-new")
                assert await until(lambda: sup.status("0", watcher.handle).done, limit=60)
                st = sup.status("0", watcher.handle)
                delivered = list(sup.broker.delivered)
                root_queue = sup.broker.toolbox.updates.qsize()  # the root's toolbox
                assert await until(lambda: not sup.broker.holds(watcher.handle), limit=10)
                assert sup.status("0", idle.handle).status == "running"
    assert st.status == "completed", st.result
    seen = json.loads(st.result)["seen"]
    assert any("updated; current state of mem://watched" in t and "v-new" in t for t in seen)
    assert delivered == [(watcher.handle, "sdk", "mem://watched")]
    assert root_queue == 0  # not the root's subscription: it never saw the update


@pytest.mark.timeout(60)
async def test_forkserver_that_cannot_start_falls_back_to_exec(tmp_path, monkeypatch, caplog):
    """A forkserver that fails to start (a fault injected by replacing its start: no
    real platform here lacks one) costs one warning; the spawns run exec'd (children
    of this process, not of a forkserver)."""
    from agentd.tree import forkserver

    async def broken(self) -> None:
        raise OSError("injected: no forkserver")

    monkeypatch.setattr(forkserver.Forkserver, "_start", broken)
    cfg = make_config(tmp_path, spawn="forkserver")
    async with open_supervisor(cfg) as sup:
        a = await sup.spawn("0", SpawnRequest("one"))
        b = await sup.spawn("0", SpawnRequest("two", mode="warm"))
        assert await until(lambda: sup.status("0", b.handle).result is not None)
        assert parent_of(sup.process(b.handle).pid) == os.getpid()  # exec'd by us
        assert forkservers() == []
        assert sup.fallbacks == 1
        assert a.status == "completed" and sup.status("0", b.handle).status == "running"


def test_spawn_defaults_to_the_forkserver_on_linux():
    from agentd.config.model import Config

    assert Config().spawn == ("forkserver" if os.uname().sysname == "Linux" else "exec")


@pytest.mark.timeout(120)
async def test_the_root_and_its_children_share_one_ledger(tmp_path):
    """A whole run (agentd.app.run.execute): the root's own calls are charged to
    `0` and its child's, brokered, to `0.1`, in the one ledger of the tree."""
    from agentd.app.run import execute
    from agentd.config.model import Config

    def script(body: dict) -> Reply:
        if _instruction(body).endswith("child job"):
            return Reply.text('{"child": true}')
        if _turn(body) == 0:
            return Reply.tools(("agentd__subagent_spawn", {"instruction": "child job"}))
        return Reply.text('{"root": true}')

    seen: dict = {}

    async def keep(stack, ctx) -> None:
        seen["backend"] = ctx.backend

    async with Gateway(_responder(script)) as gw:
        cfg = Config(instruction="root job", intelligence=gw.url, drain_timeout=3.0,
                     token_ceiling=1000)
        result, code, _state = await execute(cfg, run_id="r", signals=False, serve=False,
                                             extra=keep)
    assert int(code) == 0, result
    ledger = seen["backend"].ledger
    assert ledger.by_handle == {"0": 30, "0.1": 15}
    assert ledger.total == 15 * len(gw.bodies) == 45


@pytest.mark.timeout(180)
async def test_a_grandchild_is_brokered_by_the_root_with_its_own_scope(tmp_path):
    """Depth 3: `0.1` (scope a, b) spawns `0.1.1` with scope a. The grandchild's calls
    go straight to the root, which applies the grandchild's narrower scope."""
    require_modules("mcp")
    with python_peer("sdk_servers.py") as a, python_peer("sdk_servers.py") as b:
        def script(body: dict) -> Reply:
            instr, turn = _instruction(body), _turn(body)
            if instr.endswith("grandchild job") and turn == 0:
                return Reply.tools(("a__echo", {"text": "deep a"}), ("b__echo", {"text": "deep b"}))
            if instr.endswith("child job") and turn == 0:
                return Reply.tools(("agentd__subagent_spawn",
                                    {"instruction": "grandchild job", "tool_scope": ["a"]}))
            return Reply.text(json.dumps({"seen": _tool_texts(body)}))

        async with Gateway(_responder(script)) as gw:
            cfg = make_config(tmp_path, intelligence=gw.url,
                              mcp=(ServerSpec(name="a", url=a.url),
                                   ServerSpec(name="b", url=b.url)))
            async with open_supervisor(cfg) as sup:
                st = await sup.spawn("0", SpawnRequest("child job"))
                grand = sup.status("0", "0.1.1")
                by_handle = dict(sup.ledger.by_handle)
                async with aiohttp.ClientSession() as http:
                    stats_b = await (await http.get(f"http://127.0.0.1:{b.port}/stats")).json()
    assert st.status == "completed" and grand.status == "completed", (st.result, grand.result)
    seen = json.loads(grand.result)["seen"]
    assert any("deep a" in t for t in seen)
    assert any("no tool named 'b__echo'" in t for t in seen)
    assert stats_b["calls"] == 0
    grand_bodies = [bd for bd in gw.bodies if _instruction(bd).endswith("grandchild job")]
    assert not any(t["function"]["name"].startswith("b__") for t in grand_bodies[0]["tools"])
    assert set(by_handle) == {"0.1", "0.1.1"}  # each charged where its call was made


@pytest.mark.timeout(120)
async def test_a_childs_brokered_call_faults_as_the_roots_would(tmp_path, logs):
    """A real child's tool call that its server answers HTTP 500 (the official SDK's
    server behind a throttle, tests/support/fault_peers.py): the fault crosses the control
    wire once, so the child's loop tells its model the server's own fault -- the
    same words the root's client raises for the same answer, not a fault "of the
    broker" -- and the child's loop holds it retryable, as the root's client does."""
    require_modules("mcp")
    with python_peer("fault_peers.py") as srv:
        def script(body: dict) -> Reply:
            turn = _turn(body)
            if turn == 0:
                return Reply.tools(("srv__throttle", {"n": 50, "status": 500}))
            if turn == 1:
                return Reply.tools(("srv__echo", {"text": "through the broker"}))
            return Reply.text(json.dumps({"seen": _tool_texts(body)}))

        async with Gateway(_responder(script)) as gw:
            cfg = make_config(tmp_path, intelligence=gw.url,
                              mcp=(ServerSpec(name="srv", url=srv.url),))
            async with open_supervisor(cfg) as sup:
                st = await sup.spawn("0", SpawnRequest("call echo", tool_scope=("srv",)))
                assert st.status == "completed", st.result
                assert sup.broker.toolbox is not None
                with pytest.raises(ToolFault) as root:  # the root's own client, same answer
                    await sup.broker.toolbox.clients["srv"].call_tool("echo", {"text": "y"})
    seen = json.loads(st.result)["seen"]
    assert "throttling" in seen[0]
    note = seen[1]
    assert "failed with a protocol or transport fault" in note
    assert f"({' '.join(str(root.value).split())[:300]})" in note, note
    assert "broker:" not in note
    assert root.value.server == "srv" and root.value.retryable and root.value.code == 500
    # the child's own log line (relayed by the parent as subagent.stderr)
    faults = [line for e in events(logs, "subagent.stderr")
              if (line := json.loads(e["line"]))["event"] == "tool.fault"]
    assert [(f["tool"], f["fault"], f["retryable"]) for f in faults] == [
        ("srv__echo", " ".join(str(root.value).split())[:300], True)]


async def test_the_update_queue_asks_its_route_first():
    """The toolbox's UpdateQueue (what every MCP client puts updates on): the route
    (the broker) sees each update first; the root gets only those it wants too."""
    from agentd.mcp.client.updates import UpdateQueue

    q = UpdateQueue()
    q.put_nowait(("a", "mem://1"))  # no route yet: the root's
    seen: list[tuple[str, str]] = []

    def route(server: str, uri: str) -> bool:
        seen.append((server, uri))
        return uri != "mem://children-only"

    q.route = route
    q.put_nowait(("a", "mem://children-only"))
    await q.put(("b", "mem://2"))
    assert seen == [("a", "mem://children-only"), ("b", "mem://2")]
    assert [q.get_nowait() for _ in range(q.qsize())] == [("a", "mem://1"), ("b", "mem://2")]
