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
from agentd_proc import Agentd
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
    assert wire.get("resources/subscribe") == 2  # A (flag) and B (self), once each
    assert wire.get("resources/read", 0) >= len(runs)  # notify-then-read
    assert ag.events("reactive.drained")


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
        code = ag.proc.wait(timeout=WAIT)
        wire = stats(srv.port)["wire"]
    assert code == 6
    assert "resources/subscribe" not in wire
    (refused,) = ag.events("reactive.refused")
    assert A in refused["error"] and "'plain'" in refused["error"]
    assert "resources.subscribe" in refused["error"]
    assert ag.events("reactive.wake") == [] and ag.events("reactive.ready") == []


@pytest.mark.parametrize("flag", ["--subscribe"])
def test_reactive_template_is_usage_error(agentd_bin, flag) -> None:
    proc = subprocess.run([agentd_bin, "--instruction", "x", "--mode", "reactive", flag,
                           "watch://counter/{id}"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stdout == ""
