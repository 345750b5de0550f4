"""Issue 42's headline, with real processes: three pool workers, each with a
journal of its own (``--journal``), behind HAProxy (checking each worker's own
``/readyz``), the model a test-owned gateway, and the tools a real MCP server
(the official SDK's, tests/support/sdk_servers.py).

Every run is two model steps around one tool call: the model asks for
``srv__echo``, then answers with what the tool said. The final answer is held
by the gateway until the test releases the run, so runs outlast the workers'
``--drain-timeout`` by as long as the test wants, with no clock involved.

Beside the rollout through the balancer: a run one worker owns, watched and
asked about through another (its peer) while the owner is SIGTERMed or
SIGKILLed and started again on its journal.

Each worker process gets a model name of its own (``--model m-<id>-<n>``), so
every request body the gateway saw names the process that sent it: a step a
process sent twice, or a recorded step sent again after a restart, is seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections import defaultdict
from typing import Any

import peers
import pytest
from gateway import Gateway, Reply
from pool_harness import (
    IDS,
    TOKENS,
    ClientSession,
    Pool,
    balancer,
    httpx2,
    mcp,
    sdk_client,
    streamable_http_client,
)
from waiting import until

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(600)]

from mcp.client.subscriptions import ResourceUpdated  # noqa: E402  (the SDK: pool_harness)
from mcp.shared.exceptions import MCPError  # noqa: E402

DRAIN = "2"  # --drain-timeout: every held run outlasts it
TAG = re.compile(r"\[run (\d+)\]")
# the one refusal a client retries (docs/operations.md "Durable runs"): the owner is down
RETRYABLE = "is not answering (restarting?); its runs are journaled there: retry"


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class Model:
    """The gateway's answers, by the run's instruction: step 1 asks for the echo
    tool, step 2 answers with its result once the test releases the run. Every
    request is kept as (run, step, the model name = the worker process)."""

    def __init__(self) -> None:
        self.released: dict[str, asyncio.Event] = {}
        self.asked: list[tuple[str, int, str]] = []

    def release(self, tag: str) -> None:
        self.released.setdefault(tag, asyncio.Event()).set()

    def done(self, tag: str) -> bool:
        """Is run ``tag`` released (its last answer given)?"""
        return tag in self.released and self.released[tag].is_set()

    def steps(self, tag: str, step: int) -> list[str]:
        """The processes that asked run ``tag``'s ``step``, in order."""
        return [who for t, s, who in self.asked if (t, s) == (tag, step)]

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        found = TAG.search(" ".join(_text(m.get("content")) for m in messages
                                    if m["role"] == "user"))
        if found is None:  # the worker's own reactive root, if it ever asks
            return Reply.text("idle")
        tag = found.group(1)
        step = 1 + sum(1 for m in messages if m["role"] == "assistant")
        self.asked.append((tag, step, body["model"]))
        if step == 1:
            return Reply.tools(("srv__echo", {"text": f"echo of {tag}"}))
        told = [_text(m.get("content")) for m in messages if m["role"] == "tool"]
        echoed = re.search(r"echo of \d+", told[-1])  # inside agentd's untrusted frame
        return Reply(content=f"run {tag} finished after {echoed and echoed.group(0)!r}",
                     gate=self.released.setdefault(tag, asyncio.Event()))


def expected(tag: str) -> str:
    return f"run {tag} finished after 'echo of {tag}'"


def _extra(pool: Pool, wid: str, srv_url: str) -> tuple[str, ...]:
    return ("--model", f"m-{wid}-{pool.starts[wid]}", "--mcp", f"srv={srv_url}",
            "--drain-timeout", DRAIN)


REFUSED: list[str] = []  # the retryable refusals the client was answered


async def _status(c, handle: str) -> dict[str, Any]:
    """One status through the balancer, retrying the documented refusal only."""
    async def once() -> dict[str, Any] | None:
        r = await c.call_tool("subagent.status", {"handle": handle})
        if r.is_error:
            text = r.content[0].text
            assert RETRYABLE in text, f"{handle}: {text}"
            REFUSED.append(handle)
            return None
        return r.structured_content
    return await until(once, limit=120, what=f"{handle} answered")


async def _spawn(c, model: Model, tag: str, runs: dict[str, str]) -> None:
    r = await c.call_tool("subagent.spawn", {"instruction": f"[run {tag}] echo then answer",
                                             "async": True})
    assert not r.is_error, r.content[0].text
    runs[tag] = r.structured_content["handle"]


def _owner(handle: str) -> str:
    return handle.split(".")[1]


@contextlib.asynccontextmanager
async def _polling(c, runs: dict[str, str], seen: dict[str, set[str]]):
    """The client polling every run through the balancer meanwhile; every status
    seen is kept (a `failed`, an unknown handle or another error fails the test)."""
    stop = asyncio.Event()

    async def poll() -> None:
        while not stop.is_set():
            for tag, handle in list(runs.items()):
                state = await _status(c, handle)
                seen[tag].add(state["status"])
                assert state["status"] in ("running", "completed"), state
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)  # pacing, not a synchronisation

    task = asyncio.create_task(poll())
    try:
        yield
    finally:
        stop.set()
        await task


async def _done(c, handle: str) -> dict[str, Any] | None:
    state = await _status(c, handle)
    return state if state["status"] != "running" else None


@contextlib.asynccontextmanager
async def _journaled_pool(agentd_bin, tmp_path, model: Model):
    """Three journaled workers on the gateway and the SDK server, behind HAProxy:
    (pool, balancer URL, the SDK server)."""
    with peers.python_peer("sdk_servers.py") as srv:
        async with Gateway([model] * 2000) as gw:
            pool = Pool(tmp_path, intelligence=gw.url, journals=True)
            try:
                for wid in IDS:
                    await asyncio.to_thread(pool.start, agentd_bin, wid, 0,
                                            _extra(pool, wid, srv.url))
                await asyncio.to_thread(pool.formed)  # a draining worker places its spawns
                with balancer(tmp_path, pool.ports, checks=True) as url:
                    yield pool, url, srv
            finally:
                pool.stop()


async def test_a_rolling_restart_loses_no_run(agentd_bin, tmp_path) -> None:
    model = Model()
    runs: dict[str, str] = {}  # tag -> pool handle
    seen: dict[str, set[str]] = defaultdict(set)
    suspended = 0
    REFUSED.clear()
    async with _journaled_pool(agentd_bin, tmp_path, model) as (pool, url, srv):
        async with sdk_client(url, "alice") as c:
            n = 0
            for wid in IDS:
                for _ in range(3):  # round robin: runs on every worker
                    n += 1
                    await _spawn(c, model, str(n), runs)
                # every run not yet released holds its final answer
                await until(lambda: all(
                    model.steps(t, 2) and model.steps(t, 2)[-1].startswith(
                        f"m-{_owner(h)}-{pool.starts[_owner(h)] - 1}")
                    for t, h in runs.items() if not model.done(t)),
                    what="every held run at its last step")
                held = [t for t, h in runs.items()
                        if _owner(h) == wid and not model.done(t)]
                async with _polling(c, runs, seen):
                    restart = asyncio.create_task(asyncio.to_thread(
                        pool.restart, agentd_bin, wid,
                        _extra(pool, wid, srv.url)))
                    for _ in range(2):  # spawns go on while it restarts
                        n += 1
                        await _spawn(c, model, str(n), runs)
                    await restart
                    suspended += len(held)
                    # the resumed runs ask their last step again
                    await until(lambda wid=wid, held=held: all(
                        model.steps(t, 2)[-1] == f"m-{wid}-{pool.starts[wid] - 1}"
                        for t in held), what=f"{wid}'s runs resumed")
                for t in held:  # the resumed runs may end now
                    model.release(t)
            assert {_owner(h) for h in runs.values()} == set(IDS), runs
            for t in runs:
                model.release(t)
            ends = {}
            for t, h in runs.items():
                ends[t] = await until(lambda h=h: _done(c, h), limit=120,
                                      what=f"run {t} ended")
        for t, state in ends.items():
            assert state["status"] == "completed", state
            assert state["result"] == expected(t), state
            assert "failed" not in seen[t]
        # the model: each recorded step asked once; a last step held when its
        # owner stopped asked again by the next process only
        for t, h in runs.items():
            assert len(model.steps(t, 1)) == 1, (t, model.steps(t, 1))
            last = model.steps(t, 2)
            assert len(last) == len(set(last)), (t, last)
            assert all(who.startswith(f"m-{_owner(h)}-") for who in last), (t, last)
        # the tool: each call made once (a resumed run's is answered from its journal)
        async with httpx2.AsyncClient() as http:
            stats = (await http.get(f"http://127.0.0.1:{srv.port}/stats")).json()
        assert stats["calls"] == len(runs), stats
        # the held runs were suspended and resumed (at least; one spawned on a
        # worker as its SIGTERM came may have been too)
        resumed = [e for w in pool.workers.values() for e in w.events("journal.resumed")]
        assert len(resumed) >= suspended >= len(IDS), (resumed, suspended)
        assert REFUSED, "the client never met a restarting owner"
        for w in [*pool.retired, *pool.workers.values()]:
            assert not w.events("run.drain.timeout"), w.err
            assert not any("worker lost" in json.dumps(e) for e in w.events())

async def test_a_result_is_read_through_the_balancer_after_its_owner_restarted(
        agentd_bin, tmp_path) -> None:
    model = Model()
    runs: dict[str, str] = {}
    async with _journaled_pool(agentd_bin, tmp_path, model) as (pool, url, srv):
        async with sdk_client(url, "alice") as c:
            for n in range(1, 4):
                model.release(str(n))  # these answer at once
                await _spawn(c, model, str(n), runs)
            for t, h in runs.items():
                state = await until(lambda h=h: _done(c, h), limit=120, what=f"run {t} ended")
                assert state["status"] == "completed", state
            for wid in sorted({_owner(h) for h in runs.values()}):
                await asyncio.to_thread(pool.restart, agentd_bin, wid,
                                        _extra(pool, wid, srv.url))
            for _ in range(2):  # through whichever worker the balancer picks
                for t, h in runs.items():
                    state = await _status(c, h)
                    assert state["status"] == "completed", state
                    assert state["result"] == expected(t), state
                    body = json.loads((await c.read_resource(
                        f"agent://subagent/{h}")).contents[0].text)
                    assert body["handle"] == h and body["result"] == expected(t), body
            forged = h[:-1] + ("a" if h[-1] != "a" else "b")  # stays unknown everywhere
            for _ in IDS:
                r = await c.call_tool("subagent.status", {"handle": forged})
                assert r.is_error and r.content[0].text == f"unknown handle: {forged}"
        async with sdk_client(url, "bob") as b:  # and another principal's
            r = await b.call_tool("subagent.status", {"handle": h})
            assert r.is_error and r.content[0].text == f"unknown handle: {h}"
    assert all(len(model.steps(t, s)) == 1 for t in runs for s in (1, 2))  # nothing re-run


async def test_a_restart_under_another_pool_key_fails_its_journaled_runs(
        agentd_bin, tmp_path) -> None:
    model = Model()
    runs: dict[str, str] = {}
    async with _journaled_pool(agentd_bin, tmp_path, model) as (pool, url, srv):
        async with sdk_client(pool.url("w3"), "alice") as direct:
            for n in range(1, 3):
                await _spawn(direct, model, str(n), runs)
        await until(lambda: all(model.steps(t, 2) for t in runs), what="both runs held")
        other = "another-pool-key-for-tests-0c4e"
        w3 = await asyncio.to_thread(pool.restart, agentd_bin, "w3",
                                     _extra(pool, "w3", srv.url), key=other)
        broken = w3.events("journal.broken")
        assert len(broken) == len(runs), broken
        for line in broken:
            assert line["level"] == "error"
            assert "written under another key (another --pool-key" in line["reason"], line
        for t in runs:
            model.release(t)
        async with sdk_client(pool.url("w3"), "alice") as direct, \
                sdk_client(url, "alice") as c:
            for h in runs.values():
                r = await direct.call_tool("subagent.status", {"handle": h})
                assert r.is_error and r.content[0].text == f"unknown handle: {h}", r
                for _ in IDS:  # through the balancer: never completed (its peers, on
                    # the pool's key, are refused by w3, or w3 does not know it)
                    r = await c.call_tool("subagent.status", {"handle": h})
                    assert r.is_error, r.structured_content
        assert not any(who == "m-w3-1" for t in runs for who in model.steps(t, 2))
        assert not w3.events("journal.resumed")


async def _peer_seen(pool: Pool, wid: str, peer: str) -> None:
    """Until ``wid`` has had ``peer``'s probe answer (so it knows the peer is durable)."""
    await asyncio.to_thread(pool.workers[wid].wait_event, "pool.peer",
                            lambda r: r.get("peer") == peer and r.get("status") == "alive")


@contextlib.asynccontextmanager
async def _subscriber(url: str, heard: list[tuple[str, bool]], model: Model, tag: str):
    """A 2025-11-25 session (the official SDK's ClientSession) on ``url``; each
    ``updated`` it gets is kept with whether run ``tag`` was released by then."""
    async def on_message(message) -> None:
        if isinstance(message, mcp.types.ResourceUpdatedNotification):
            heard.append((str(message.params.uri), model.done(tag)))

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS['alice']}"},
                                  timeout=60) as http, \
            streamable_http_client(url, http_client=http) as streams, \
            ClientSession(streams[0], streams[1], message_handler=on_message) as session:
        await session.initialize()
        yield session


async def _tool_calls(srv) -> int:
    """How many tool calls the SDK server has answered."""
    async with httpx2.AsyncClient() as http:
        return (await http.get(f"http://127.0.0.1:{srv.port}/stats")).json()["calls"]


async def _body(session, uri: str) -> dict[str, Any]:
    return json.loads((await session.read_resource(uri)).contents[0].text)


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed:UserWarning")  # 2025-11-25's
async def test_a_subscriber_on_a_peer_hears_the_end_after_the_owner_restarted(
        agentd_bin, tmp_path) -> None:
    """A run owned by w2, subscribed (2025-11-25) and listened for (2026-07-28)
    through w1; w2 is SIGTERMed with the run held (suspended, not ended) and
    started again on its journal: the subscribers hear nothing until the run
    really ends, then its ``updated``, and the read through w1 is the result."""
    model = Model()
    runs: dict[str, str] = {}
    heard: list[tuple[str, bool]] = []  # (uri, released when heard) of the 2025 session
    async with _journaled_pool(agentd_bin, tmp_path, model) as (pool, _, srv):
        await _peer_seen(pool, "w1", "w2")
        async with sdk_client(pool.url("w2"), "alice") as direct:
            await _spawn(direct, model, "1", runs)
        uri = f"agent://subagent/{runs['1']}"
        assert _owner(runs["1"]) == "w2", runs
        await until(lambda: model.steps("1", 2), what="the run held at its last step")

        async def listened(sub) -> tuple[Any, bool]:
            event = await anext(aiter(sub))
            return event, model.done("1")

        async with _subscriber(pool.url("w1"), heard, model, "1") as s1, \
                sdk_client(pool.url("w1"), "alice") as c1, \
                c1.listen(resource_subscriptions=[uri]) as sub:
            await s1.subscribe_resource(uri)
            assert sub.honored.resource_subscriptions == [uri]
            first = asyncio.create_task(listened(sub))
            await asyncio.to_thread(pool.restart, agentd_bin, "w2", _extra(pool, "w2", srv.url))
            await until(lambda: model.steps("1", 2)[-1] == "m-w2-1", what="the run resumed")
            # through the stop and the restart: no terminal `updated` on either path
            if heard or first.done():
                raise AssertionError(f"an update during the restart ({heard}, "
                                     f"{first.done() and first.result()}): "
                                     f"{await _body(s1, uri)}")
            state = await _body(s1, uri)
            assert state["status"] == "running", state
            model.release("1")
            async with asyncio.timeout(60):
                event, released = await first
            assert event == ResourceUpdated(uri=uri) and released
            await until(lambda: heard, what="the 2025-11-25 session's updated")
            assert heard[0] == (uri, True), heard
            body = await _body(s1, uri)
            assert body["handle"] == runs["1"], body
            assert (body["status"], body["result"]) == ("completed", expected("1")), body
        assert await _tool_calls(srv) == 1  # made once: the resumed run's from its journal
    assert pool.workers["w2"].events("journal.resumed")
    assert [e["runs"] for e in pool.retired[0].events("journal.suspended")] == [1]
    assert len(model.steps("1", 1)) == 1 and model.steps("1", 2) == ["m-w2-0", "m-w2-1"]
    for w in [*pool.retired, *pool.workers.values()]:
        assert not any("worker lost" in json.dumps(e) for e in w.events()), w.err


async def test_a_sigkilled_owner_is_retryable_through_a_peer_and_its_run_completes(
        agentd_bin, tmp_path) -> None:
    """A run on w2 with its last model step in flight; w2 is SIGKILLed. Meanwhile a
    status through w1 is the documented retryable refusal (never `worker lost`,
    never unknown); w2 started again on its journal resumes the run, which
    completes, and the status through w1 reads it."""
    model = Model()
    runs: dict[str, str] = {}
    async with _journaled_pool(agentd_bin, tmp_path, model) as (pool, _, srv):
        await _peer_seen(pool, "w1", "w2")
        async with sdk_client(pool.url("w2"), "alice") as direct:
            await _spawn(direct, model, "1", runs)
        handle = runs["1"]
        assert _owner(handle) == "w2", runs
        await until(lambda: model.steps("1", 2), what="the run's last step in flight")
        killed = pool.workers["w2"]
        killed.proc.kill()
        await asyncio.to_thread(killed.proc.wait)
        pool.retired.append(killed)
        async with sdk_client(pool.url("w1"), "alice") as c1:
            r = await c1.call_tool("subagent.status", {"handle": handle})
            assert r.is_error, r.structured_content
            text = r.content[0].text
            assert RETRYABLE in text and "pool member w2 holding this run" in text, text
            with pytest.raises(MCPError) as read:  # a read too: refused, not "not found"
                await c1.read_resource(f"agent://subagent/{handle}")
            assert RETRYABLE in read.value.error.message, read.value.error
            # started again on its journal: the run resumes (its last step asked again)
            await asyncio.to_thread(pool.start, agentd_bin, "w2", pool.starts["w2"],
                                    _extra(pool, "w2", srv.url))
            await asyncio.to_thread(pool.ready, "w2")
            await until(lambda: model.steps("1", 2)[-1] == "m-w2-1", what="the run resumed")
            model.release("1")
            state = await until(lambda: _done(c1, handle), limit=120, what="the run ended")
        assert (state["status"], state["result"]) == ("completed", expected("1")), state
        assert await _tool_calls(srv) == 1  # made once: the resumed run's from its journal
    assert pool.workers["w2"].events("journal.resumed")
    assert len(model.steps("1", 1)) == 1 and model.steps("1", 2) == ["m-w2-0", "m-w2-1"]
    for w in [*pool.retired, *pool.workers.values()]:
        assert not any("worker lost" in json.dumps(e) for e in w.events()), w.err
