"""agentd's client at MCP 2026-07-28 against the official SDK 2.3 server (real peers).

Servers are ``tests/support/sdk_servers.py`` / ``tests/support/reactive_peers.py`` in
subprocesses on loopback: ``--era modern`` is the SDK serving 2026-07-28
statelessly (``server/discover``, ``subscriptions/listen``) beside 2025-11-25;
the default is a 2025-11-25-only server.  The same client code is pointed at
both and must pick the revision per server, with no flag.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import urllib.request

import pytest
from logcapture import events
from peers import python_peer, require_modules
from waiting import until

from agentd.config.model import ServerSpec
from agentd.mcp import MCPClient, Toolbox, ToolFault

MODERN = "2026-07-28"


@pytest.fixture(scope="module", autouse=True)
def _sdk_available():
    require_modules("mcp", "uvicorn", "starlette")


@pytest.fixture(scope="module")
def modern():
    with python_peer("sdk_servers.py", "--era", "modern", "--page-size", "4") as peer:
        yield peer


@pytest.fixture(scope="module")
def modern_json():
    with python_peer("sdk_servers.py", "--era", "modern", "--json") as peer:
        yield peer


@pytest.fixture(scope="module")
def legacy():
    with python_peer("sdk_servers.py") as peer:
        yield peer




def http(peer, path: str, method: str = "GET") -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{peer.port}{path}", method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def spec(peer, name="sdk", **kw) -> ServerSpec:
    return ServerSpec(name=name, url=peer.url, **kw)


# -- version selection ----------------------------------------------------------


async def test_version_selected_per_server_without_a_flag(modern, legacy, logs):
    async with Toolbox([spec(modern, "new"), spec(legacy, "old")], run_id="r",
                       ping_interval=None) as tb:
        new, old = tb.clients["new"], tb.clients["old"]
        assert (new.protocol_version, new.era) == (MODERN, "stateless")
        assert (old.protocol_version, old.era) == ("2025-11-25", "session")
        # both catalogues, qualified the same way
        assert "new__echo" in tb.tools and "old__echo" in tb.tools
        assert (await tb.call("new__echo", {"text": "n"})).text == "n"
        assert (await tb.call("old__echo", {"text": "o"})).text == "o"
    shakes = {e["server"]: e for e in events(logs, "mcp.handshake")}
    assert shakes["new"]["protocol_version"] == MODERN
    assert shakes["new"]["negotiated_by"] == "server/discover"
    assert shakes["new"]["server_info"]["name"] == "sdk-test-server"
    assert shakes["old"]["protocol_version"] == "2025-11-25"
    assert shakes["old"]["negotiated_by"] == "initialize"
    fallback = events(logs, "mcp.discover.fallback")
    assert [e["server"] for e in fallback] == ["old"]
    assert "400" in fallback[0]["reason"]


async def test_catalogue_at_2026_excludes_invalid_header_tools(modern, logs):
    async with MCPClient(spec(modern), ping_interval=None) as c:
        assert c.instructions == "Be kind to the tools."
        assert c.capabilities.tools_list_changed and c.capabilities.resources_subscribe
        # every page drained (4 a page); bad_header excluded, the others kept
        assert {"echo", "region", "ask_roots", "whoami", "grow"} <= set(c.tools)
        assert "bad_header" not in c.tools and "bad_header" in c.rejected_tools
        assert len(c.tools) == 14
        assert {r.uri for r in c.resources} == {"mem://greeting", "mem://blob", "mem://watched"}
        assert [t.uriTemplate for t in c.resource_templates] == ["mem://items/{id}"]
    rejected = events(logs, "mcp.tools.excluded")
    assert [(e["tool"], e["level"]) for e in rejected] == [("bad_header", "warning")]
    assert "items" in rejected[0]["reason"] or "reachable" in rejected[0]["reason"]


# -- stateless requests ----------------------------------------------------------


@pytest.mark.parametrize("server", ["modern", "modern_json"])
async def test_tool_calls_carry_the_request_meta(server, request):
    peer = request.getfixturevalue(server)
    async with MCPClient(spec(peer), run_id="run-7", ping_interval=None) as c:
        assert (await c.call_tool("echo", {"text": "hi"})).text == "hi"
        assert (await c.call_tool("add", '{"a": 2, "b": 40}')).text == "42"
        meta = json.loads((await c.call_tool("whoami")).text)
        assert meta["io.modelcontextprotocol/protocolVersion"] == MODERN
        assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
        assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "agentd"
        assert meta["io.modelcontextprotocol/run-id"] == "run-7"
        tp = meta["traceparent"]
        assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", tp)
        # the trace id is the run's: another connection of the same run shares it
        async with MCPClient(spec(peer), run_id="run-7", ping_interval=None) as c2:
            tp2 = json.loads((await c2.call_tool("whoami")).text)["traceparent"]
        assert tp2.split("-")[1] == tp.split("-")[1] and tp2 != tp
        fail = await c.call_tool("fail")
        assert fail.is_error and "no such file" in fail.text
        w = await c.call_tool("weather", {"city": "NYC"})
        assert w.structured == {"temperature": 22.5, "city": "NYC"}
        with pytest.raises(ToolFault) as bad:
            await c.call_tool("bad_weather")
        assert not bad.value.retryable
        with pytest.raises(ToolFault) as unknown:
            await c.call_tool("no_such_tool", {})
        assert not unknown.value.retryable


async def test_standard_and_x_mcp_header_headers(modern):
    async with MCPClient(spec(modern), ping_interval=None) as c:
        seen = json.loads((await c.call_tool("region", {"region": "us-west1",
                                                        "query": "q"})).text)
        assert seen == {"region": "us-west1", "method": "tools/call", "name": "region"}
        assert http(modern, "/headers")["mcp-param-region"] == "us-west1"
        # not header-safe: base64 sentinel (the SDK server decoded and compared it)
        seen = json.loads((await c.call_tool("region", {"region": "Grüße ",
                                                        "query": "q"})).text)
        raw = http(modern, "/headers")["mcp-param-region"]
        assert raw.startswith("=?base64?") and raw.endswith("?=")
        assert base64.b64decode(raw[9:-2]).decode() == "Grüße "
        # absent: the header is omitted (and the server accepts that)
        seen = json.loads((await c.call_tool("region", {"query": "q"})).text)
        assert seen["region"] is None and "mcp-param-region" not in http(modern, "/headers")


async def test_header_mismatch_relists_and_retries():
    """-32020: the tool's schema changed (no list_changed); re-list once, resend."""
    peer = python_peer("sdk_servers.py", "--era", "modern", "--tools-ttl", "3600000",
                       "--page-size", "20").start()
    try:
        async with MCPClient(spec(peer), ping_interval=None) as c:
            assert json.loads((await c.call_tool("tenant", {"tenant": "a"})).text) == \
                {"tenant": None}
            await asyncio.to_thread(http, peer, "/declare", "POST")
            version = c.tools_version  # (the SDK server calls its own tools/list to
            seen = json.loads((await c.call_tool("tenant", {"tenant": "acme"})).text)
            assert seen == {"tenant": "acme"}  # validate Mcp-Param: count on our side)
            assert c.tools_version == version + 1
            assert c.tools["tenant"].param_headers
    finally:
        peer.stop()


async def test_resources_read_and_missing(modern):
    async with MCPClient(spec(modern), ping_interval=None) as c:
        assert (await c.read_resource("mem://greeting")).text == "hello"
        blob = await c.read_resource("mem://blob")
        assert c.blob_bytes(blob.content[0]) == b"\x00\x01\x02"
        missing = await c.read_resource("mem://nope")
        assert missing.is_error and "mem://nope" in missing.text


async def test_mrtr_roots_answered_with_an_empty_list(modern, logs):
    async with MCPClient(spec(modern), ping_interval=None) as c:
        # the server answers input_required (roots/list, requestState "s-1"); the
        # retry carries {"roots": []} and the state unchanged, on a fresh id
        roots, state, rid = (await c.call_tool("ask_roots")).text.split()
        assert roots == "roots=0"
        first = state.removeprefix("state=s-1:")  # requestState echoed unchanged
        assert state.startswith("state=s-1:") and rid != f"id={first}"  # a fresh id
    rounds = events(logs, "mcp.input_required")
    assert [(e["round"], e["answered"], e["state"]) for e in rounds] == [(1, True, True)]


async def test_mrtr_elicitation_declined_and_sampling_refused(modern):
    async with MCPClient(spec(modern), ping_interval=None) as c:
        # elicitation: answered {"action": "decline"}, the state echoed, retried
        assert (await c.call_tool("ask_elicit")).text == "action=decline state=e-1"
        # sampling has no declined answer: the call ends, nothing is retried
        with pytest.raises(ToolFault) as err:
            await c.call_tool("ask_sampling")
        assert not err.value.retryable and "sampling/createMessage" in err.value.message
    assert http(modern, "/stats")["sampling_error"] == ""


async def test_no_ping_and_no_removed_methods_at_2026(modern):
    """On the wire at 2026-07-28: the probe is server/discover, a subscription is the
    listen filter, and neither ping nor resources/subscribe is ever sent (the session
    refusing them locally: test_client_session_2026)."""
    async with MCPClient(spec(modern), ping_interval=0.05) as c:
        before = http(modern, "/stats")["wire"]
        await c.ping()  # the probe is server/discover: this revision has no ping
        wire = http(modern, "/stats")["wire"]
        assert wire.get("server/discover", 0) >= before.get("server/discover", 0) + 1
        assert await c.subscribe("mem://watched")  # the listen filter, not the removed method
        assert (await c.call_tool("echo", {"text": "x"})).text == "x"
        wire = http(modern, "/stats")["wire"]
        assert "ping" not in wire and "resources/subscribe" not in wire, wire
        assert c.connected and not c.stale  # the pinger sends nothing here (no misses)


# -- subscriptions/listen -----------------------------------------------------------


async def test_listen_drives_updates_and_list_changes(modern, logs):
    async with Toolbox([spec(modern)], ping_interval=None) as tb:
        client = tb.clients["sdk"]
        before = http(modern, "/stats")["listen"]
        assert await tb.subscribe("mem://watched")  # True: a listen stream honours it
        assert "mem://watched" in client.subscriptions
        assert events(logs, "mcp.listen.open")[-1]["uris"] == 1
        with pytest.raises(ValueError):
            await tb.subscribe("mem://items/{id}")
        await asyncio.to_thread(http, modern, "/update?value=v-2026", "POST")
        async with asyncio.timeout(20):
            server, uri, obs = await tb.next_update()
        assert (server, uri, obs.text) == ("sdk", "mem://watched", "v-2026")
        # list changes arrive on the same stream
        grown = (await tb.call("sdk__grow")).text
        await until(lambda: f"sdk__{grown}" in tb.tools)
        assert (await tb.call(f"sdk__{grown}")).text == grown
        opened = len(events(logs, "mcp.listen.open"))
        await tb.unsubscribe("mem://watched")
        assert "mem://watched" not in client.subscriptions
        # the stream is re-opened without it
        await until(lambda: [e for e in events(logs, "mcp.listen.open")[opened:]
                             if e["uris"] == 0], what="a listen stream without the URI")
        await asyncio.to_thread(http, modern, "/update?value=unwatched", "POST")
        assert http(modern, "/stats")["listen"] > before


async def test_server_without_listen_is_spoken_to_at_2025_for_a_subscription(logs):
    """Negotiation by need: the SDK 2.3 serving no subscriptions/listen says
    resources.subscribe: false at 2026-07-28, so a subscription moves it to
    2025-11-25 (resources/subscribe), where updates are delivered."""
    with python_peer("sdk_servers.py", "--era", "modern", "--no-listen") as peer:
        async with Toolbox([spec(peer)], ping_interval=None) as tb:
            client = tb.clients["sdk"]
            assert client.protocol_version == MODERN  # nothing needed it yet
            assert await tb.subscribe("mem://watched") is True
            assert client.protocol_version == "2025-11-25" and client.era == "session"
            assert "mem://watched" in client.subscriptions and "sdk__echo" in tb.tools
            await asyncio.to_thread(http, peer, "/update?value=pushed", "POST")
            async with asyncio.timeout(20):
                server, uri, obs = await tb.next_update()
            assert (server, uri, obs.text) == ("sdk", "mem://watched", "pushed")
    [ev] = events(logs, "mcp.renegotiated")
    assert ev["uri"] == "mem://watched" and "subscribe: false" in ev["reason"]
    assert [e["negotiated_by"] for e in events(logs, "mcp.handshake")] == [
        "server/discover", "initialize"]


async def test_server_restart_mid_listen_reopens_and_rereads(tmp_path, logs):
    state = tmp_path / "watched.txt"
    peer = python_peer("sdk_servers.py", "--era", "modern", "--state", str(state)).start()
    try:
        async with Toolbox([spec(peer)], ping_interval=None) as tb:
            client = tb.clients["sdk"]
            assert await tb.subscribe("mem://watched")
            opens = client.listen_opens
            await asyncio.to_thread(peer.kill)
            state.write_text("changed-while-down")  # no notification can carry this
            await asyncio.to_thread(peer.start)
            async with asyncio.timeout(40):
                server, uri, obs = await tb.next_update()  # the synthesized update
            assert (server, uri, obs.text) == ("sdk", "mem://watched", "changed-while-down")
            assert client.listen_opens > opens and client.protocol_version == MODERN
            assert http(peer, "/stats")["listen"] >= 1  # re-opened on the new process
            await asyncio.to_thread(http, peer, "/update?value=after", "POST")
            async with asyncio.timeout(20):
                _, _, obs = await tb.next_update()
            assert obs.text == "after"
    finally:
        peer.stop()
    assert events(logs, "mcp.listen.lost")


async def test_catalogue_ttl_is_honoured(tmp_path):
    """ttlMs: no re-list before it expires unless a list_changed says so."""
    peer = python_peer("sdk_servers.py", "--era", "modern", "--tools-ttl", "3600000",
                       "--page-size", "20").start()
    try:
        async with MCPClient(spec(peer), ping_interval=None) as c:
            assert http(peer, "/stats")["tools_list"] == 1
            await c.subscribe("mem://watched")  # a listen stream (tools list changes too)
            # the server restarts: the stream is re-opened, the updates synthesized...
            await until(lambda: "mem://watched" in c.listening)  # its stream acknowledged
            opens = c.listen_opens  # before the kill: the re-open may beat peer.start back
            await asyncio.to_thread(peer.kill)
            await asyncio.to_thread(peer.start)
            await until(lambda: c.listen_opens > opens, limit=40)
            async with asyncio.timeout(20):
                assert await c.updates.get() == ("sdk", "mem://watched")
            # ... but the catalogue, fresh for an hour, is not re-listed
            assert http(peer, "/stats")["tools_list"] == 0
            # a list_changed overrides the ttl
            version = c.tools_version
            grown = (await c.call_tool("grow")).text
            await until(lambda: grown in c.tools)
            assert c.tools_version == version + 1
    finally:
        peer.stop()


async def test_catalogue_without_ttl_is_relisted_after_a_lost_stream(tmp_path):
    peer = python_peer("sdk_servers.py", "--era", "modern", "--page-size", "20").start()
    try:
        async with MCPClient(spec(peer), ping_interval=None) as c:
            await c.subscribe("mem://watched")
            await asyncio.to_thread(peer.kill)
            await asyncio.to_thread(peer.start)
            await until(lambda: http(peer, "/stats")["tools_list"] >= 1, limit=40)
    finally:
        peer.stop()


# -- the reactive glue, on top of listen ----------------------------------------------

A, B = "watch://counter/a", "watch://counter/b"


async def test_reactive_daemon_and_await_resource_on_listen(logs):
    from agentd.reactive.awaiting import await_resource, watch_updates
    from agentd.reactive.daemon import ReactiveDaemon, WakeRun

    with python_peer("reactive_peers.py", "--era", "modern") as srv:
        base = f"/bump?uri={A}&times=3"
        wakes: list[dict] = []
        cond = asyncio.Condition()

        async def run_wake(wake, reads):
            seen = {r.uri: json.loads(r.text)["value"] for r in reads}
            wakes.append(seen)
            async with cond:
                cond.notify_all()
            return WakeRun(status="completed", result=seen, steps=1,
                           subscribe=[B] if len(wakes) == 1 else [])

        stop = asyncio.Event()
        async with Toolbox([ServerSpec(name="w", url=srv.url)], run_id="t",
                           ping_interval=None) as tb, asyncio.TaskGroup() as tg:
            assert tb.clients["w"].protocol_version == MODERN
            daemon = ReactiveDaemon(tb, run_wake, debounce=0.0)
            tg.create_task(daemon.serve(stop, [A]))
            async with asyncio.timeout(30):
                await daemon.ready.wait()
            await asyncio.to_thread(http, srv, base, "POST")
            async with asyncio.timeout(30), cond:
                await cond.wait_for(lambda: any(w.get(A) == 3 for w in wakes))
            # self-subscribe: the first run queued B; it is applied after the run
            await until(lambda: B in daemon.watched)
            await asyncio.to_thread(http, srv, f"/bump?uri={B}&times=1", "POST")
            async with asyncio.timeout(30), cond:
                await cond.wait_for(lambda: any(w.get(B) == 1 for w in wakes))
            stop.set()
        stats = http(srv, "/stats")
        assert "resources/subscribe" not in stats["wire"]  # listen, not subscribe
        assert stats["wire"].get("subscriptions/listen", 0) >= 2
        # await_resource on top of the same client
        honoured = len([e for e in events(logs, "mcp.listen.open") if e["uris"]])
        async with Toolbox([ServerSpec(name="w", url=srv.url)], run_id="t",
                           ping_interval=None) as tb, watch_updates(tb) as waiters, \
                asyncio.TaskGroup() as tg:
            waiting = tg.create_task(await_resource(tb, waiters, A, 60))
            client = tb.clients["w"]
            await until(lambda: waiters.waiting(A) and honoured < len(
                [e for e in events(logs, "mcp.listen.open") if e["uris"]]),
                what=f"a listen stream honouring {A}")
            await asyncio.to_thread(http, srv, f"/bump?uri={A}&times=1", "POST")
            updated, obs = await waiting
            assert updated is True and json.loads(obs.text)["value"] == 4
            assert A not in client.subscriptions
    subs = events(logs, "reactive.listening")  # one event per outcome: listen, here
    assert [(e["uri"], e["origin"]) for e in subs] == [(A, "flag"), (B, "self")]
    assert events(logs, "reactive.subscribed") == []
