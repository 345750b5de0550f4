"""The whole drain counts inside --drain-timeout (spec §1.7), in reactive mode too.

A reactive agentd (the console script) serves its self-MCP; an official-SDK
client spawns an async run whose child ignores SIGTERM (the test-only
`AGENTD_TEST_CHILD_FAULT=ignore_term`); its one declared MCP server (official
SDK) is then frozen with SIGSTOP, so closing that session never gets an
answer. On SIGTERM the drain's one clock is what ends it: the log says the drain ran out
(`run.drain.timeout`) and the process ends hard right after (`run.exit.hard`),
with nothing logged between but the interrupted run's own end; it exits 130 and
leaves no child behind. Event order, not durations, is asserted: a phase of the
drain that waited on the frozen server or the stuck child outside the one clock
would hang the process (the wait's ceiling fails the test) instead of reaching
the hard exit.
"""

from __future__ import annotations

import json
import os
import signal

import peers
from agentd_proc import Agentd

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

# --drain-timeout, small: the kill ladder spends nine tenths of it before its
# SIGKILL, so the child's end is logged before the drain's clock runs out (the
# order below), and closing the frozen server's session after that (its DELETE
# awaited up to http_transport.DELETE_LIMIT) is what the clock cuts.
DRAIN = 3.0
DEADLINE = 2.0  # --deadline: the root's first step and the freeze come well before it
HANG = DRAIN * 4 + 30  # the ceiling on waiting for the exit (a hang guard)


def drain_ended_by_its_clock(ag: Agentd) -> None:
    """The drain ran out on its one clock and the process ended hard at once."""
    names = [e.get("event") for e in ag.events()]
    assert names.count("run.drain.timeout") == 1, names
    cut = names.index("run.drain.timeout")
    after = names[cut + 1:]
    assert after[-1:] == ["run.exit.hard"], after  # the last word: nothing outlived it
    assert set(after[:-1]) <= {"run.interrupted", "run.end"}, after


def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            out += [int(x) for x in fh.read().split()]
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_reactive_drain_with_a_stuck_child_and_a_silent_server(agentd_bin, tmp_path):
    book = tmp_path / "drain.playback.json"
    book.write_text(json.dumps({"playback": 1, "scripts": [
        {"name": "worker", "match": "worker", "turns": [{"content": "idle"}]}]}))
    srv = peers.python_peer("fault_peers.py", "--legacy").start()
    frozen = False
    port = peers.free_port()
    ag = Agentd([agentd_bin, "--instruction", "be a worker", "--intelligence",
                 f"playback:{book}", "--mode", "reactive", "--subscribe", "file:///nowhere",
                 "--mcp", f"silent={srv.url}", "--serve-mcp", f"http://127.0.0.1:{port}",
                 "--drain-timeout", str(DRAIN), "--ping-interval", "60"],
                tmp_path, env={"AGENTD_TEST_CHILD_FAULT": "ignore_term"})
    try:
        ag.wait_event("mcp.serve.listening")
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams, \
                ClientSession(streams[0], streams[1]) as client:
            await client.initialize()
            r = await client.call_tool("subagent.spawn", {"instruction": "stuck", "async": True})
            assert r.structured_content["status"] == "running"
        ag.wait_event("subagent.spawn")  # started: its ladder starts with the drain
        kids = _children(ag.proc.pid)
        assert kids
        assert srv.proc is not None
        os.kill(srv.proc.pid, signal.SIGSTOP)  # the server never answers again
        frozen = True
        ag.proc.send_signal(signal.SIGTERM)
        code = ag.proc.wait(timeout=HANG)
        assert code == 130, ag.err.read_text()[-3000:]
        assert [e["signal"] for e in ag.events("run.signal")] == ["SIGTERM"]
        drain_ended_by_its_clock(ag)
        assert ag.result()["status"] == "interrupted"
        assert not [k for k in kids if _alive(k)]
    finally:
        if ag.proc.poll() is None:
            ag.proc.kill()
            ag.proc.wait()
        if frozen and srv.proc is not None:
            os.kill(srv.proc.pid, signal.SIGCONT)
        srv.stop()


def test_deadline_exit_has_a_hard_bound(agentd_bin, tmp_path):
    """Task mode: the deadline passes while a child ignores SIGTERM and the one MCP
    server is frozen; the drain after the deadline is bounded by --drain-timeout."""
    deadline = DEADLINE
    book = tmp_path / "deadline.playback.json"
    book.write_text(json.dumps({"playback": 1, "scripts": [
        {"name": "root", "match": "[root]", "turns": [
            {"tool_calls": [{"name": "agentd__subagent_spawn",
                             "arguments": {"instruction": "stuck", "async": True}}]},
            {"delay": 300, "content": "never"}]},
        {"name": "stuck", "match": "stuck", "turns": [{"content": "unreachable"}]},
    ]}))
    srv = peers.python_peer("fault_peers.py", "--legacy").start()
    frozen = False
    ag = Agentd([agentd_bin, "--instruction", "[root] work", "--intelligence",
                 f"playback:{book}", "--mcp", f"silent={srv.url}", "--deadline", str(deadline),
                 "--drain-timeout", str(DRAIN), "--ping-interval", "60"],
                tmp_path, env={"AGENTD_TEST_CHILD_FAULT": "ignore_term"})
    try:
        ag.wait_event("tool.result")
        kids = _children(ag.proc.pid)
        assert srv.proc is not None
        os.kill(srv.proc.pid, signal.SIGSTOP)
        frozen = True
        assert not ag.events("run.deadline"), "the deadline came before the server froze"
        code = ag.proc.wait(timeout=deadline + HANG)
        assert code == 4, ag.err.read_text()[-3000:]
        assert not ag.events("run.signal")  # the deadline, not a signal, ended it
        drain_ended_by_its_clock(ag)
        assert ag.result()["status"] == "deadline"
        assert not [k for k in kids if _alive(k)]
    finally:
        if ag.proc.poll() is None:
            ag.proc.kill()
            ag.proc.wait()
        if frozen and srv.proc is not None:
            os.kill(srv.proc.pid, signal.SIGCONT)
        srv.stop()
