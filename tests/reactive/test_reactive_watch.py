"""Reactive mode against real watched servers.

* an official-SDK low-level `Server` (tests/support/reactive_peers.py) with subscribable
  resources that it changes on request, and
* `@modelcontextprotocol/server-everything` over Streamable HTTP (its updates
  are opt-in through its `toggle-subscriber-updates` tool),

each reached through agentd's real `Toolbox`/`MCPClient`, driving the real
`ReactiveDaemon` and `Router`. The loop run of each wake is a recorder (the
agent loop itself is covered by tests/reactive/test_reactive_cli.py). Assertions are on
counts, ordering and the state each wake read — never on durations; timeouts
below only bound a wait for something that must happen.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import orjson
import peers
import pytest
from logcapture import events
from waiting import until

from agentd.agent.selftools import SelfTools
from agentd.config.model import ServerSpec
from agentd.mcp.client.toolbox import Toolbox, Unowned, owner_of
from agentd.reactive.awaiting import await_resource_tool, watch_updates
from agentd.reactive.daemon import ReactiveDaemon, Read, WakeRun
from agentd.reactive.router import Wake

WAIT = 60.0  # bound on waiting for an expected event (not an assertion)
A, B = "watch://counter/a", "watch://counter/b"




class Recorder:
    """The run of each wake: records what it was woken for and what it read."""

    def __init__(self, queue_subscribe: list[str] | None = None) -> None:
        self.wakes: list[tuple[Wake, dict[str, object]]] = []
        self.cond = asyncio.Condition()
        self.queue_subscribe = queue_subscribe or []

    async def __call__(self, wake: Wake, reads: list[Read]) -> WakeRun:
        seen: dict[str, object] = {}
        for r in reads:
            try:
                seen[r.uri] = json.loads(r.text).get("value")
            except ValueError:
                seen[r.uri] = r.text
        self.wakes.append((wake, seen))
        await asyncio.sleep(0.01)  # the loop is busy for a moment: updates coalesce
        async with self.cond:
            self.cond.notify_all()
        subscribe, self.queue_subscribe = self.queue_subscribe, []
        return WakeRun(status="completed", result=seen, steps=1, subscribe=subscribe)

    async def until(self, pred) -> None:
        async with asyncio.timeout(WAIT):
            async with self.cond:
                await self.cond.wait_for(pred)

    def last(self, uri: str) -> object:
        for _, seen in reversed(self.wakes):
            if uri in seen:
                return seen[uri]
        return None

    def updates(self, uri: str) -> int:
        return sum(w.counts.get(uri, 0) for w, _ in self.wakes)


async def ready(daemon: ReactiveDaemon) -> None:
    async with asyncio.timeout(WAIT):
        await daemon.ready.wait()


async def post(url: str) -> dict:
    async with aiohttp.ClientSession() as s, s.post(url) as r:
        return await r.json()


async def get(url: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return await r.json()


def sdk_peer(*args: str, port: int | None = None) -> peers.PeerProcess:
    return peers.python_peer("reactive_peers.py", *args, port=port)


def toolbox_for(ping_interval: float | None = None, **servers: str) -> Toolbox:
    return Toolbox([ServerSpec(name=n, url=u) for n, u in servers.items()],
                   run_id="test", ping_interval=ping_interval)


# -- the official-SDK server ---------------------------------------------------

async def test_updates_wake_and_burst_coalesces(logs) -> None:
    with sdk_peer() as srv:
        base = f"http://127.0.0.1:{srv.port}"
        rec = Recorder()
        stop = asyncio.Event()
        async with toolbox_for(watched=srv.url) as tb, asyncio.TaskGroup() as tg:
            daemon = ReactiveDaemon(tb, rec, debounce=0.05)  # the default window
            serving = tg.create_task(daemon.serve(stop, [A, B]))
            await ready(daemon)
            # one update: one wake, which read the new state fresh
            await post(f"{base}/bump?uri={A}&times=1")
            await rec.until(lambda: rec.last(A) == 1)
            assert len(rec.wakes) == 1 and rec.wakes[0][0].counts == {A: 1}
            # a burst of 1,000 on one URI: a few wakes, the last sees the final state
            await post(f"{base}/bump?uri={A}&times=1000")
            await rec.until(lambda: rec.last(A) == 1001 and rec.updates(A) == 1001)
            burst = rec.wakes[1:]
            assert 1 <= len(burst) <= 20, [w.counts for w, _ in burst]
            assert burst[-1][1][A] == 1001
            assert [s[A] for _, s in burst] == sorted(s[A] for _, s in burst)
            stop.set()
        result = serving.result()
        assert result.status == "interrupted"
        assert result.steps == len(rec.wakes)
        stats = await get(f"{base}/stats")
        assert stats["wire"].get("resources/subscribe") == 2
    wakes = events(logs, "reactive.wake")
    assert sum(w["coalesced"] for w in wakes) == 1001
    assert all(w["uris"] == [A] for w in wakes)
    assert [e["uri"] for e in events(logs, "reactive.subscribed")] == [A, B]
    assert events(logs, "reactive.drained")


async def test_debounce_window_coalesces_across_uris(logs) -> None:
    with sdk_peer() as srv:
        base = f"http://127.0.0.1:{srv.port}"
        rec = Recorder()
        stop = asyncio.Event()
        async with toolbox_for(watched=srv.url) as tb, asyncio.TaskGroup() as tg:
            daemon = ReactiveDaemon(tb, rec, debounce=0.5)
            tg.create_task(daemon.serve(stop, [A, B]))
            await ready(daemon)
            for _ in range(5):
                await post(f"{base}/bump?uri={A}&times=20")
                await post(f"{base}/bump?uri={B}&times=20")
            await rec.until(lambda: rec.updates(A) == 100 and rec.updates(B) == 100)
            assert rec.last(A) == 100 and rec.last(B) == 100
            # 200 updates on two URIs, debounced: far fewer wakes, each names both
            assert len(rec.wakes) <= 5, [w.counts for w, _ in rec.wakes]
            assert set(rec.wakes[-1][0].uris) == {A, B}
            stop.set()


async def test_restart_loses_nothing(logs, tmp_path) -> None:
    state = tmp_path / "state.json"
    srv = sdk_peer("--state", str(state)).start()
    port = srv.port
    base = f"http://127.0.0.1:{port}"
    rec = Recorder()
    stop = asyncio.Event()
    try:
        async with toolbox_for(watched=srv.url) as tb, asyncio.TaskGroup() as tg:
            daemon = ReactiveDaemon(tb, rec, debounce=0.0)
            tg.create_task(daemon.serve(stop, [A, B]))
            await ready(daemon)
            await post(f"{base}/bump?uri={A}&times=3")
            # every notification accounted for (a wake may read 3 before the
            # 2nd and 3rd `updated` arrive: they then make another wake)
            await rec.until(lambda: rec.last(A) == 3 and rec.updates(A) == 3)
            before = len(rec.wakes)
            # the server goes down; both resources change while nobody listens
            await asyncio.to_thread(srv.kill)
            state.write_text(json.dumps({A: 42, B: 7}))
            srv = sdk_peer("--state", str(state), port=port)
            await asyncio.to_thread(srv.start)
            # re-subscribe + one synthesized `updated` per watched URI
            await rec.until(lambda: rec.last(A) == 42 and rec.last(B) == 7)
            after = rec.wakes[before:]
            per_uri = {u: sum(w.counts.get(u, 0) for w, _ in after) for u in (A, B)}
            assert per_uri == {A: 1, B: 1}
            stats = await get(f"{base}/stats")
            assert stats["wire"].get("resources/subscribe") == 2  # restored on the new server
            # and updates keep flowing after the restart
            await post(f"{base}/bump?uri={B}&times=1")
            await rec.until(lambda: rec.last(B) == 8)
            stop.set()
    finally:
        srv.stop()
    assert any(e["event"] == "mcp.reconnected"
               for e in map(orjson.loads, logs.getvalue().splitlines()))


async def test_server_without_subscribe_is_polled(logs) -> None:
    """No `resources.subscribe`: nothing on the wire, the URI is polled (logged
    once, `reactive.polling`), and a change read by a poll wakes the daemon."""
    with sdk_peer("--no-subscribe") as srv:
        base = f"http://127.0.0.1:{srv.port}"
        rec = Recorder()
        stop = asyncio.Event()
        async with toolbox_for(plain=srv.url) as tb, asyncio.TaskGroup() as tg:
            daemon = ReactiveDaemon(tb, rec, debounce=0.0, poll_interval=0.05)
            serving = tg.create_task(daemon.serve(stop, [A, "file:///nowhere"]))
            await ready(daemon)
            assert daemon.watch_report() == [{"uri": A, "server": "plain", "mode": "poll"}]
            await post(f"{base}/bump?uri={A}&times=5")
            await rec.until(lambda: rec.last(A) == 5)
            stats = await get(f"{base}/stats")
            stop.set()
        assert serving.result().status == "interrupted"
        assert "resources/subscribe" not in stats["wire"]
        assert stats["wire"].get("initialize") == 1
        assert stats["read"] >= 2  # the baseline, then the poll that saw the change
    assert all(set(w.uris) == {A} for w, _ in rec.wakes)
    polling = events(logs, "reactive.polling")
    assert [(e["uri"], e["server"], e["cause"], e["level"]) for e in polling] == \
        [(A, "plain", "unsupported", "warning")]
    refused = events(logs, "reactive.refused")
    assert [(e["uri"], e["cause"]) for e in refused] == [("file:///nowhere", "unowned")]


async def test_polling_disabled_refuses_at_startup(logs) -> None:
    """`--poll-interval 0`: a URI that could only be polled ends the daemon at
    startup (exit 6), naming server, URI and reason; nothing on the wire."""
    from agentd.errors import ReactiveError, classify

    with sdk_peer("--no-subscribe") as srv:
        base = f"http://127.0.0.1:{srv.port}"
        async with toolbox_for(plain=srv.url) as tb:
            daemon = ReactiveDaemon(tb, Recorder(), poll_interval=0)
            with pytest.raises(ReactiveError) as info:
                await daemon.serve(asyncio.Event(), [A])
            stats = await get(f"{base}/stats")
    code, event, message = classify(info.value)
    assert (int(code), event) == (6, "reactive.refused")
    assert A in message and "'plain'" in message and "resources.subscribe" in message
    assert "resources/subscribe" not in stats["wire"]
    assert events(logs, "reactive.ready") == []


async def test_self_subscribe_follows_the_same_rule(logs) -> None:
    """A run's `agentd__subscribe` of a URI its server cannot push: polled
    (`origin=self`, counted towards the cap); with polling disabled, refused
    without ending the daemon."""
    with sdk_peer("--no-subscribe") as srv:
        async with toolbox_for(plain=srv.url) as tb:
            polling = ReactiveDaemon(tb, never_woken, poll_interval=60, max_subscriptions=1)
            await polling.apply_queued([A, B], [])
            assert polling.watch_report() == [{"uri": A, "server": "plain", "mode": "poll"}]
            assert polling.self_watched == {A}
            disabled = ReactiveDaemon(tb, never_woken, poll_interval=0)
            await disabled.apply_queued([A], [])
            assert disabled.watched == {}
            stats = await get(f"http://127.0.0.1:{srv.port}/stats")
    assert [(e["uri"], e["origin"]) for e in events(logs, "reactive.polling")] == [(A, "self")]
    refused = events(logs, "reactive.refused")
    assert [(e["uri"], e["cause"]) for e in refused] == [(B, "cap"), (A, "unsupported")]
    assert "--poll-interval 0" in refused[1]["reason"] and refused[1]["server"] == "plain"
    assert "resources/subscribe" not in stats["wire"]
    assert stats["read"] == 1  # the polled URI's baseline


async def test_self_subscribe_applied_after_run(logs) -> None:
    with sdk_peer() as srv:
        base = f"http://127.0.0.1:{srv.port}"
        rec = Recorder(queue_subscribe=[B])  # the first run queues `subscribe B`
        stop = asyncio.Event()
        async with toolbox_for(watched=srv.url) as tb, asyncio.TaskGroup() as tg:
            daemon = ReactiveDaemon(tb, rec, debounce=0.0)
            tg.create_task(daemon.serve(stop, [A]))
            await ready(daemon)
            await post(f"{base}/bump?uri={B}&times=1")  # not watched yet: no wake
            await post(f"{base}/bump?uri={A}&times=1")
            await rec.until(lambda: rec.last(A) == 1)
            await until(lambda: B in daemon.watched)
            await post(f"{base}/bump?uri={B}&times=1")
            await rec.until(lambda: rec.last(B) == 2)
            stop.set()
    assert [set(w.uris) for w, _ in rec.wakes] == [{A}, {B}]
    subs = events(logs, "reactive.subscribed")
    assert [(e["uri"], e["origin"]) for e in subs] == [(A, "flag"), (B, "self")]


async def test_no_servers_stays_up_until_stopped(logs) -> None:
    """The spec's worker: `--subscribe file:///nowhere` and no --mcp."""
    rec = Recorder()
    stop = asyncio.Event()
    async with Toolbox([], run_id="t") as tb, asyncio.TaskGroup() as tg:
        daemon = ReactiveDaemon(tb, rec, debounce=0.0)
        serving = tg.create_task(daemon.serve(stop, ["file:///nowhere"]))
        await ready(daemon)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not serving.done()  # still up: it only ends when signalled
        stop.set()
    assert serving.result().status == "interrupted"
    unowned = events(logs, "reactive.refused")
    assert unowned and unowned[0]["uri"] == "file:///nowhere"
    assert unowned[0]["level"] == "warning" and unowned[0]["cause"] == "unowned"


# -- server-everything -----------------------------------------------------------

EVERYTHING_DOCS = ("demo://resource/static/document/architecture.md",
                   "demo://resource/static/document/features.md")


def everything_peer(port: int | None = None) -> peers.PeerProcess:
    bin_dir = peers.ensure_npm_peers("mcp-server-everything", "node")
    port = port or peers.free_port()
    return peers.PeerProcess([str(bin_dir / "mcp-server-everything"), "streamableHttp"], port,
                             env=peers.npm_env({"PORT": str(port)}))


async def test_everything_updates_wake_coalesce_and_survive_restart(logs) -> None:
    srv = everything_peer().start()
    port = srv.port
    rec = Recorder()
    stop = asyncio.Event()
    try:
        # server-everything answers an unknown session with 400 (not 404) and keeps
        # no state across the restart: the client notices through its pings
        # (three missed -> stale -> new session), then restores the subscriptions.
        async with toolbox_for(everything=srv.url, ping_interval=0.5) as tb, \
                asyncio.TaskGroup() as tg:
            listed = {r.uri for r in tb.resources}
            assert set(EVERYTHING_DOCS) <= listed
            daemon = ReactiveDaemon(tb, rec, debounce=0.2)
            tg.create_task(daemon.serve(stop, EVERYTHING_DOCS))
            await ready(daemon)
            # opt in: the server sends `updated` for both URIs at once (then every 5 s)
            toggle = next(n for n in tb.tools if n.endswith("toggle-subscriber-updates"))
            obs = await tb.call(toggle, {})
            assert not obs.is_error and "Started" in obs.text
            await rec.until(lambda: len(rec.wakes) >= 1)
            first, seen = rec.wakes[0]
            # both URIs' updates, sent back to back, coalesced into one debounced wake
            assert set(first.uris) == set(EVERYTHING_DOCS)
            assert all(seen[u] for u in EVERYTHING_DOCS)  # read fresh: the documents
            # opt out again, so only the restart's synthesized updates follow
            obs = await tb.call(toggle, {})
            assert "Stopped" in obs.text
            # restart: the new process knows nothing of us; the client re-initializes,
            # re-subscribes and synthesizes one `updated` per watched URI
            before = len(rec.wakes)
            await asyncio.to_thread(srv.kill)
            srv = everything_peer(port)
            await asyncio.to_thread(srv.start)
            await rec.until(lambda: sum(len(w.uris) for w, _ in rec.wakes[before:]) >= 2)
            after = rec.wakes[before:]
            per_uri = {u: sum(w.counts.get(u, 0) for w, _ in after) for u in EVERYTHING_DOCS}
            assert per_uri == {u: 1 for u in EVERYTHING_DOCS}
            stop.set()
    finally:
        srv.stop()


async def test_await_resource_wakes_on_update_and_times_out(logs) -> None:
    from agentd.reactive.awaiting import await_resource, watch_updates

    with sdk_peer() as srv:
        base = f"http://127.0.0.1:{srv.port}"
        async with toolbox_for(watched=srv.url) as tb, watch_updates(tb) as waiters, \
                asyncio.TaskGroup() as tg:
            client = tb.clients["watched"]
            waiting = tg.create_task(await_resource(tb, waiters, A, 60))
            await until(lambda: A in client.subscriptions and waiters.waiting(A))
            await post(f"{base}/bump?uri={A}&times=2")
            updated, obs = await waiting
            assert updated is True
            assert json.loads(obs.text)["value"] >= 1  # read fresh after the update
            assert A not in client.subscriptions  # its own subscription is dropped again
            # nothing changes B: the wait ends by its timeout, still with B's current state
            updated, obs = await await_resource(tb, waiters, B, 0.2)
            assert updated is False and json.loads(obs.text)["value"] == 0
        stats = await get(f"{base}/stats")
    assert stats["wire"].get("resources/subscribe") == 2
    assert stats["wire"].get("resources/unsubscribe") == 2
    assert [(e["uri"], e["updated"]) for e in events(logs, "reactive.await")] == \
        [(A, True), (B, False)]


async def test_overflowing_pending_set_resyncs_every_watched_uri(logs) -> None:
    """A router bounded to one pending URI: the second URI's updates are folded
    into `resync`, and the daemon then re-reads everything watched."""
    from agentd.reactive.router import Router

    with sdk_peer() as srv:
        base = f"http://127.0.0.1:{srv.port}"
        gate = asyncio.Event()
        rec = Recorder()

        async def slow(wake, reads):  # the first run holds the loop busy
            out = await rec(wake, reads)
            await gate.wait()
            return out

        stop = asyncio.Event()
        async with toolbox_for(watched=srv.url) as tb, asyncio.TaskGroup() as tg:
            daemon = ReactiveDaemon(tb, slow, router=Router(0.0, capacity=1))
            tg.create_task(daemon.serve(stop, [A, B]))
            await ready(daemon)
            await post(f"{base}/bump?uri={A}&times=1")
            await rec.until(lambda: len(rec.wakes) == 1)
            await post(f"{base}/bump?uri={A}&times=2")  # pending: A
            await post(f"{base}/bump?uri={B}&times=4")  # beyond capacity: resync
            await until(lambda: daemon.router.stats()["received"] == 7)
            gate.set()
            await rec.until(lambda: len(rec.wakes) == 2)
            stop.set()
    wake, seen = rec.wakes[1]
    assert wake.resync and wake.counts == {A: 2} and wake.overflow == 4
    assert seen == {A: 3, B: 4}  # both watched URIs read fresh


# -- one ownership rule (agentd.mcp.client.toolbox.owner_of) ------------------------------
# Two official-SDK servers both serve the counters without listing them; one
# advertises `resources.subscribe`, the other does not. For an unlisted URI
# nobody can tell the owner, so a read, a subscription and an await all answer
# the same ambiguity error naming both (no guess: the old daemon picked the
# subscribable one, the old toolbox tried them in turn). Naming the server
# with `server` makes each of them work. The one-server cases above keep
# today's behaviour.

AMBIGUOUS = (f"ambiguous resource {A}: no server lists it and 2 serve resources "
             "(plain, watched); name one with the 'server' argument")


@pytest.fixture(scope="module")
def unlisted():
    with peers.python_peer("reactive_peers.py", "--unlisted") as watched, \
            peers.python_peer("reactive_peers.py", "--unlisted", "--no-subscribe") as plain:
        yield watched, plain


def two_servers(watched, plain) -> Toolbox:
    return toolbox_for(watched=watched.url, plain=plain.url)


async def never_woken(wake, reads) -> WakeRun:  # the daemon's run: not reached here
    raise AssertionError("no wake expected")


async def test_unlisted_uri_on_two_resource_servers_is_one_error_everywhere(unlisted, logs):
    watched, plain = unlisted
    async with two_servers(watched, plain) as tb:
        assert tb.clients["watched"].capabilities.resources_subscribe
        assert not tb.clients["plain"].capabilities.resources_subscribe
        assert A not in [r.uri for r in tb.resources]
        # the rule itself, for every purpose
        for purpose in (False, True):
            refused = owner_of(A, tb.clients.values(), subscribe=purpose)
            assert isinstance(refused, Unowned) and refused.ambiguous
            assert refused.reason == AMBIGUOUS and refused.candidates == ("plain", "watched")
        # read: the self-tool's observation
        tools = SelfTools(resources=tb)
        read = await tools.call("agentd__read_resource", {"uri": A})
        assert read.is_error and read.text == AMBIGUOUS
        # subscribe: the toolbox declines and says why, the daemon logs it; nothing is sent
        assert await tb.subscribe(A) is False
        (declined,) = events(logs, "mcp.subscribe.no_owner")
        assert declined["reason"] == AMBIGUOUS and declined["candidates"] == ["plain", "watched"]
        daemon = ReactiveDaemon(tb, never_woken, debounce=0.0)
        queued = await tools.call("agentd__subscribe", {"uri": A})
        assert not queued.is_error  # spec §2.4: queued, judged when applied
        await daemon.apply_queued(tools.subscriptions, tools.unsubscriptions,
                                  tools.subscription_servers)
        assert daemon.watched == {}
        (unowned,) = events(logs, "reactive.refused")
        assert unowned["uri"] == A and unowned["reason"] == AMBIGUOUS
        assert unowned["cause"] == "ambiguous"
        # await: the same error at once, not a wait for the timeout
        async with watch_updates(tb) as waiters:
            awaiting = await_resource_tool(tb, waiters)
            async with asyncio.timeout(WAIT):
                waited = await awaiting.handler({"uri": A, "timeout": 3600})
        assert waited.is_error and waited.text == AMBIGUOUS
    for srv in (watched, plain):
        stats = await get(f"http://127.0.0.1:{srv.port}/stats")
        assert "resources/subscribe" not in stats["wire"]
        assert "resources/read" not in stats["wire"]


async def test_naming_the_server_resolves_it(unlisted, logs):
    watched, plain = unlisted
    async with two_servers(watched, plain) as tb:
        tools = SelfTools(resources=tb)
        for name in ("watched", "plain"):
            read = await tools.call("agentd__read_resource", {"uri": A, "server": name})
            assert not read.is_error, read.text
            assert json.loads(read.text)["uri"] == A
        missing = await tools.call("agentd__read_resource", {"uri": A, "server": "nope"})
        assert missing.is_error and "no connected server is named 'nope'" in missing.text
        missing_owner = owner_of(A, tb.clients.values(), "nope")
        assert isinstance(missing_owner, Unowned) and not missing_owner.ambiguous

        # a self-subscribe naming its server reaches the daemon with that server
        queued = await tools.call("agentd__subscribe", {"uri": A, "server": "watched"})
        assert not queued.is_error and tools.subscription_servers == {A: "watched"}
        daemon = ReactiveDaemon(tb, never_woken, debounce=0.0)
        await daemon.apply_queued(tools.subscriptions, tools.unsubscriptions,
                                  tools.subscription_servers)
        assert daemon.watched == {A: "watched"}
        (sub,) = events(logs, "reactive.subscribed")
        assert sub["server"] == "watched" and sub["owner"] == "named"
        await daemon.unsubscribe(A)
        # naming the server that cannot subscribe: its owner is known, so it is polled
        assert await daemon.subscribe(A, server="plain")
        (polled,) = events(logs, "reactive.polling")
        assert polled["server"] == "plain" and polled["cause"] == "unsupported"
        assert daemon.modes == {A: "poll"}
        await daemon.unsubscribe(A)
        # the flag's form, `--subscribe server=URI` (like `--mcp name=<endpoint>`)
        await daemon.start([f"watched={A}"])
        assert daemon.watched == {A: "watched"}
        await daemon.unsubscribe(A)

        # await naming the subscribable server: woken by its update, then read fresh
        async with watch_updates(tb) as waiters, asyncio.TaskGroup() as tg:
            awaiting = await_resource_tool(tb, waiters)
            task = tg.create_task(awaiting.handler({"uri": A, "timeout": WAIT,
                                                    "server": "watched"}))
            await until(lambda: A in tb.clients["watched"].subscriptions)
            bumped = await post(f"http://127.0.0.1:{watched.port}/bump?uri={A}&times=1")
            waited = await task
        assert not waited.is_error, waited.text
        assert waited.structured == {"uri": A, "updated": True, "watched": True}
        assert f'"value": {bumped["value"]}' in waited.text
        assert A not in tb.clients["watched"].subscriptions  # the await's own, dropped


async def test_one_resource_server_owns_what_it_does_not_list(unlisted):
    """The unambiguous case keeps today's rule: the only server serving resources."""
    watched, _ = unlisted
    async with toolbox_for(watched=watched.url) as tb:
        assert tb.owner(A).name == "watched"
        read = await tb.read_resource(A)
        assert not read.is_error and json.loads(read.text)["uri"] == A


async def test_an_ambiguous_subscribe_flag_refuses_at_startup(unlisted, logs) -> None:
    """`--subscribe URI` that two resource servers could own, naming neither: the
    daemon refuses to start (exit 6, the reason says to name the server) rather
    than run watching nothing; `server=URI` then watches it."""
    from agentd.errors import ReactiveError, classify

    watched, plain = unlisted
    async with two_servers(watched, plain) as tb:
        daemon = ReactiveDaemon(tb, never_woken, debounce=0.0)
        with pytest.raises(ReactiveError) as info:
            await daemon.serve(asyncio.Event(), [A])
        assert daemon.watched == {}
        named = ReactiveDaemon(tb, never_woken, debounce=0.0)
        await named.start([f"watched={A}"])
        assert named.watch_report() == [{"uri": A, "server": "watched", "mode": "subscribe"}]
        await named.unsubscribe(A)
    code, event, message = classify(info.value)
    assert (int(code), event) == (6, "reactive.refused")
    assert message == f"cannot watch {A}: {AMBIGUOUS}"
    # only the named daemon got ready; the refused one said nothing else
    assert [e["watched"] for e in events(logs, "reactive.ready")] == [[A]]
    assert events(logs, "reactive.refused") == []
