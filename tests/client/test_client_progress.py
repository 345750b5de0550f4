"""Long tool calls against real servers: progress keeps them alive, silence and the cap end
them, the server is told and stays usable (issue 29).

Peers are ``tests/support/progress_servers.py`` in subprocesses on loopback: the official
SDK 2.3 ``MCPServer`` and FastMCP 4, each at 2025-11-25 (``--era legacy``) and at
2026-07-28 (``--era modern``); the TypeScript SDK 1.x's server-everything (its
long-running operation) and a TypeScript SDK 2.x server at 2026-07-28
(``tests/ts_peers/progress_server_v2.mjs``).  No timing is asserted: a call outlives its idle
limit because the test releases it only after the *server* reports it has been
running for several idle periods (the server heartbeats meanwhile); a silent call
ends on its limit whenever the loop gets to it; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from agentd_proc import run_agentd
from gateway import Gateway, Reply
from logcapture import events
from peers import (
    ROOT,
    PeerProcess,
    ensure_npm_peers,
    free_port,
    npm_env,
    python_peer,
    require_modules,
)
from tree_helpers import make_config, precompile
from waiting import until

from agentd.agent.subagents import SpawnRequest
from agentd.app.compose import open_supervisor
from agentd.config.model import ServerSpec
from agentd.mcp import MCPClient, Toolbox
from agentd.mcp.client.rules.call_limits import ToolLimits
from agentd.obs import metrics

IDLE = 0.5
IDLE_TEXT = f"tool call ended by agentd: no progress for {IDLE:g} s (--tool-idle-timeout)"
COMBOS = [("sdk", "legacy"), ("sdk", "modern"), ("fastmcp", "legacy"), ("fastmcp", "modern")]
REVISION = {"legacy": "2025-11-25", "modern": "2026-07-28"}


@pytest.fixture(scope="module", autouse=True)
def _peers_available():
    require_modules("mcp", "fastmcp", "uvicorn", "starlette")


@pytest.fixture(scope="module", params=COMBOS, ids=["-".join(c) for c in COMBOS])
def server(request):
    kind, era = request.param
    with python_peer("progress_servers.py", "--kind", kind, "--era", era) as peer:
        peer.era = era
        yield peer


@pytest.fixture(scope="module")
def legacy_sdk():
    with python_peer("progress_servers.py") as peer:
        yield peer


def http(peer, path: str = "/stats", method: str = "GET") -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{peer.port}{path}", method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def client(peer, limits: ToolLimits) -> MCPClient:
    return MCPClient(ServerSpec(name="p", url=peer.url), ping_interval=None, tool_limits=limits)


async def released_after(peer, c: MCPClient, tool: str, periods: float):
    """Call ``tool`` (a heartbeat) and release it once the server says it has run for
    ``periods`` idle limits."""
    call = asyncio.create_task(c.call_tool(tool, {}))
    assert await until(lambda: call.done()
                       or http(peer)["running"].get(tool, 0) > periods * IDLE, limit=60)
    http(peer, "/release", "POST")
    return await call


async def test_progress_keeps_a_call_alive_past_its_idle_limit(server):
    async with client(server, ToolLimits(idle=IDLE, total=60)) as c:
        assert c.protocol_version == REVISION[server.era]
        before = http(server)
        obs = await released_after(server, c, "heartbeat", 4)
        assert not obs.is_error, obs.text
        assert obs.text.startswith("released after")
        after = http(server)
        assert after["progress_sent"] > before["progress_sent"]
        assert after["cancelled"].get("heartbeat", 0) == before["cancelled"].get("heartbeat", 0)


async def test_a_silent_call_ends_on_the_idle_limit_and_the_server_stays_usable(server, logs):
    counted = metrics.MCP_CALLS.get("p", "silent", "idle_limit")
    async with client(server, ToolLimits(idle=IDLE, total=60)) as c:
        before = http(server)
        obs = await c.call_tool("silent", {})
        assert obs.is_error and obs.text == IDLE_TEXT
        # the server was told: its handler was cancelled
        assert await until(lambda: http(server)["cancelled"].get("silent", 0)
                           == before["cancelled"].get("silent", 0) + 1)
        notes = http(server)["cancel_notes"][len(before["cancel_notes"]):]
        if server.era == "legacy":  # notifications/cancelled {requestId, reason}
            assert notes == [f"no progress for {IDLE:g} s (--tool-idle-timeout)"]
        else:  # 2026-07-28: closing the request's answer stream is the cancellation
            assert notes == []
        ok = await c.call_tool("echo", {"text": "still here"})
        assert not ok.is_error and ok.text == "still here"
    assert metrics.MCP_CALLS.get("p", "silent", "idle_limit") == counted + 1
    limit = events(logs, "mcp.tool.limit")
    assert [(e["tool"], e["limit"], e["flag"], e["level"]) for e in limit] == [
        ("silent", "idle", "--tool-idle-timeout", "warning")]


async def test_the_cap_ends_a_call_that_reports_progress_for_ever(server):
    counted = metrics.MCP_CALLS.get("p", "heartbeat", "total_limit")
    async with client(server, ToolLimits(idle=60, total=1.0)) as c:
        before = http(server)
        obs = await c.call_tool("heartbeat", {})
        assert obs.is_error
        assert obs.text == "tool call ended by agentd: still running after 1 s (--tool-timeout)"
        assert await until(lambda: http(server)["cancelled"].get("heartbeat", 0)
                           == before["cancelled"].get("heartbeat", 0) + 1)
        assert http(server)["progress_sent"] > before["progress_sent"]  # it did report
        assert (await c.call_tool("echo", {"text": "next"})).text == "next"
    assert metrics.MCP_CALLS.get("p", "heartbeat", "total_limit") == counted + 1


async def test_progress_that_never_increases_is_not_progress(server, logs):
    async with client(server, ToolLimits(idle=IDLE, total=60)) as c:
        obs = await c.call_tool("stuck", {})
        assert obs.is_error and obs.text == IDLE_TEXT
        assert (await c.call_tool("echo", {"text": "fine"})).text == "fine"
    stalled = events(logs, "mcp.progress.stalled")
    assert len(stalled) == 1 and stalled[0]["level"] == "info"


async def test_through_the_toolbox_the_limit_is_an_observation_not_a_fault(server):
    async with Toolbox([ServerSpec(name="p", url=server.url, required=True)], run_id="r",
                       ping_interval=None, tool_limits=ToolLimits(IDLE, 60)) as tb:
        obs = await tb.call("p__silent", {})
        assert obs.is_error and obs.text == IDLE_TEXT
        assert tb.take_notices() == []  # no server was dropped
        assert (await tb.call("p__echo", {"text": "ok"})).text == "ok"
        assert tb.lost is not None and not tb.lost.done()


async def test_a_servers_own_limit_overrides_the_runs(legacy_sdk):
    """The run allows a minute of silence; this server's entry only half a second
    (and another entry for the same endpoint, none at all, is not cut)."""
    quick = ServerSpec(name="quick", url=legacy_sdk.url, tool_idle_timeout=IDLE)
    lax = ServerSpec(name="lax", url=legacy_sdk.url, tool_idle_timeout=0, tool_timeout=1.0)
    async with Toolbox([quick, lax], run_id="r", ping_interval=None,
                       tool_limits=ToolLimits(60, 60)) as tb:
        obs = await tb.call("quick__silent", {})
        assert obs.is_error and obs.text == IDLE_TEXT
        obs = await tb.call("lax__silent", {})  # no idle limit: its own 1 s cap ends it
        assert obs.text == "tool call ended by agentd: still running after 1 s (--tool-timeout)"


# -- 2025-11-25 only: the GET stream, and tokens that are not ours -------------------


async def test_progress_on_the_get_stream_refreshes_the_call(legacy_sdk):
    async with client(legacy_sdk, ToolLimits(idle=IDLE, total=60)) as c:
        await until(lambda: http(legacy_sdk)["get_streams"] >= 1, what="the GET stream asked for")
        obs = await released_after(legacy_sdk, c, "heartbeat_get", 4)
        assert not obs.is_error and obs.text.startswith("released after"), obs.text


async def test_progress_for_a_token_we_never_sent_is_dropped(legacy_sdk, debug_logs):
    async with client(legacy_sdk, ToolLimits(idle=IDLE, total=60)) as c:
        obs = await c.call_tool("stray", {})
        assert obs.text == "stray sent" and not obs.is_error
        [ignored] = events(debug_logs, "mcp.progress.ignored")
        assert ignored["why"] == "unknown token" and ignored["unknown"] == 1
        assert (await c.call_tool("echo", {"text": "x"})).text == "x"


# -- the TypeScript SDK 1.x: @modelcontextprotocol/server-everything ----------------


@pytest.fixture(scope="module")
def everything():
    bin_dir = ensure_npm_peers("mcp-server-everything", "node")
    port = free_port()
    peer = PeerProcess([str(bin_dir / "mcp-server-everything"), "streamableHttp"], port,
                       env=npm_env({"PORT": str(port)}))
    with peer:
        yield peer


async def test_server_everything_long_operation_with_and_without_progress(everything):
    """Its long-running operation reports a step every ``duration/steps`` seconds
    (server-side sleeps): many short steps outlive the idle limit, one long step
    does not."""
    tool = "trigger-long-running-operation"
    async with client(everything, ToolLimits(idle=1.0, total=60)) as c:
        obs = await c.call_tool(tool, {"duration": 3, "steps": 30})  # 0.1 s steps, 3 s
        assert not obs.is_error and "Long running operation completed" in obs.text, obs.text
        obs = await c.call_tool(tool, {"duration": 30, "steps": 1})  # silent for 30 s
        assert obs.is_error
        assert obs.text == ("tool call ended by agentd: no progress for 1 s "
                            "(--tool-idle-timeout)")
        assert (await c.call_tool("echo", {"message": "again"})).text.endswith("again")


# -- the TypeScript SDK 2.x at 2026-07-28: tests/ts_peers/progress_server_v2.mjs ------


@pytest.fixture(scope="module")
def ts_v2():
    bin_dir = ensure_npm_peers("node")
    port = free_port()
    script = ROOT / "tests" / "ts_peers" / "progress_server_v2.mjs"
    with PeerProcess([str(bin_dir / "node"), str(script), str(port)], port,
                     env=npm_env()) as peer:
        yield peer


async def test_typescript_sdk_2_progress_silence_and_the_next_call(ts_v2):
    async with client(ts_v2, ToolLimits(idle=IDLE, total=60)) as c:
        assert c.protocol_version == "2026-07-28"
        obs = await released_after(ts_v2, c, "heartbeat", 4)
        assert not obs.is_error and obs.text.startswith("released after"), obs.text
        before = http(ts_v2)
        obs = await c.call_tool("silent", {})
        assert obs.is_error and obs.text == IDLE_TEXT
        # closing the answer stream aborted the handler's request
        assert await until(lambda: http(ts_v2)["cancelled"].get("silent", 0)
                           == before["cancelled"].get("silent", 0) + 1)
        assert (await c.call_tool("echo", {"text": "next"})).text == "next"


# -- the real console script: the flags reach the root's toolbox --------------------


async def test_the_flags_end_a_silent_call_of_a_run(agentd_bin, tmp_path, legacy_sdk):
    script = tmp_path / "play.json"
    script.write_text(json.dumps({"turns": [
        {"tool_calls": [{"name": "p__silent", "arguments": {}}]},
        {"expect": [IDLE_TEXT], "tool_calls": [{"name": "p__echo", "arguments": {"text": "after"}}]},
        {"expect": ["after"], "content": "done"},
    ]}))
    before = http(legacy_sdk)
    done = await run_agentd(agentd_bin, [
        "--instruction", "call the slow tool", "--intelligence", f"playback:{script}",
        "--mcp", f"p={legacy_sdk.url}", "--tool-idle-timeout", str(IDLE),
        "--tool-timeout", "0", "--ping-interval", "60"])
    assert done.rc == 0, done.stderr
    assert done.result["status"] == "completed" and done.result["result"] == "done"
    assert [(e["tool"], e["limit"]) for e in done.events("mcp.tool.limit")] == [
        ("silent", "idle")]
    assert await until(lambda: http(legacy_sdk)["cancelled"].get("silent", 0)
                       == before["cancelled"].get("silent", 0) + 1)


# -- subagents: their calls are brokered by the parent, under the parent's limits ----


@pytest.mark.timeout(180)
async def test_a_subagents_call_gets_the_same_limits(tmp_path, legacy_sdk):
    precompile()

    def script(body: dict) -> Reply:
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn == 0:
            return Reply.tools(("p__silent", {}))
        seen = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        return Reply.text(json.dumps({"seen": seen}))

    before = http(legacy_sdk)
    async with Gateway([script] * 50) as gw:
        cfg = make_config(tmp_path, intelligence=gw.url, tool_idle_timeout=IDLE,
                          mcp=(ServerSpec(name="p", url=legacy_sdk.url),))
        async with open_supervisor(cfg) as sup:
            st = await sup.spawn("0", SpawnRequest("call the silent tool"))
            assert st.status == "completed", st.result
    result = st.result if isinstance(st.result, dict) else json.loads(st.result)
    assert any(IDLE_TEXT in t for t in result["seen"]), result
    assert await until(lambda: http(legacy_sdk)["cancelled"].get("silent", 0)
                       == before["cancelled"].get("silent", 0) + 1)
    after = http(legacy_sdk)
    assert f"no progress for {IDLE:g} s (--tool-idle-timeout)" in after["cancel_notes"]
