"""The tree under the real CLI: a SIGTERMed agentd drains its subagents (exit 130)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import pytest
from peers import ROOT as CHECKOUT
from tree_helpers import SPAWN_ONE, precompile, running
from waiting import until

pytestmark = pytest.mark.timeout(120)
ROOT = str(CHECKOUT)  # on the children's PYTHONPATH

SCRIPT = {"playback": 1, "scripts": [
    {"match": "orchestrate",
     "turns": [{"tool_calls": [{"name": "agentd__subagent_spawn",
                                "arguments": {"instruction": "stay warm", "warm": True}}]},
               {"delay": 60, "content": "never reached"}]},
    {"match": "", "turns": [{"content": "{\"ok\": true}"}], "repeat_last": True}]}


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


@pytest.mark.parametrize("spawn", ["exec", "forkserver"])
async def test_sigterm_drains_the_tree(tmp_path, spawn):
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(SCRIPT))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentd", "--instruction", "orchestrate", "--intelligence",
        f"playback:{pb}", "--spawn", spawn, "--drain-timeout", "5",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    pid = None
    try:
        async with asyncio.timeout(90):
            async for line in proc.stderr:
                event = json.loads(line)
                if event.get("event") == "subagent.spawn":
                    pid = event["pid"]
                if pid is not None and event.get("event") == "subagent.stderr" \
                        and '"run.end"' in event["line"]:  # its first turn is done
                    break
        assert pid is not None and running(pid)
        proc.send_signal(signal.SIGTERM)
        out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, err.decode()[-2000:]
    assert json.loads(out)["status"] == "interrupted"
    exits = [json.loads(ln) for ln in err.splitlines() if b'"subagent.exit"' in ln]
    assert [(e["handle"], e["status"]) for e in exits] == [("0.1", "cancelled")]
    assert await until(lambda: not running(pid), limit=10)


GRAPH = {"playback": 1, "scripts": [
    {"match": "run a graph",
     "turns": [{"tool_calls": [{"name": "agentd__graph_run", "arguments": {"nodes": [
                    {"id": "a", "instruction": "first step"},
                    {"id": "b", "instruction": "second step", "after": ["a"]}]}}]},
               {"expect": "\"status\":\"completed\"", "content": "{\"graph\": \"ran\"}"}]},
    {"match": "", "turns": [{"content": "{\"ok\": true}"}], "repeat_last": True}]}


async def test_graph_run_from_the_loop(tmp_path):
    pb = tmp_path / "graph.json"
    pb.write_text(json.dumps(GRAPH))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentd", "--instruction", "run a graph", "--intelligence",
        f"playback:{pb}", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert json.loads(out)["result"] == '{"graph": "ran"}'
    exits = [json.loads(ln) for ln in err.splitlines() if b'"subagent.exit"' in ln]
    assert [(e["handle"], e["status"]) for e in exits] == [("0.1", "completed"),
                                                          ("0.2", "completed")]


@pytest.mark.parametrize("flag", [("--log-level", "debug"), ()])
async def test_log_level_reaches_a_subagent_as_a_value(agentd_bin, tmp_path, flag):
    """--log-level, with no AGENTD_LOG_LEVEL in the environment, reaches the
    subagent (in child/configure; the flag no longer writes os.environ, see
    test_config_log): the child logs at debug only when the flag says so."""
    from agentd_proc import agentd_env, run_agentd

    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(SPAWN_ONE))
    env = agentd_env()
    env.pop("AGENTD_LOG_LEVEL", None)
    done = await run_agentd(agentd_bin, [*flag, "--instruction", "orchestrate",
                                         "--intelligence", f"playback:{pb}", "--spawn", "exec"],
                            env=env)
    assert done.rc == 0, done.stderr[-2000:]
    child = [json.loads(e["line"]) for e in done.events("subagent.stderr")
             if e["line"].startswith("{")]
    assert any(c.get("event") == "run.end" for c in child), done.stderr[-2000:]
    debug = [c for c in child if c.get("level") == "debug"]
    assert bool(debug) is bool(flag), child
