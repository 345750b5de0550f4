"""One durable worker (`--journal`): real agentd processes killed and started again.

A reactive worker serves its self-MCP; the official SDK client spawns async runs
through it; the model is the test's gateway (tests/support/gateway.py) and the
tools an official-SDK server whose calls wait for the test and count themselves
(tests/support/gated_tools.py). The worker is SIGKILLed (or SIGTERMed) while a
run waits on the gateway or on a tool, then started again on the same journal:
what the journal recorded is replayed (the gateway and the server see each
recorded request once), what was in flight follows the fault policy, and
results, reads and subscriptions answer across the restart.

Every wait is on a log line, an event the gateway or the server sets, or a
status polled through the worker (`waiting.until`); nothing is timed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import peers
import pytest
from agentd_proc import Agentd, start_agentd
from gateway import Gateway, Reply
from waiting import until

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")
from gated_tools import GatedTools  # noqa: E402
from mcp import Client  # noqa: E402

from agentd.journal.store import Broken, Journal, Loaded, run_path  # noqa: E402

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

INTERRUPTED = "may or may not have run"


def instruction(body: dict) -> str:
    return next((m["content"] for m in body["messages"] if m["role"] == "user"), "")


def turn(body: dict) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def tool_texts(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


class Model:
    """The gateway's script by job (the instruction's last words) and turn, counting
    the requests of each (job, turn) it is asked."""

    def __init__(self, jobs: dict[str, Callable[[dict], Reply]]) -> None:
        self.jobs = jobs
        self.seen: Counter[tuple[str, int]] = Counter()
        self.bodies: dict[tuple[str, int], list[dict]] = {}

    def __call__(self, body: dict) -> Reply:
        text = instruction(body)
        for job, reply in self.jobs.items():
            if text.endswith(job):
                key = (job, turn(body))
                self.seen[key] += 1
                self.bodies.setdefault(key, []).append(body)
                return reply(body)
        return Reply.text("idle")  # the worker's own root, should it ever ask


def held(event: asyncio.Event, gate: asyncio.Event, content: str) -> Callable[[dict], Reply]:
    """The first request waits on `gate` (telling `event` it came); later ones answer."""
    def reply(body: dict) -> Reply:
        if not event.is_set():
            event.set()
            return Reply(content=content, gate=gate)
        return Reply.text(content)
    return reply


class Worker:
    """One worker's command line, started and stopped again on one journal and port."""

    def __init__(self, agentd_bin: str, gw: Gateway, journal: Path | None, *,
                 tools: GatedTools | None = None, drain: float | None = None,
                 a2a: bool = False) -> None:
        self.port = peers.free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.journal = journal
        self.bin = agentd_bin
        self.argv = ["--instruction", "worker", "--intelligence", gw.url, "--mode", "reactive",
                     "--subscribe", "file:///nowhere", "--serve-mcp",
                     f"http://127.0.0.1:{self.port}", "--log-format", "json"]
        if journal is not None:
            self.argv += ["--journal", str(journal)]
        if tools is not None:
            self.argv += ["--mcp", f"gated={tools.url}"]
        if drain is not None:
            self.argv += ["--drain-timeout", str(drain)]
        if a2a:
            self.argv += ["--features", "a2a", "--serve-a2a"]
        self.proc: Agentd | None = None

    async def start(self) -> Agentd:
        self.proc = await start_agentd(self.bin, self.argv)
        await self.proc.wait_for_event("mcp.serve.listening")
        return self.proc

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.signal(signal.SIGKILL)
        await asyncio.to_thread(self.proc.proc.wait)

    async def stop(self) -> int:
        assert self.proc is not None
        if self.proc.proc.poll() is None:
            self.proc.signal(signal.SIGTERM)
        return (await self.proc.done()).rc

    @contextlib.asynccontextmanager
    async def client(self, **options: Any) -> AsyncIterator[Client]:
        async with Client(self.url, mode="legacy", **options) as c:
            yield c


async def spawn(w: Worker, job: str) -> str:
    async with w.client() as c:
        r = await c.call_tool("subagent.spawn", {"instruction": job, "async": True})
        assert not r.is_error, r
        return str(r.structured_content["handle"])


async def finished(c: Client, handle: str) -> dict:
    """The run's state once it is terminal (its status polled through the worker)."""
    async def done() -> dict | None:
        body = (await c.call_tool("subagent.status", {"handle": handle})).structured_content
        return body if body and body.get("done") else None
    return await until(done, what=f"{handle} terminal")


async def on(event: asyncio.Event, what: str) -> None:
    try:
        async with asyncio.timeout(60):  # a hang guard, not an assertion of speed
            await event.wait()
    except TimeoutError:
        raise AssertionError(f"never happened: {what}") from None


async def subagent_counts(w: Worker) -> dict[str, float]:
    """`agentd_subagents_total` of the worker's /metrics, by status."""
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{w.port}/metrics") as r:
        assert r.status == 200
        text = await r.text()
    prefix = 'agentd_subagents_total{status="'
    return {line[len(prefix):].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith(prefix)}


async def loaded(journal: Path) -> list[Loaded | Broken]:
    """The journal as the next worker will find it (the worker has exited)."""
    j = Journal.open(str(journal))
    try:
        return await j.load()
    finally:
        await j.aclose()


# ------------------------------------------------------------------ a: resumed
async def test_sigkill_mid_run_resumes_the_run_and_its_subagent(agentd_bin, tmp_path):
    reached, never = asyncio.Event(), asyncio.Event()

    def parent(body: dict) -> Reply:
        if turn(body) == 0:
            return Reply.tools(("agentd__subagent_spawn", {"instruction": "child job"}))
        return Reply.text("parent done: " + " | ".join(tool_texts(body)))

    def child(body: dict) -> Reply:
        if turn(body) == 0:
            return Reply.tools(("gated__echo", {"text": "before the crash"}))
        return held(reached, never, "child done")(body)

    model = Model({"parent job": parent, "child job": child})
    async with Gateway([model] * 50) as gw, GatedTools() as tools:
        w = Worker(agentd_bin, gw, tmp_path / "journal", tools=tools)
        await w.start()
        handle = await spawn(w, "parent job")
        await on(reached, "the subagent's second model request")
        await w.kill()
        again = await w.start()
        await again.wait_for_event("journal.resumed", handle=handle)
        async with w.client() as c:
            state = await finished(c, handle)
        counts = await subagent_counts(w)
        await w.stop()
    assert state["status"] == "completed", state
    assert "child done" in json.dumps(state["result"])
    # the new process drove the served run again (resumed, not spawned) and its
    # replay spawned the subagent again; both completed there
    assert counts == {"resumed": 1, "spawned": 1, "completed": 2}, counts
    # each recorded step's request reached the model (and the tool) once; the
    # subagent's request in flight at the kill was asked again (never answered)
    assert model.seen == {("parent job", 0): 1, ("child job", 0): 1, ("child job", 1): 2,
                          ("parent job", 1): 1}, model.seen
    assert tools.calls["echo"] == 1
    resumed_child = model.bodies[("child job", 1)][1]
    assert any("echo: before the crash" in t for t in tool_texts(resumed_child))


# ------------------------------------------------------------ b: the call in flight
@pytest.mark.parametrize("tool", ["charge", "lookup"])
async def test_a_tool_call_in_flight_at_a_sigkill(agentd_bin, tmp_path, tool):
    """`charge` (no annotations) is not sent again and the model is told so;
    `lookup` (idempotentHint) is sent again."""
    args = {"amount": 3} if tool == "charge" else {"key": "k1"}

    def job(body: dict) -> Reply:
        if turn(body) == 0:
            return Reply.tools((f"gated__{tool}", args))
        return Reply.text("job done")

    model = Model({"pay job": job})
    async with Gateway([model] * 20) as gw, GatedTools() as tools:
        w = Worker(agentd_bin, gw, tmp_path / "journal", tools=tools)
        await w.start()
        handle = await spawn(w, "pay job")
        await on(tools.arrived[tool], f"the {tool} call at the server")
        await w.kill()
        tools.arrived[tool].clear()
        again = await w.start()
        await again.wait_for_event("journal.in_flight", tool=f"gated__{tool}")
        if tool == "lookup":
            await on(tools.arrived[tool], "the lookup sent again")
            tools.release.set()
        async with w.client() as c:
            state = await finished(c, handle)
        await w.stop()
    assert state["status"] == "completed", state
    assert model.seen == {("pay job", 0): 1, ("pay job", 1): 1}, model.seen
    told = tool_texts(model.bodies[("pay job", 1)][0])
    if tool == "charge":
        assert tools.calls["charge"] == 1
        assert len(told) == 1 and INTERRUPTED in told[0] and "gated__charge" in told[0]
    else:
        assert tools.calls["lookup"] == 2
        assert len(told) == 1 and "lookup k1 done (call 2)" in told[0], told


# ----------------------------------------------- c: results and subscriptions
async def test_results_and_subscriptions_across_a_restart(agentd_bin, tmp_path):
    first, never, second, resume = (asyncio.Event() for _ in range(4))
    slow_calls = []

    def slow(body: dict) -> Reply:
        slow_calls.append(body)
        if len(slow_calls) == 1:  # in flight at the kill
            first.set()
            return Reply(content="slow result", gate=never)
        second.set()  # asked again by the resumed run: held until subscribed
        return Reply(content="slow result", gate=resume)

    model = Model({"quick job": lambda _b: Reply.text("quick result"), "slow job": slow})
    async with Gateway([model] * 20) as gw:
        w = Worker(agentd_bin, gw, tmp_path / "journal")
        await w.start()
        quick = await spawn(w, "quick job")
        async with w.client() as c:
            assert (await finished(c, quick))["status"] == "completed"
        slow_handle = await spawn(w, "slow job")
        await on(first, "the slow run's model request")
        await w.kill()
        await w.start()
        updates: list[str] = []
        updated = asyncio.Event()

        async def message(msg: Any) -> None:
            if getattr(msg, "method", None) == "notifications/resources/updated":
                updates.append(str(msg.params.uri))
                updated.set()

        async with w.client(message_handler=message) as c:
            state = (await c.call_tool("subagent.status", {"handle": quick})).structured_content
            assert state["status"] == "completed" and state["result"] == "quick result", state
            read = json.loads((await c.read_resource(f"agent://subagent/{quick}"))
                              .contents[0].text)
            assert read["done"] is True and read["result"] == "quick result", read
            await on(second, "the resumed run's model request")
            uri = f"agent://subagent/{slow_handle}"
            await c.subscribe_resource(uri)
            resume.set()
            await on(updated, "the resumed run's update")
            assert updates == [uri]
            read = json.loads((await c.read_resource(uri)).contents[0].text)
            assert read["done"] is True and read["status"] == "completed", read
            assert read["result"] == "slow result"
        await w.stop()
    assert model.seen[("quick job", 0)] == 1  # answered from the journal after the restart


async def test_an_a2a_task_outlives_a_restart(agentd_bin, tmp_path):
    """A task sent with the official A2A client (`--serve-a2a`) is a task again after
    a SIGKILL: GetTask finds it under its id, in the context the client gave it, and
    it completes."""
    peers.require_modules("a2a", "httpx")
    from a2a.client import ClientConfig, create_client
    from a2a.types import a2a_pb2 as pb

    reached, never = asyncio.Event(), asyncio.Event()
    model = Model({"the a2a job": held(reached, never, "a2a result")})
    async with Gateway([model] * 20) as gw:
        w = Worker(agentd_bin, gw, tmp_path / "journal", a2a=True)
        await w.start()
        base = f"http://127.0.0.1:{w.port}"
        client = await create_client(base, client_config=ClientConfig(streaming=False))
        req = pb.SendMessageRequest(message=pb.Message(
            message_id="m1", role=pb.Role.ROLE_USER, context_id="ctx-7",
            parts=[pb.Part(text="do the a2a job")]))
        req.configuration.return_immediately = True
        [ack] = [ev async for ev in client.send_message(req)]
        task_id = ack.task.id
        await on(reached, "the task's model request")
        await w.kill()
        again = await w.start()
        await again.wait_for_event("journal.resumed", handle=task_id)
        client = await create_client(base, client_config=ClientConfig(streaming=False))

        async def completed() -> Any:
            task = await client.get_task(pb.GetTaskRequest(id=task_id))
            return task if task.status.state == pb.TaskState.TASK_STATE_COMPLETED else None
        task = await until(completed, what="the task completed after the restart")
        await w.stop()
    assert (task.id, task.context_id) == (task_id, "ctx-7")
    assert task.artifacts[0].parts[0].text == "a2a result"
    assert model.seen[("the a2a job", 0)] == 2  # in flight at the kill: asked again


# ------------------------------------------------------------------- d: SIGTERM
DRAIN = 3.0


async def test_sigterm_leaves_a_long_run_journaled_for_the_next_worker(agentd_bin, tmp_path):
    reached, never = asyncio.Event(), asyncio.Event()
    model = Model({"long job": held(reached, never, "long result")})
    async with Gateway([model] * 20) as gw:
        w = Worker(agentd_bin, gw, tmp_path / "journal", drain=DRAIN)
        await w.start()
        handle = await spawn(w, "long job")
        await on(reached, "the long run's model request")
        rc = await w.stop()
        assert w.proc is not None and w.proc.events("journal.suspended"), w.proc.stderr()
        assert not [e for e in w.proc.events("selfmcp.terminal") if e["handle"] == handle]
        [run] = await loaded(tmp_path / "journal")
        assert isinstance(run, Loaded) and run.record.status == "running", run
        assert run.record.handle == handle
        await w.start()
        async with w.client() as c:
            state = await finished(c, handle)
        await w.stop()
    assert rc == 130, rc  # interrupted, after draining (docs/cli.md), as without one
    assert state["status"] == "completed" and state["result"] == "long result", state


async def test_sigterm_without_a_journal_cancels_the_run(agentd_bin, tmp_path):
    reached, never = asyncio.Event(), asyncio.Event()
    model = Model({"long job": held(reached, never, "long result")})
    async with Gateway([model] * 20) as gw:
        w = Worker(agentd_bin, gw, None, drain=DRAIN)
        await w.start()
        handle = await spawn(w, "long job")
        await on(reached, "the long run's model request")
        assert w.proc is not None
        w.proc.signal(signal.SIGTERM)
        end = await w.proc.done()
    assert end.rc == 130, end.stderr  # interrupted, after draining (docs/cli.md)
    ended = [e["status"] for e in end.events("selfmcp.terminal") if e["handle"] == handle]
    assert ended == ["cancelled"], end.logs


# ----------------------------------------------- e: broken files, two workers
async def test_a_broken_run_fails_with_its_reason_and_the_other_resumes(agentd_bin, tmp_path):
    reached_a, reached_b, never = asyncio.Event(), asyncio.Event(), asyncio.Event()

    def job_a(body: dict) -> Reply:  # a tool call first: rows in its journal
        if turn(body) == 0:
            return Reply.tools(("gated__echo", {"text": "a"}))
        return held(reached_a, never, "a result")(body)

    model = Model({"job a": job_a, "job b": held(reached_b, never, "b result")})
    journal = tmp_path / "journal"
    async with Gateway([model] * 20) as gw, GatedTools() as tools:
        w = Worker(agentd_bin, gw, journal, tools=tools)
        await w.start()
        a = await spawn(w, "job a")
        await on(reached_a, "run a's model request")
        b = await spawn(w, "job b")
        await on(reached_b, "run b's model request")
        await w.kill()
        # a row of run a's journal is altered by hand: its MAC no longer holds
        conn = sqlite3.connect(run_path(str(journal / "runs"), a))
        with conn:
            changed = conn.execute("UPDATE steps SET request = replace(request, 'job a', "
                                   "'job z') WHERE seq = 1").rowcount
        assert changed == 1
        conn.close()
        second = await w.start()
        async with w.client() as c:
            failed = await finished(c, a)
            done = await finished(c, b)
            for forged in (a + "9", "served.99", a.replace("served.", "served.0")):
                r = await c.call_tool("subagent.status", {"handle": forged})
                assert r.is_error and "unknown handle" in r.content[0].text, (forged, r)
        await w.stop()
    assert failed["status"] == "failed", failed
    assert "journal" in json.dumps(failed["result"]) and "MAC" in json.dumps(failed["result"])
    assert done["status"] == "completed" and done["result"] == "b result", done
    assert second.events("journal.broken")


async def test_a_run_journaled_under_another_key_ends_failed(agentd_bin, tmp_path):
    """The journal's key changed (here DIR/key; in a pool, --pool-key): the worker
    starts, and the run reads failed, naming the key, with no model call."""
    reached, never = asyncio.Event(), asyncio.Event()
    model = Model({"keyed job": held(reached, never, "never")})
    journal = tmp_path / "journal"
    async with Gateway([model] * 5) as gw:
        w = Worker(agentd_bin, gw, journal)
        await w.start()
        handle = await spawn(w, "keyed job")
        await on(reached, "the run's model request")
        await w.kill()
        (journal / "key").write_bytes(os.urandom(32))
        again = await w.start()
        async with w.client() as c:
            state = await finished(c, handle)
        await w.stop()
    assert state["status"] == "failed" and "another key" in json.dumps(state["result"]), state
    assert model.seen == {("keyed job", 0): 1}, model.seen
    assert [e["handle"] for e in again.events("journal.broken")] == [handle]


async def test_a_spawn_the_journal_cannot_record_is_refused(agentd_bin, tmp_path):
    """A served run that cannot be journaled is not started: its spawn is refused,
    naming --journal and the cause, and the worker goes on."""
    journal = tmp_path / "journal"
    model = Model({"fine job": lambda body: Reply.text("fine")})
    async with Gateway([model] * 5) as gw:
        w = Worker(agentd_bin, gw, journal)
        await w.start()
        os.mkdir(run_path(str(journal / "runs"), "served.1"))  # its file's name taken
        async with w.client() as c:
            refused = await c.call_tool("subagent.spawn", {"instruction": "fine job"})
            fine = await c.call_tool("subagent.spawn", {"instruction": "fine job"})
        await w.stop()
    assert refused.is_error, refused
    text = refused.content[0].text
    assert "spawn refused" in text and "--journal" in text and "served.1" in text, text
    assert fine.structured_content["result"] == "fine", fine


async def test_unreadable_run_file_is_set_aside_and_the_worker_starts(agentd_bin, tmp_path):
    journal = tmp_path / "journal"
    model = Model({})
    async with Gateway([model] * 5) as gw:
        w = Worker(agentd_bin, gw, journal)
        await w.start()
        await w.stop()
        garbage = journal / "runs" / "served.1-0000000000000000.sqlite"
        garbage.write_bytes(os.urandom(4096))
        started = await w.start()
        await w.stop()
    broken = started.events("journal.broken")
    assert broken and "corrupt" in broken[0]["reason"], broken
    files = os.listdir(journal / "runs")
    assert garbage.name not in files and garbage.name + ".broken" in files


async def test_a_second_worker_on_the_same_journal_exits_2(agentd_bin, tmp_path):
    async with Gateway([Model({})] * 5) as gw:
        first = Worker(agentd_bin, gw, tmp_path / "journal")
        holder = await first.start()
        second = Worker(agentd_bin, gw, tmp_path / "journal")
        proc = await start_agentd(agentd_bin, second.argv)
        end = await proc.done()
        await first.stop()
    assert end.rc == 2, end.stderr
    assert f"held by pid {holder.proc.pid}" in end.stderr


# ------------------------------------------------------------- a warm session
async def test_a_warm_session_resumes_with_its_later_turns(agentd_bin, tmp_path):
    """A warm session killed during its third turn comes back with all three: the
    messages sent to it are journaled and sent to it again, each turn's steps
    answered from the journal, the one in flight asked again; a fourth message
    then finds the whole conversation."""
    reached, never = asyncio.Event(), asyncio.Event()

    def session(body: dict) -> Reply:
        said = [m["content"] for m in body["messages"] if m["role"] == "user"]
        if len(said) == 3:
            return held(reached, never, "answer 3: " + said[-1])(body)
        answers = [m["content"] for m in body["messages"] if m["role"] == "assistant"]
        return Reply.text(f"answer {len(said)} after {answers}")

    model = Model({"warm job": session})
    async with Gateway([model] * 20) as gw:
        w = Worker(agentd_bin, gw, tmp_path / "journal")
        await w.start()
        async with w.client() as c:
            r = await c.call_tool("subagent.spawn", {"instruction": "warm job", "warm": True})
            handle = str(r.structured_content["handle"])
            second = await c.call_tool("subagent.send", {"handle": handle, "message": "two"})
            assert second.structured_content["result"].startswith("answer 2"), second

        async def send_third() -> None:
            async with w.client() as c:
                await c.call_tool("subagent.send", {"handle": handle, "message": "three"})
        third = asyncio.ensure_future(send_third())
        await on(reached, "the third turn's model request")
        await w.kill()
        with contextlib.suppress(Exception):  # its connection went with the worker
            await third
        again = await w.start()
        await again.wait_for_event("journal.resumed", handle=handle, turns=2)
        async with w.client() as c:
            fourth = await c.call_tool("subagent.send", {"handle": handle, "message": "four"})
        await w.stop()
    result = fourth.structured_content["result"]
    assert result.startswith("answer 4") and "answer 3: three" in result, fourth
    # the first two turns were answered from the journal; the third was asked again
    assert model.seen == {("warm job", 0): 1, ("warm job", 1): 1, ("warm job", 2): 2,
                          ("warm job", 3): 1}, model.seen
