"""Faults with real processes: the parent never dies of a child's mistake.

A crashing child, a child writing a malformed or oversized frame, a child that
ignores SIGTERM, and a parent SIGKILLed with live children.  exec and
forkserver alike.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from peers import ROOT as CHECKOUT
from tree_helpers import exists, forkservers, make_config, precompile, running
from waiting import until

from agentd.agent.subagents import SpawnRequest
from agentd.app.compose import open_supervisor
from agentd.child.boot import FAULT_ENV
from agentd.tree.procs import child_argv, child_env

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


async def test_crashing_child_fails_parent_fine(tmp_path, spawn, monkeypatch):
    async with open_supervisor(make_config(tmp_path, spawn=spawn)) as sup:
        monkeypatch.setenv(FAULT_ENV, "crash")
        st = await sup.spawn("0", SpawnRequest("boom"))
        monkeypatch.delenv(FAULT_ENV)
        assert st.status == "failed"
        assert st.result == {"error": "exited with code 70 before its result"}
        assert not exists(sup.process(st.handle).pid)
        again = await sup.spawn("0", SpawnRequest("fine"))
        assert again.status == "completed"


async def test_send_to_a_warm_session_that_crashed(tmp_path, spawn, monkeypatch):
    async with open_supervisor(make_config(tmp_path, spawn=spawn)) as sup:
        monkeypatch.setenv(FAULT_ENV, "crash")
        ack = await sup.spawn("0", SpawnRequest("session", mode="warm"))
        monkeypatch.delenv(FAULT_ENV)
        state = await sup.send("0", ack.handle, "are you there?")
        assert state.status == "failed" and state.done


@pytest.mark.parametrize(("fault", "reason"), [
    ("malformed", "protocol error: malformed frame"),
    ("oversized", "protocol error: oversized frame: 2147483648 bytes exceeds the maximum"),
])
async def test_bad_frame_ends_the_child_through_the_ladder(tmp_path, spawn, monkeypatch,
                                                           fault, reason):
    async with open_supervisor(make_config(tmp_path, spawn=spawn)) as sup:
        monkeypatch.setenv(FAULT_ENV, fault)
        st = await sup.spawn("0", SpawnRequest("speak badly"))
        monkeypatch.delenv(FAULT_ENV)
        assert st.status == "failed"
        assert st.result["error"].startswith(reason)
        assert not exists(sup.process(st.handle).pid)
        assert (await sup.spawn("0", SpawnRequest("fine"))).status == "completed"


async def test_child_ignoring_sigterm_gets_sigkill_within_the_drain(tmp_path, spawn,
                                                                    monkeypatch):
    # a short drain: the ladder's rungs (ask, EOF, SIGTERM) are shares of it
    # (tree/procs.py), and the child ignoring all three meets the SIGKILL
    async with open_supervisor(make_config(tmp_path, spawn=spawn, drain_timeout=0.5)) as sup:
        monkeypatch.setenv(FAULT_ENV, "ignore_term")
        ack = await sup.spawn("0", SpawnRequest("stubborn", mode="async"))
        monkeypatch.delenv(FAULT_ENV)
        assert await until(lambda: sup.process(ack.handle) is not None)
        proc = sup.process(ack.handle)
        assert await until(lambda: sup.timing(ack.handle)[1] is not None)
        state = await sup.cancel("0", ack.handle)
        assert state.status == "cancelled"
        assert proc.returncode == -signal.SIGKILL
        assert not exists(proc.pid)


async def test_hanging_child_is_cancelled(tmp_path, spawn, monkeypatch):
    async with open_supervisor(make_config(tmp_path, spawn=spawn)) as sup:
        monkeypatch.setenv(FAULT_ENV, "hang")
        ack = await sup.spawn("0", SpawnRequest("never ends", mode="async"))
        monkeypatch.delenv(FAULT_ENV)
        assert await until(lambda: sup.process(ack.handle) is not None)
        pid = sup.process(ack.handle).pid
        assert running(pid)
        state = await sup.cancel("0", ack.handle)
        assert state.status == "cancelled" and state.partial is True
        assert sup.process(ack.handle).returncode == 0  # it answered the wire's cancel
        assert not exists(pid)


PARENT = textwrap.dedent("""
    import asyncio, json, sys
    from agentd.config.model import Config
    from agentd.agent.subagents import SpawnRequest
    from agentd.app.compose import open_supervisor
    from waiting import until

    async def main():
        cfg = Config(intelligence=sys.argv[1], spawn=sys.argv[2])
        async with open_supervisor(cfg) as sup:
            for i in range(3):
                await sup.spawn("0", SpawnRequest(f"w{i}", mode="warm"))
            await until(lambda: len(sup.live_pids()) == 3, what="three live children")
            print(json.dumps(sup.live_pids()), flush=True)
            await asyncio.sleep(3600)

    asyncio.run(main())
""")


ROOT = str(CHECKOUT)  # on the children's PYTHONPATH


async def test_parent_sigkilled_children_exit(tmp_path, spawn):
    cfg = make_config(tmp_path)
    env = dict(os.environ)
    tests = os.path.join(ROOT, "tests", "support")  # tests/support/waiting.py
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, tests, env.get("PYTHONPATH")) if p)
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PARENT, cfg.intelligence, spawn,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env)
    try:
        pids = json.loads(await parent.stdout.readline())
        assert len(pids) == 3 and all(running(p) for p in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        await parent.wait()
    # bounded poll (not a speed assertion): the death signal + EOF end them all
    assert await until(lambda: not any(running(p) for p in pids), limit=30.0)


async def test_forkserver_killed_children_fail_and_it_restarts(tmp_path):
    async with open_supervisor(make_config(tmp_path, spawn="forkserver")) as sup:
        ack = await sup.spawn("0", SpawnRequest("session", mode="warm"))
        assert await until(lambda: sup.status("0", ack.handle).result is not None)
        [server] = forkservers()
        os.kill(server, signal.SIGKILL)
        assert await until(lambda: sup.status("0", ack.handle).done)
        assert sup.status("0", ack.handle).status == "failed"
        st = await sup.spawn("0", SpawnRequest("after the restart"))
        assert st.status == "completed"
        assert len(forkservers()) == 1 and server not in forkservers()


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"jsonrpc": "2.0"}',
                                  b'{"jsonrpc": "2.0", "id": 1, "method": "child/run",'
                                  b' "params": {}}'])
def test_a_first_frame_that_is_not_child_configure_is_refused(body):
    """A child's first frame must be child/configure: anything else ends it with
    a usage exit and a line on its stderr, before it answers or imports anything."""
    frame = len(body).to_bytes(4, "big") + body
    proc = subprocess.run(child_argv(), input=frame, capture_output=True, env=child_env(),
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == b""  # nothing answered
    assert b"the first control frame is not child/configure" in proc.stderr


def test_child_configure_is_answered_with_the_childs_pid():
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "child/configure",
                       "params": {"handle": "0.1", "depth": 2, "instruction": "x"}}).encode()
    # the configure frame, then EOF: the child answers, then exits on the closed wire
    with subprocess.Popen(child_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=child_env()) as proc:
        out, _err = proc.communicate(len(body).to_bytes(4, "big") + body, timeout=60)
    size = int.from_bytes(out[:4], "big")
    answer = json.loads(out[4:4 + size])
    assert answer == {"jsonrpc": "2.0", "id": 7, "result": {"pid": proc.pid, "protocol": 1}}
