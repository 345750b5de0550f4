"""`agentd --mode reactive` end to end: the real console script, the real loop with
playback intelligence, the official-SDK watched server (tests/support/reactive_peers.py).

Counts, ordering, logged events and exit codes are asserted — never durations;
the waits below only bound how long we wait for something that must happen.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import peers
import pytest
from agentd_proc import Agentd, assert_log_only
from reactive_peers import bump, stats

A, B = "watch://counter/a", "watch://counter/b"
WAIT = 60.0


INSTRUCTION = "When a watched counter changes, note its value"


def playback(tmp: Path) -> Path:
    path = tmp / "reactive.playback.json"
    path.write_text(json.dumps({"playback": 1, "scripts": [{
        "name": "reactive",
        "match": "watched counter",
        "turns": [
            # every wake starts a fresh conversation at turn 1
            {"expect": ["reactive wake", "watch://counter/"],
             "tool_calls": [{"name": "agentd__subscribe", "arguments": {"uri": B}}]},
            {"content": "noted"},
        ]}]}))
    return path


def test_reactive_mode_wakes_reads_fresh_and_self_subscribes(agentd_bin, tmp_path) -> None:
    with peers.python_peer("reactive_peers.py") as srv:
        ag = Agentd([agentd_bin, "--instruction", INSTRUCTION,
                     "--intelligence", f"playback:{playback(tmp_path)}",
                     "--mcp", f"watched={srv.url}", "--mode", "reactive",
                     "--subscribe", A, "--debounce", "0.05", "--ping-interval", "60"], tmp_path)
        try:
            ag.wait_event("reactive.ready")
            bump(srv.port, A, 1)
            ag.wait_event("reactive.run")
            # the wake's line is on stdout while the daemon runs on (flushed per wake)
            ag.wait_until(lambda: len(ag.wake_lines()) == 1)
            assert ag.proc.poll() is None
            # the run's queued `subscribe B` was applied after it finished
            ag.wait_event("reactive.subscribed", lambda r: r["uri"] == B)
            bump(srv.port, B, 3)
            ag.wait_event("reactive.run", count=2)
            bump(srv.port, A, 500)
            ag.wait_until(lambda: sum(w["coalesced"] for w in ag.events("reactive.wake"))
                          == 1 + 3 + 500)
            ag.wait_event("reactive.run", count=len(ag.events("reactive.wake")))
            wire = stats(srv.port)["wire"]
        finally:
            code = ag.stop(signal.SIGTERM)
    assert code == 130
    res = ag.result()
    assert res["status"] == "interrupted" and res["result"] == "noted"
    wakes = ag.events("reactive.wake")
    runs = ag.events("reactive.run")
    assert [w["uris"] for w in wakes[:2]] == [[A], [B]]
    assert wakes[1]["coalesced"] >= 1
    # the burst of 500 was coalesced into few wakes; every update accounted for
    assert sum(w["coalesced"] for w in wakes) == 1 + 3 + 500
    assert len(wakes) <= 2 + 20
    assert all(r["status"] == "completed" for r in runs)
    assert res["steps"] == 2 * len(runs)
    # one JSON line per wake's run, in order, before the final object
    lines = ag.wake_lines()
    assert [ln["wake"] for ln in lines] == [r["seq"] for r in runs]
    assert [ln["uris"] for ln in lines[:2]] == [[A], [B]]
    for ln in lines:
        assert set(ln) == {"run_id", "wake", "status", "partial", "result", "steps", "usage",
                           "uris"}
        assert ln["run_id"] == res["run_id"] and ln["status"] == "completed"
        assert ln["result"] == "noted" and ln["steps"] == 2 and ln["partial"] is False
    assert sum(ln["steps"] for ln in lines) == res["steps"]
    assert wire.get("resources/subscribe") == 2  # A (flag) and B (self), once each
    assert wire.get("resources/read", 0) >= len(runs)  # notify-then-read
    assert ag.events("reactive.drained")


def test_wake_on_start_runs_once_before_any_update(agentd_bin, tmp_path) -> None:
    """`--wake-on-start`: wake 0 runs the instruction on the watched state at once,
    with no update sent; a later update is wake 1. One stdout line each."""
    with peers.python_peer("reactive_peers.py") as srv:
        ag = Agentd([agentd_bin, "--instruction", INSTRUCTION,
                     "--intelligence", f"playback:{playback(tmp_path)}",
                     "--mcp", f"watched={srv.url}", "--mode", "reactive",
                     "--subscribe", A, "--wake-on-start", "--debounce", "0.05",
                     "--ping-interval", "60"], tmp_path)
        try:
            ag.wait_until(lambda: len(ag.wake_lines()) == 1)
            (first,) = ag.wake_lines()
            assert ag.events("reactive.wake") == []  # no update came
            assert first["wake"] == 0 and first["uris"] == [A]
            assert first["status"] == "completed" and first["result"] == "noted"
            bump(srv.port, A, 1)
            ag.wait_until(lambda: len(ag.wake_lines()) == 2)
            wire = stats(srv.port)["wire"]
        finally:
            code = ag.stop(signal.SIGTERM)
    assert code == 130
    assert [ln["wake"] for ln in ag.wake_lines()] == [0, 1]
    (start,) = ag.events("reactive.wake.start")
    assert start["uris"] == [A]
    assert [r["seq"] for r in ag.events("reactive.run")] == [0, 1]
    assert wire.get("resources/read", 0) >= 2  # the start's read, then the wake's
    res = ag.result()
    assert res["steps"] == 4 and res["status"] == "interrupted"


def test_wake_on_start_in_task_mode_is_usage_error(agentd_bin) -> None:
    proc = subprocess.run([agentd_bin, "--instruction", "x", "--wake-on-start"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--wake-on-start needs --mode reactive" in proc.stderr


def test_worker_with_nowhere_and_no_mcp_stays_up_until_signalled(agentd_bin, tmp_path) -> None:
    """The spec's worker example without a self-MCP: it must start and stay up."""
    ag = Agentd([agentd_bin, "--instruction", "Be a reusable code-review worker",
                 "--intelligence", f"playback:{playback(tmp_path)}",
                 "--mode", "reactive", "--subscribe", "file:///nowhere"], tmp_path)
    try:
        ready = ag.wait_event("reactive.ready")
        warn = ag.events("reactive.refused")
        assert warn and warn[0]["uri"] == "file:///nowhere" and warn[0]["level"] == "warning"
        assert warn[0]["cause"] == "unowned"
        assert ready[0]["watched"] == []
        assert ag.proc.poll() is None  # still up
    finally:
        code = ag.stop(signal.SIGINT)
    assert code == 130
    assert ag.result()["status"] == "interrupted"


def test_server_without_subscribe_never_sees_resources_subscribe(agentd_bin, tmp_path) -> None:
    """No `resources.subscribe`: never sent; with polling disabled the daemon
    refuses to start (exit 6) rather than watch nothing."""
    with peers.python_peer("reactive_peers.py", "--no-subscribe") as srv:
        ag = Agentd([agentd_bin, "--instruction", INSTRUCTION,
                     "--intelligence", f"playback:{playback(tmp_path)}",
                     "--mcp", f"plain={srv.url}", "--mode", "reactive",
                     "--subscribe", A, "--debounce", "0", "--poll-interval", "0"], tmp_path)
        code = ag.exited()
        wire = stats(srv.port)["wire"]
    assert code == 6
    assert "resources/subscribe" not in wire
    (refused,) = ag.events("reactive.refused")
    assert A in refused["error"] and "'plain'" in refused["error"]
    assert "resources.subscribe" in refused["error"]
    assert ag.events("reactive.wake") == [] and ag.events("reactive.ready") == []


def test_fastmcp_refused_watch_exits_6_with_log_lines_only(agentd_bin, tmp_path) -> None:
    """FastMCP 4 (no `resources.subscribe` at either revision) with polling off:
    exit 6 as documented, the renegotiation's reconnect named for what it is, and
    nothing but JSON log lines on stderr -- the reconnect it started as the client
    closed used to leave `coroutine ... was never awaited` behind at exit."""
    peers.require_modules("fastmcp", "uvicorn")
    with peers.python_peer("fastmcp_server.py") as srv:
        ag = Agentd([agentd_bin, "--instruction", INSTRUCTION,
                     "--intelligence", f"playback:{playback(tmp_path)}",
                     "--mcp", f"w={srv.url}", "--mode", "reactive",
                     "--subscribe", "weather://cities", "--poll-interval", "0"], tmp_path)
        code = ag.exited()
    assert code == 6
    err = ag.err.read_text()
    assert_log_only(err, form="json")
    assert "never awaited" not in err and "Warning" not in err
    (failed,) = ag.events("mcp.renegotiate.failed")
    assert failed["uri"] == "weather://cities"
    (again,) = ag.events("mcp.reconnecting")
    assert again["server"] == "w" and "renegotiation failed" in again["reason"]
    assert ag.events("mcp.disconnected") == []
    (refused,) = ag.events("reactive.refused")
    assert "weather://cities" in refused["error"] and "--poll-interval 0" in refused["error"]


@pytest.mark.parametrize("flag", ["--subscribe"])
def test_reactive_template_is_usage_error(agentd_bin, flag) -> None:
    proc = subprocess.run([agentd_bin, "--instruction", "x", "--mode", "reactive", flag,
                           "watch://counter/{id}"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stdout == ""


EVERYTHING_DOCS = ["demo://resource/static/document/architecture.md",
                   "demo://resource/static/document/features.md"]


def test_server_everything_wake_on_start_then_one_line_per_wake(agentd_bin, tmp_path) -> None:
    """server-everything sends `updated` only once a tool call has asked for them:
    without `--wake-on-start` the daemon would idle. Wake 0 runs at start and its
    model turns the updates on; their wake follows (its model turns them off
    again). One stdout line per wake's run, the final object last."""
    bin_dir = peers.ensure_npm_peers("mcp-server-everything", "node")
    port = peers.free_port()
    book = tmp_path / "everything.playback.json"
    book.write_text(json.dumps({"playback": 1, "scripts": [{
        "name": "toggle", "match": "server-everything", "turns": [
            {"expect": ["reactive wake", EVERYTHING_DOCS[0]],
             "tool_calls": [{"name": "ev__toggle-subscriber-updates", "arguments": {}}]},
            {"content": "toggled"}]}]}))
    srv = peers.PeerProcess([str(bin_dir / "mcp-server-everything"), "streamableHttp"], port,
                            env=peers.npm_env({"PORT": str(port)})).start()
    try:
        argv = [agentd_bin, "--instruction", "Toggle server-everything's updates",
                "--intelligence", f"playback:{book}", "--mcp", f"ev={srv.url}",
                "--mode", "reactive", "--wake-on-start", "--debounce", "0.2",
                "--ping-interval", "60"]
        for uri in EVERYTHING_DOCS:
            argv += ["--subscribe", uri]
        ag = Agentd(argv, tmp_path)
        try:
            ag.wait_until(lambda: len(ag.wake_lines()) >= 2)
        finally:
            code = ag.stop(signal.SIGTERM)
    finally:
        srv.stop()
    assert code == 130
    lines, runs = ag.wake_lines(), ag.events("reactive.run")
    assert len(lines) == len(runs) >= 2  # N wakes' runs -> N lines
    assert [ln["wake"] for ln in lines] == [r["seq"] for r in runs]
    first, second = lines[:2]
    assert first["wake"] == 0 and sorted(first["uris"]) == sorted(EVERYTHING_DOCS)
    assert second["wake"] == 1 and set(second["uris"]) <= set(EVERYTHING_DOCS)
    assert all(ln["status"] == "completed" and ln["result"] == "toggled" for ln in lines)
    assert ag.events("reactive.wake")[0]["seq"] == 1  # the first update came after wake 0
    res = ag.result()
    assert res["status"] == "interrupted" and res["steps"] == sum(ln["steps"] for ln in lines)
