"""The run-level fault policy (spec §1.4 "classify per the retry/abort policy",
§1.7 stale servers), through the real console script against official-SDK peers.

* a required server that answers 401 after connecting (its credentials revoked
  by the `logout` tool) ends the run: exit 1, `status: "failed"`, a result
  naming the server and the fault;
* the same fault on an optional server takes its tools out of the catalogue
  and the model is told once, fenced, and the run goes on;
* a required server that stops answering pings (the SDK server's process
  stopped with SIGSTOP: the kernel still accepts, nothing answers) is marked
  stale after three misses and the run fails naming it — it is not reconnected
  forever.

The pinger's knob is at a small value (``--ping-interval 0.2``, so each miss
is one interval and one ping timeout of that length), and where the model must "think" until the
server has changed (frozen, or back with a rogue certificate), it is the test's
own gateway (tests/support/gateway.py), holding its answer until agentd has logged what
the test waits for: no fixed delay is the synchronisation.  The rules walked
here (the miss count, the Retry-After as the one delay) are unit-tested with an
injected clock and sleep in tests/client/test_client_units.py and
tests/client/test_fault_once.py; these tests prove the process acts on them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import peers
from agentd_proc import Agentd, agentd_env, start_agentd
from gateway import Gateway, Reply

TOKEN = "srv-tok-51d0c7e2a9"
PING = "0.2"  # --ping-interval: seconds (a ping's answer is awaited as long)



def _stats(port: int) -> dict:
    """The fault peer's own counters (what it was sent), read over its side door."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=30) as r:
        return json.loads(r.read())

def _config(tmp: Path, url: str, *, required: bool) -> Path:
    path = tmp / "agentd.toml"
    path.write_text(
        "[[mcp_servers]]\n"
        f'name = "srv"\nurl = "{url}"\nrequired = {"true" if required else "false"}\n'
        'headers = { Authorization = "Bearer {{secret:SRV_TOKEN}}" }\n')
    return path


def _playback(tmp: Path, turns: list[dict]) -> Path:
    path = tmp / "faults.playback.json"
    path.write_text(json.dumps({"playback": 1, "scripts": [
        {"name": "faults", "match": "[faults]", "turns": turns}]}))
    return path


def _run(agentd_bin: str, tmp: Path, cfg: Path, play: Path, *extra: str
         ) -> subprocess.CompletedProcess:
    return subprocess.run(
        [agentd_bin, "--instruction", "[faults] use the tools", "--config", str(cfg),
         "--intelligence", f"playback:{play}", "--ping-interval", "60", *extra],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "AGENTD_SECRET_SRV_TOKEN": TOKEN})


def _shown(body: dict) -> str:
    """What the model was shown since its last turn (the gateway's view of a
    playback turn's ``expect``)."""
    messages = body["messages"]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"),
               default=-1)
    return json.dumps(messages[last + 1:])


def _events(stderr: str, name: str) -> list[dict]:
    out = []
    for line in stderr.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == name:
            out.append(rec)
    return out


REVOKE_TURNS = [
    {"tool_calls": [{"name": "srv__echo", "arguments": {"text": "before"}}]},
    {"expect": "before", "tool_calls": [{"name": "srv__logout", "arguments": {}}]},
    {"expect": "logged out",
     "tool_calls": [{"name": "srv__echo", "arguments": {"text": "after"}}]},
]


def test_required_server_401_after_connect_fails_the_run(agentd_bin, tmp_path) -> None:
    with peers.python_peer("fault_peers.py", "--bearer", TOKEN) as srv:
        play = _playback(tmp_path, [*REVOKE_TURNS, {"content": "must not be reached"}])
        proc = _run(agentd_bin, tmp_path, _config(tmp_path, srv.url, required=True), play)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["status"] == "failed"
    assert out["result"]["server"] == "srv"
    assert "401" in out["result"]["fault"]
    assert _events(proc.stderr, "mcp.required_lost")
    faults = _events(proc.stderr, "mcp.fault")
    assert faults and faults[-1]["kind"] == "abort"
    assert TOKEN not in proc.stderr + proc.stdout


def test_optional_server_401_leaves_the_catalogue_and_the_model_is_told(
        agentd_bin, tmp_path) -> None:
    with peers.python_peer("fault_peers.py", "--bearer", TOKEN) as srv:
        play = _playback(tmp_path, [
            *REVOKE_TURNS,
            # the call's answer says so, fenced as untrusted data ...
            {"expect": ["left out of the catalogue", "[UNTRUSTED"],
             "tool_calls": [{"name": "srv__echo", "arguments": {"text": "again"}}]},
            # ... and the tool is gone: agentd's own notice, nothing was sent
            {"expect": "there is no tool named", "content": "done without srv"},
        ])
        proc = _run(agentd_bin, tmp_path, _config(tmp_path, srv.url, required=False), play)
        stats = _stats(srv.port)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["status"] == "completed" and out["result"] == "done without srv"
    assert [e["server"] for e in _events(proc.stderr, "mcp.server.dropped")] == ["srv"]
    assert stats["calls"] == 2  # echo + logout: nothing after the server was left out


def test_server_that_stops_answering_pings_is_stale_and_fails_the_run(
        agentd_bin, tmp_path) -> None:
    srv = peers.python_peer("fault_peers.py", "--bearer", TOKEN, "--legacy").start()
    stopped = False
    try:
        play = _playback(tmp_path, [
            {"tool_calls": [{"name": "srv__echo", "arguments": {"text": "alive"}}]},
            {"expect": "alive", "delay": 120, "content": "never"},
        ])
        cfg = _config(tmp_path, srv.url, required=True)
        ag = Agentd([agentd_bin, "--instruction", "[faults] use the tools", "--config",
                     str(cfg), "--intelligence", f"playback:{play}", "--ping-interval", PING],
                    tmp_path, env={"AGENTD_SECRET_SRV_TOKEN": TOKEN})
        try:
            ag.wait_event("tool.result")
            assert srv.proc is not None
            os.kill(srv.proc.pid, signal.SIGSTOP)  # alive, accepting, never answering
            stopped = True
            code = ag.proc.wait(timeout=90)
        finally:
            if ag.proc.poll() is None:
                ag.stop()
        assert code == 1, ag.err.read_text()[-3000:]
        out = ag.result()
        assert out["status"] == "failed" and out["result"]["server"] == "srv"
        assert "stale" in out["result"]["fault"]
        misses = [e["misses"] for e in ag.events("mcp.ping.missed")]
        assert misses[:3] == [1, 2, 3]
        assert ag.events("mcp.stale") and not ag.events("mcp.reconnect.failed")
    finally:
        if stopped and srv.proc is not None:
            os.kill(srv.proc.pid, signal.SIGCONT)
        srv.stop()


def test_required_server_refusing_a_tool_it_listed_fails_the_run(agentd_bin, tmp_path) -> None:
    with peers.python_peer("fault_peers.py", "--bearer", TOKEN) as srv:
        play = _playback(tmp_path, [
            {"tool_calls": [{"name": "srv__contradict", "arguments": {}}]},
            {"content": "must not be reached"}])
        proc = _run(agentd_bin, tmp_path, _config(tmp_path, srv.url, required=True), play)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["status"] == "failed" and out["result"]["server"] == "srv"
    assert "-32602" in out["result"]["fault"] and "listed" in out["result"]["fault"]


async def test_optional_stale_server_is_left_out_and_the_model_told(agentd_bin,
                                                                   tmp_path) -> None:
    srv = peers.python_peer("fault_peers.py", "--bearer", TOKEN, "--legacy").start()
    stopped = False
    thought = asyncio.Event()  # the model "thinks" until the server was left out
    try:
        async with Gateway([
            Reply.tools(("srv__echo", {"text": "alive"})),
            Reply(tool_calls=[("srv__echo", {"text": "again"}, "call_again")], gate=thought),
            Reply.text("carried on"),
        ]) as gw:
            cfg = _config(tmp_path, srv.url, required=False)
            ag = await start_agentd(agentd_bin, [
                "--instruction", "use the tools", "--config", str(cfg),
                "--intelligence", gw.url, "--ping-interval", PING],
                env=agentd_env(AGENTD_SECRET_SRV_TOKEN=TOKEN))
            await ag.wait_for_event("tool.result")
            assert srv.proc is not None
            os.kill(srv.proc.pid, signal.SIGSTOP)  # frozen while the model thinks
            stopped = True
            await ag.wait_for_event("mcp.server.dropped", server="srv")
            thought.set()
            done = await ag.done()
        assert done.rc == 0, done.stderr[-3000:]
        assert done.result["result"] == "carried on"
        assert [e["server"] for e in done.events("mcp.server.dropped")] == ["srv"]
        assert "alive" in _shown(gw.bodies[1])
        # left out while the model thought: its next step says so, and why ...
        told = _shown(gw.bodies[2])
        assert "left out of the catalogue" in told and "stale" in told
        # ... and its tools are gone from the catalogue the model is offered
        assert "srv__echo" in json.dumps(gw.bodies[1].get("tools", []))
        assert "srv__echo" not in json.dumps(gw.bodies[2].get("tools", []))
    finally:
        if stopped and srv.proc is not None:
            os.kill(srv.proc.pid, signal.SIGCONT)
        srv.stop()


def test_429_with_retry_after_and_5xx_are_retried(agentd_bin, tmp_path) -> None:
    with peers.python_peer("fault_peers.py", "--bearer", TOKEN) as srv:
        # Retry-After: 0 -- the server's value, not the backoff (never 0), is the
        # one delay before each re-send (the wait itself: test_fault_once.py)
        play = _playback(tmp_path, [
            {"tool_calls": [{"name": "srv__throttle", "arguments": {"n": 2, "retry_after": 0}}]},
            {"expect": "throttling",
             "tool_calls": [{"name": "srv__echo", "arguments": {"text": "through 429"}}]},
            {"expect": "through 429",
             "tool_calls": [{"name": "srv__throttle",
                             "arguments": {"n": 1, "status": 503, "retry_after": 0}}]},
            {"expect": "throttling",
             "tool_calls": [{"name": "srv__echo", "arguments": {"text": "through 503"}}]},
            {"expect": "through 503", "content": "all through"},
        ])
        proc = _run(agentd_bin, tmp_path, _config(tmp_path, srv.url, required=True), play)
        stats = _stats(srv.port)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["result"] == "all through"
    assert stats["throttled"] == 3
    retries = _events(proc.stderr, "mcp.retry")
    reasons = [e["reason"] for e in retries]
    assert reasons.count("HTTP 429") == 2 and reasons.count("HTTP 503") == 1
    assert [e["delay_s"] for e in retries] == [0.0, 0.0, 0.0]


async def test_tls_verification_failure_after_connect_fails_the_run(agentd_bin,
                                                                   tmp_path) -> None:
    """The server comes back (same port) with a certificate agentd does not trust:
    the reconnect fails TLS verification, an abort fault on a required server."""
    trustme = peers.import_peer("trustme")
    files = {}
    for name in ("trusted", "rogue"):
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        files[name] = (tmp_path / f"{name}.crt", tmp_path / f"{name}.key", tmp_path / f"{name}-ca.pem")
        cert.cert_chain_pems[0].write_to_path(str(files[name][0]))
        cert.private_key_pem.write_to_path(str(files[name][1]))
        ca.cert_pem.write_to_path(str(files[name][2]))
    port = peers.free_port()

    def server(name: str) -> peers.PythonPeer:
        crt, key, _ = files[name]
        return peers.python_peer("fault_peers.py", "--bearer", TOKEN, "--tls", str(crt),
                                 str(key), port=port)

    cfg = tmp_path / "agentd.toml"
    cfg.write_text("[[mcp_servers]]\n"
                   f'name = "srv"\nurl = "https://127.0.0.1:{port}/mcp"\n'
                   f'ca_file = "{files["trusted"][2]}"\n'
                   'headers = { Authorization = "Bearer {{secret:SRV_TOKEN}}" }\n')
    swapped = asyncio.Event()  # the model "thinks" until the rogue server is up
    first = server("trusted").start()
    rogue = None
    try:
        async with Gateway([
            Reply.tools(("srv__echo", {"text": "trusted"})),
            Reply(tool_calls=[("srv__echo", {"text": "rogue"}, "call_rogue")], gate=swapped),
            Reply.text("must not be reached"),
        ]) as gw:
            ag = await start_agentd(agentd_bin, [
                "--instruction", "use the tools", "--config", str(cfg),
                "--intelligence", gw.url, "--ping-interval", "60"],
                env=agentd_env(AGENTD_SECRET_SRV_TOKEN=TOKEN))
            await ag.wait_for_event("tool.result")
            first.kill()  # the connection drops; the next one meets the rogue certificate
            rogue = server("rogue").start()
            swapped.set()
            done = await ag.done()
    finally:
        first.stop()
        if rogue is not None:
            rogue.stop()
    assert done.rc == 1, done.stderr[-3000:]
    assert "trusted" in _shown(gw.bodies[1])
    assert len(gw.bodies) == 2  # the run ended at the fault: no step after it
    out = done.result
    assert out["status"] == "failed" and out["result"]["server"] == "srv"
    assert "TLS verification failed" in out["result"]["fault"]
