"""Reactive mode against the servers people run (issue 29): never silent.

Real `agentd --mode reactive` processes with playback intelligence, against

* FastMCP 4 (tests/support/fastmcp_server.py), which offers no subscriptions at any
  revision (2026-07-28, `--legacy-only` 2025-11-25, `--stateless`): the
  watched URI is polled (`reactive.polling`, once), a change made through its
  own `touch` tool wakes the daemon, and `/readyz` and `agent://status` say
  `poll`; with `--poll-interval 0` the daemon refuses to start (exit 6, one
  `reactive.refused` line);
* the SDK 2.3 `MCPServer` at 2025-11-25 (tests/support/sdk_mcpserver.py
  `--legacy-only`, with sessions or stateless): no `resources.subscribe`, polled;
* a 2025-11-25 server that takes `resources/subscribe` but has no GET stream
  (tests/support/reactive_peers.py `--no-get`): polled too, not waited on forever;
* `agentd__await_resource` on a URI FastMCP or that GET-less server cannot
  push: one `reactive.refused` line and a result that says "not watched";
* the TypeScript SDK 1.x and 2.x servers (tests/ts_peers/): real
  subscriptions (`reactive.subscribed` on a 1.x session, `reactive.listening`
  at 2026-07-28 on 2.x), their `touch` tool sends `updated`, a wake follows;
  the 1.x SDK's stateless mode has no GET stream and is polled.

Assertions are on logged events, exit codes and bodies; the waits only bound
how long we wait for a log line that must come.
"""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request
from pathlib import Path

import peers
import pytest
from agentd_proc import Agentd
from reactive_peers import bump, stats

try:  # the official MCP Python SDK: a real client (test dependency)
    from mcp import Client
except ImportError:  # pragma: no cover
    Client = None

NOTE = "mem://notes/1"
A = "watch://counter/a"
INSTRUCTION = "When the watched note changes, summarize it"


def _book(tmp: Path, expect: str) -> Path:
    path = tmp / "interop.playback.json"
    path.write_text(json.dumps({"playback": 1, "scripts": [{
        "name": "watch", "match": "watched note",
        "turns": [{"expect": ["reactive wake", expect], "content": "noted"}]}]}))
    return path


def _sdk() -> type:
    if Client is None:
        peers.unavailable("the official MCP Python SDK (mcp) is not installed")
    return Client


def _fastmcp(*args: str) -> peers.PythonPeer:
    peers.require_modules("fastmcp")
    return peers.python_peer("fastmcp_server.py", *args)


async def _call(url: str, tool: str, args: dict) -> None:
    async with _sdk()(url) as c:
        result = await c.call_tool(tool, args)
        assert not result.is_error


async def _status(url: str) -> dict:
    async with _sdk()(url) as c:
        return json.loads((await c.read_resource("agent://status")).contents[0].text)


def _readyz(port: int) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=30) as r:
        return r.status, r.read().decode()


@pytest.mark.parametrize("args", [(), ("--legacy-only",), ("--stateless",)],
                         ids=["both-revisions", "legacy-only", "stateless"])
def test_fastmcp_is_polled_and_its_change_wakes(agentd_bin, tmp_path, args) -> None:
    _sdk()
    mport, sport = peers.free_port(), peers.free_port()
    with _fastmcp(*args) as srv:
        ag = Agentd([agentd_bin, "--instruction", INSTRUCTION,
                     "--intelligence", f"playback:{_book(tmp_path, 'body #1')}",
                     "--mcp", f"notes={srv.url}", "--mode", "reactive", "--subscribe", NOTE,
                     "--poll-interval", "0.2", "--debounce", "0",
                     "--metrics-listen", f"127.0.0.1:{mport}",
                     "--serve-mcp", f"http://127.0.0.1:{sport}"], tmp_path)
        try:
            (ready,) = ag.wait_event("reactive.ready")
            assert ready["watched"] == [NOTE] and ready["modes"] == {NOTE: "poll"}
            peers.wait_port("127.0.0.1", mport)
            code, body = _readyz(mport)
            assert code == 200 and body == f"ready\nwatch poll notes {NOTE}\n"
            status = asyncio.run(_status(f"http://127.0.0.1:{sport}/mcp"))
            assert status["mode"] == "reactive"
            assert status["watched"] == [{"uri": NOTE, "server": "notes", "mode": "poll"}]
            asyncio.run(_call(srv.url, "touch", {"uri": NOTE}))
            (run,) = ag.wait_event("reactive.run")
        finally:
            code = ag.stop(signal.SIGTERM)
    assert code == 130
    assert run["status"] == "completed" and run["uris"] == [NOTE]
    (polling,) = ag.events("reactive.polling")
    assert (polling["uri"], polling["server"], polling["level"]) == (NOTE, "notes", "warning")
    assert polling["reason"] and polling["interval"] == 0.2
    # 2025-11-25: no resources.subscribe; 2026-07-28: discover says false and
    # 2025-11-25 has none either, so the subscribe answers False
    assert polling["cause"] == ("unsupported" if "--legacy-only" in args else "not_honoured")
    assert [w["uris"] for w in ag.events("reactive.wake")] == [[NOTE]]
    assert [e["uri"] for e in ag.events("reactive.poll.changed")] == [NOTE]
    # one event per outcome: nothing said it was subscribed, nothing refused
    for other in ("reactive.subscribed", "reactive.listening", "reactive.refused"):
        assert ag.events(other) == []
    res = ag.result()
    assert res["status"] == "interrupted" and res["result"] == "noted"


@pytest.mark.parametrize("how", ["flag", "config"])
def test_fastmcp_with_polling_disabled_refuses_at_startup(agentd_bin, tmp_path, how) -> None:
    config = tmp_path / "agentd.toml"
    config.write_text("poll_interval = 0\n")
    disable = ["--poll-interval", "0"] if how == "flag" else ["--config", str(config)]
    with _fastmcp() as srv:
        ag = Agentd([agentd_bin, "--instruction", INSTRUCTION,
                     "--intelligence", f"playback:{_book(tmp_path, 'x')}",
                     "--mcp", f"notes={srv.url}", "--mode", "reactive", "--subscribe", NOTE,
                     *disable], tmp_path)
        code = ag.proc.wait(timeout=120)
    assert code == 6
    (refused,) = ag.events("reactive.refused")
    assert refused["level"] == "error"
    assert NOTE in refused["error"] and "'notes'" in refused["error"]
    assert "--poll-interval 0" in refused["error"]
    assert ag.events("reactive.ready") == [] and ag.events("reactive.polling") == []
    res = ag.result()
    assert res["status"] == "failed" and NOTE in res["result"]["error"]


def test_session_server_without_get_stream_is_polled(agentd_bin, tmp_path) -> None:
    book = _book(tmp_path, '"value": 2')  # the wake read the state after the change
    with peers.python_peer("reactive_peers.py", "--no-get") as srv:
        ag = Agentd([agentd_bin, "--instruction", INSTRUCTION,
                     "--intelligence", f"playback:{book}",
                     "--mcp", f"gw={srv.url}", "--mode", "reactive", "--subscribe", A,
                     "--poll-interval", "0.2", "--debounce", "0"], tmp_path)
        try:
            ag.wait_event("reactive.ready")
            bump(srv.port, A, 2)
            (run,) = ag.wait_event("reactive.run")
            wire = stats(srv.port)["wire"]
        finally:
            code = ag.stop(signal.SIGTERM)
    assert code == 130
    assert run["status"] == "completed" and run["uris"] == [A]
    assert wire.get("resources/subscribe") == 1  # taken by the server, never delivered
    (polling,) = ag.events("reactive.polling")
    assert (polling["uri"], polling["server"], polling["cause"]) == (A, "gw", "no_channel")
    assert ag.events("reactive.subscribed") == []


@pytest.mark.parametrize("argv", [["--poll-interval", "-1"], ["--poll-interval", "nan"],
                                  ["--poll-interval", "86401"]])
def test_poll_interval_out_of_range_is_a_usage_error(agentd_bin, tmp_path, argv) -> None:
    ag = Agentd([agentd_bin, "--instruction", "x", "--mode", "reactive", "--subscribe", NOTE,
                 *argv], tmp_path)
    assert ag.proc.wait(timeout=60) == 2
    assert "--poll-interval" in ag.err.read_text()


@pytest.mark.parametrize("args", [("--legacy-only",), ("--legacy-only", "--stateless")],
                         ids=["legacy-only", "legacy-stateless"])
def test_sdk_mcpserver_at_2025_is_polled_and_its_change_wakes(agentd_bin, tmp_path,
                                                              args) -> None:
    """The SDK 2.3 `MCPServer` at 2025-11-25 advertises no `resources.subscribe`:
    polled (`reactive.polling`, cause `unsupported`), and its `touch` wakes."""
    _sdk()
    peers.require_modules("mcp", "uvicorn")
    with peers.python_peer("sdk_mcpserver.py", *args) as srv:
        ag = Agentd([agentd_bin, "--instruction", INSTRUCTION,
                     "--intelligence", f"playback:{_book(tmp_path, 'body #1')}",
                     "--mcp", f"sdk={srv.url}", "--mode", "reactive", "--subscribe", NOTE,
                     "--poll-interval", "0.2", "--debounce", "0"], tmp_path)
        try:
            (ready,) = ag.wait_event("reactive.ready")
            assert ready["modes"] == {NOTE: "poll"}
            asyncio.run(_call(srv.url, "touch", {"uri": NOTE}))
            (run,) = ag.wait_event("reactive.run")
        finally:
            code = ag.stop(signal.SIGTERM)
    assert code == 130
    assert run["status"] == "completed" and run["uris"] == [NOTE]
    (polling,) = ag.events("reactive.polling")
    assert (polling["server"], polling["cause"]) == ("sdk", "unsupported")
    assert [e["protocol_version"] for e in ag.events("mcp.handshake")] == ["2025-11-25"]
    for other in ("reactive.subscribed", "reactive.listening", "reactive.refused"):
        assert ag.events(other) == []


@pytest.mark.parametrize(("major", "args", "mode", "event"), [
    (1, (), "subscribe", "reactive.subscribed"),
    (1, ("--stateless",), "poll", "reactive.polling"),  # no GET stream: 405
    (2, (), "listen", "reactive.listening"),
    (2, ("--stateless",), "listen", "reactive.listening"),
    (2, ("--legacy-only",), "subscribe", "reactive.subscribed"),
], ids=["v1", "v1-stateless", "v2", "v2-stateless", "v2-legacy-only"])
def test_ts_sdk_servers_wake_on_touch(agentd_bin, tmp_path, major, args, mode, event) -> None:
    _sdk()
    mport = peers.free_port()
    with peers.ts_peer(major, *args) as srv:
        ag = Agentd([agentd_bin, "--instruction", INSTRUCTION,
                     "--intelligence", f"playback:{_book(tmp_path, NOTE)}",
                     "--mcp", f"ts={srv.url}", "--mode", "reactive", "--subscribe", NOTE,
                     "--poll-interval", "0.2", "--debounce", "0",
                     "--metrics-listen", f"127.0.0.1:{mport}"], tmp_path)
        try:
            (ready,) = ag.wait_event("reactive.ready")
            assert ready["modes"] == {NOTE: mode}
            peers.wait_port("127.0.0.1", mport)
            assert _readyz(mport) == (200, f"ready\nwatch {mode} ts {NOTE}\n")
            asyncio.run(_call(srv.url, "touch", {"uri": NOTE}))
            (run,) = ag.wait_event("reactive.run")
        finally:
            code = ag.stop(signal.SIGTERM)
    assert code == 130
    assert run["status"] == "completed" and run["uris"] == [NOTE]
    (outcome,) = ag.events(event)
    assert (outcome["uri"], outcome["server"]) == (NOTE, "ts")
    others = {"reactive.subscribed", "reactive.listening", "reactive.polling",
              "reactive.refused"} - {event}
    assert all(ag.events(e) == [] for e in others)
    if mode == "poll":
        assert outcome["cause"] == "no_channel"
        assert [e["uri"] for e in ag.events("reactive.poll.changed")] == [NOTE]
    else:  # pushed: the wake came from the server's updated, not from a poll
        assert ag.events("reactive.poll.changed") == []


@pytest.mark.parametrize(("script", "args", "uri", "cause"), [
    # no subscriptions at either revision: the subscribe answers False
    ("fastmcp_server.py", (), NOTE, "not_honoured"),
    ("reactive_peers.py", ("--no-get",), A, "no_channel"),  # taken, no GET stream to carry it
], ids=["fastmcp", "no-get-stream"])
async def test_await_resource_on_an_unwatchable_uri_says_so(logs, script, args, uri,
                                                            cause) -> None:
    """`agentd__await_resource` on a URI no server can push `updated` for: one
    `reactive.refused` line (origin `await`, the cause) and an observation that
    says the URI was not watched -- never a plain "timed out" the model cannot
    tell from a quiet resource. A subscribe the server took is dropped again."""
    from logcapture import events

    from agentd.config.model import ServerSpec
    from agentd.mcp import Toolbox
    from agentd.reactive.awaiting import await_resource_tool, watch_updates

    if script == "fastmcp_server.py":
        peers.require_modules("fastmcp", "uvicorn")
    with peers.python_peer(script, *args) as srv:
        async with Toolbox([ServerSpec(name="srv", url=srv.url)], run_id="t",
                           ping_interval=None) as tb, watch_updates(tb) as waiters:
            tool = await_resource_tool(tb, waiters)
            obs = await tool.handler({"uri": uri, "timeout": 0})
            assert uri not in getattr(tb.clients["srv"], "subscriptions", ())
    assert not obs.is_error
    assert obs.text.startswith(f"not watched: no server can send updates for {uri}")
    assert obs.structured == {"uri": uri, "updated": False, "watched": False}
    (refused,) = events(logs, "reactive.refused")
    assert (refused["origin"], refused["cause"], refused["server"]) == ("await", cause, "srv")
    (awaited,) = events(logs, "reactive.await")
    assert awaited["watched"] is False and awaited["updated"] is False
