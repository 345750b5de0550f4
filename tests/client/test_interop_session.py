"""Interop with the servers people run: negotiation by need and session recovery.

* an SDK 2.3 low-level ``Server`` whose subscriptions are registered the 2025
  way (``on_subscribe_resource``), on an endpoint where ``server/discover``
  succeeds (tests/support/reactive_peers.py ``--era modern --no-listen``): the reactive
  daemon speaks 2025-11-25 to it, subscribes and wakes;
* server-everything restarted on the same port (it answers the old session
  HTTP 400 "No valid session ID provided", not 404): in task mode (the real
  console script, the restart made while a call to a second server is held
  by its `gate` tool; and the toolbox as task mode opens it) the next call
  succeeds after one re-initialize; in reactive mode the GET stream's 400
  re-initializes, re-subscribes and synthesizes the ``updated`` that wakes the
  daemon.

Real processes and sockets only; every wait is on a log event or a port.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import peers
import pytest
from agentd_proc import start_agentd
from logcapture import events

from agentd.config.model import ServerSpec
from agentd.mcp import Toolbox
from agentd.mcp.client.answered import Answered
from agentd.mcp.client.rules.faults import SessionExpired
from agentd.mcp.client.transport import StreamableHTTPTransport

A = "watch://counter/a"
DOC = "demo://resource/static/document/architecture.md"
INSTRUCTION = "When a watched resource changes, note it"


def playback(tmp: Path) -> Path:
    path = tmp / "interop.playback.json"
    path.write_text(json.dumps({"playback": 1, "scripts": [{
        "name": "wake", "match": "watched resource", "turns": [{"content": "noted"}]}]}))
    return path


def everything(port: int | None = None) -> peers.PeerProcess:
    bin_dir = peers.ensure_npm_peers("mcp-server-everything", "node")
    port = port or peers.free_port()
    return peers.PeerProcess([str(bin_dir / "mcp-server-everything"), "streamableHttp"], port,
                             env=peers.npm_env({"PORT": str(port)}))


def bump(port: int, uri: str) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/bump?uri={uri}", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


def wire(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=30) as r:
        return json.loads(r.read())["wire"]


async def test_reactive_renegotiates_a_listenless_2026_server_at_2025(agentd_bin, tmp_path):
    peers.require_modules("mcp", "uvicorn")
    with peers.python_peer("reactive_peers.py", "--era", "modern", "--no-listen") as srv:
        ag = await start_agentd(agentd_bin, [
            "--instruction", INSTRUCTION, "--intelligence", f"playback:{playback(tmp_path)}",
            "--mcp", f"watched={srv.url}", "--mode", "reactive", "--subscribe", A,
            "--debounce", "0", "--ping-interval", "60"])
        try:
            await ag.wait_for_event("reactive.ready", watched=[A])
            await asyncio.to_thread(bump, srv.port, A)
            await ag.wait_for_event("reactive.run", status="completed")
        finally:
            ag.signal()
            done = await ag.done()
        counts = await asyncio.to_thread(wire, srv.port)
    assert done.rc == 130, done.stderr  # interrupted by the signal, as reactive daemons are
    [ren] = done.events("mcp.renegotiated")
    assert ren["uri"] == A and ren["protocol_version"] == "2025-11-25"
    shakes = done.events("mcp.handshake")
    assert [(e["negotiated_by"], e["protocol_version"]) for e in shakes] == [
        ("server/discover", "2026-07-28"), ("initialize", "2025-11-25")]
    assert counts.get("server/discover") == 1 and counts.get("resources/subscribe") == 1
    assert "subscriptions/listen" not in counts  # discover said it cannot deliver
    assert not done.events("mcp.subscribe.refused") and not done.events("reactive.polling")
    [sub] = done.events("reactive.subscribed")  # pushed at 2025-11-25, not polled
    assert sub["uri"] == A


async def test_server_everything_unknown_session_is_expired_on_post_and_get():
    """The 400 server-everything answers a session it does not know (what it
    does after a restart) is SessionExpired on a POST and on the GET stream
    alike -- not a client error, not "GET stream not offered"."""
    with everything() as srv:
        t = StreamableHTTPTransport(srv.url, on_message=lambda _m: None)
        await t.open()
        try:
            t.session_id = "a-session-of-the-previous-process"
            t.set_protocol_version("2025-11-25")
            answer = Answered()
            with pytest.raises(SessionExpired) as post:
                await t.post(b'{"jsonrpc":"2.0","id":1,"method":"ping"}', answer)
            assert post.value.status == 400 and not answer.is_set()
            with pytest.raises(SessionExpired) as get:
                await t.listen()
            assert get.value.status == 400 and t.get_offered is None
        finally:
            await t.close()


async def test_task_mode_call_after_a_400_restart_reinitializes_once(logs):
    srv = everything().start()
    try:
        # reconnect_stale=False is how agentd/app/run.py opens the toolbox in task mode
        async with Toolbox([ServerSpec(name="ev", url=srv.url)], ping_interval=None,
                           reconnect_stale=False) as tb:
            assert (await tb.call("ev__echo", {"message": "one"})).text == "Echo: one"
            await asyncio.to_thread(srv.kill)
            await asyncio.to_thread(srv.start)  # same port, no session of ours
            obs = await tb.call("ev__echo", {"message": "two"})
            assert obs.text == "Echo: two" and not obs.is_error
            assert (await tb.call("ev__echo", {"message": "three"})).text == "Echo: three"
    finally:
        srv.stop()
    assert len(events(logs, "mcp.session.expired")) == 1
    shakes = events(logs, "mcp.handshake")
    assert [e["negotiated_by"] for e in shakes] == ["initialize", "initialize"]
    assert len(events(logs, "mcp.reconnected")) == 1
    assert not events(logs, "mcp.gone")


async def test_task_mode_cli_run_survives_a_400_restart_between_two_calls(agentd_bin, tmp_path):
    """`agentd` in task mode: echo on server-everything, then a call held by the
    gate server while server-everything restarts on its port, then echo again:
    it succeeds (the model sees its result) after one re-initialize."""
    peers.require_modules("mcp", "uvicorn")
    script = tmp_path / "task.playback.json"
    script.write_text(json.dumps({"playback": 1, "scripts": [{
        "name": "task", "match": "echo twice", "turns": [
            {"tool_calls": [{"name": "ev__echo", "arguments": {"message": "one"}}]},
            {"expect": "Echo: one", "tool_calls": [{"name": "gate__gate", "arguments": {}}]},
            {"expect": "open",
             "tool_calls": [{"name": "ev__echo", "arguments": {"message": "two"}}]},
            {"expect": "Echo: two", "content": "both echoed"}]}]}))
    srv = everything().start()
    try:
        with peers.python_peer("reactive_peers.py") as gate:
            ag = await start_agentd(agentd_bin, [
                "--instruction", "echo twice", "--intelligence", f"playback:{script}",
                "--mcp", f"ev={srv.url}", "--mcp", f"gate={gate.url}",
                "--ping-interval", "60"])
            await ag.wait_for_event("tool.call", tool="gate__gate")
            await asyncio.to_thread(srv.kill)
            await asyncio.to_thread(srv.start)  # same port, our session unknown to it
            # released before or after the held call reached it: either way it
            # answers only now, after the restart, so echo two meets the new process
            await asyncio.to_thread(urllib.request.urlopen, urllib.request.Request(
                f"http://127.0.0.1:{gate.port}/release", method="POST"), timeout=30)
            done = await ag.done()
    finally:
        srv.stop()
    assert done.rc == 0, done.stderr
    assert done.result["status"] == "completed" and done.result["result"] == "both echoed"
    assert done.events("mcp.session.expired")
    ev_shakes = [e for e in done.events("mcp.handshake") if e["server"] == "ev"]
    assert len(ev_shakes) == 2  # one re-initialize
    assert not done.events("tool.fault") and not done.events("mcp.gone")


@pytest.mark.parametrize("name", ["ev"])
async def test_reactive_400_restart_resubscribes_and_wakes(agentd_bin, tmp_path, name):
    srv = everything().start()
    try:
        ag = await start_agentd(agentd_bin, [
            "--instruction", INSTRUCTION, "--intelligence", f"playback:{playback(tmp_path)}",
            "--mcp", f"{name}={srv.url}", "--mode", "reactive", "--subscribe", DOC,
            "--debounce", "0", "--ping-interval", "60"])
        try:
            await ag.wait_for_event("reactive.ready", watched=[DOC])
            await asyncio.to_thread(srv.kill)
            await asyncio.to_thread(srv.start)
            await ag.wait_for_event("mcp.reconnected", resubscribed=1)
            await ag.wait_for_event("reactive.run", status="completed")  # the synthesized wake
        finally:
            ag.signal()
            done = await ag.done()
    finally:
        srv.stop()
    assert done.rc == 130, done.stderr  # interrupted by the signal, as reactive daemons are
    assert done.events("mcp.session.expired")  # the GET stream's (or probe's) 400
    assert len(done.events("mcp.handshake")) == 2
    assert not done.events("mcp.subscribe.restore_failed")
    assert not done.events("mcp.ping.missed")  # found at once, not by missed pings


async def test_a_server_without_subscriptions_at_either_revision_stays_at_2026(logs):
    """FastMCP 4 serves no subscriptions/listen (-32601) and advertises no
    resources.subscribe at 2025-11-25 either: the subscription degrades (False),
    the server is spoken to at 2026-07-28 again, and it is not asked twice."""
    peers.require_modules("fastmcp")
    with peers.python_peer("fastmcp_server.py") as srv:
        async with Toolbox([ServerSpec(name="fm", url=srv.url)], ping_interval=None) as tb:
            c = tb.clients["fm"]
            assert c.protocol_version == "2026-07-28"
            assert await tb.subscribe("mem://notes/2") is False
            assert not (await tb.read_resource("mem://notes/1")).is_error  # waits for it
            assert c.protocol_version == "2026-07-28" and c.legacy_refused
            assert await tb.subscribe("mem://notes/2") is False
    [failed] = events(logs, "mcp.renegotiate.failed")
    assert "either" in failed["error"]
    assert [e["negotiated_by"] for e in events(logs, "mcp.handshake")] == [
        "server/discover", "initialize", "server/discover"]
