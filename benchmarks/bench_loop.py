"""Agent-loop overhead per step: what agentd adds around one tool call.

    python benchmarks/bench_loop.py [--steps N] [--rounds R]

One step = one answer of the intelligence + the tool call it asks for + the
observation going back into the conversation. The intelligence is `playback:`
(a script that calls a no-op tool forever), the tool a no-op MCP tool on a
real server over loopback HTTP, through the real Toolbox and MCP client.

Measured, interleaved, best of R rounds:

* `step_us`: wall time per step of the real loop (`agentd.agent.loop.Loop`);
* `tool_rtt_us`: the same tool called directly through the same Toolbox
  (its own round trip: client + HTTP + server);
* `overhead_us` = step - tool round trip, the median over rounds of each
  round's (interleaved) difference: the loop's own cost per step (target
  <= 1000 us); `overhead_min_based_us` is best step - best round trip;
* `inproc_step_us`: the loop with an in-process no-op self-tool instead of the
  MCP tool — the loop's overhead with no network at all (a cross-check);
* `loop_cpu_us`: process CPU time per step minus per direct call.

Logging runs at info level into /dev/null, so formatting costs are included.
The MCP server is agentd's own engine (`agentd.demo.servers echo`, in its own
process). Prints one JSON line. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentd import log as logmod  # noqa: E402
from agentd.agent.loop import Actions, Budgets, Loop, LoopState  # noqa: E402
from agentd.agent.selftools import SelfTools  # noqa: E402
from agentd.config.model import ServerSpec  # noqa: E402
from agentd.intelligence.playback import Playback  # noqa: E402
from agentd.mcp.client.toolbox import Toolbox  # noqa: E402
from agentd.mcp.selftool import SelfTool, ok  # noqa: E402


def script(path: Path, tool: str) -> Playback:
    path.write_text(json.dumps({"playback": 1, "repeat_last": True, "turns": [
        {"tool_calls": [{"name": tool, "arguments": {"text": "x"}}]}]}))
    return Playback(str(path))


async def loop_steps(intelligence: Playback, actions: Actions, steps: int) -> tuple[float, float]:
    loop = Loop(intelligence, actions, budgets=Budgets(max_steps=steps), state=LoopState())
    messages = loop.conversation("benchmark", toolbox=actions.toolbox)
    c0, t0 = time.process_time(), time.perf_counter()
    outcome = await loop.run(messages)
    t1, c1 = time.perf_counter(), time.process_time()
    assert outcome.status == "budget_exhausted" and loop.state.steps == steps
    return (t1 - t0) / steps, (c1 - c0) / steps


async def direct_calls(toolbox: Toolbox, tool: str, n: int) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        obs = await toolbox.call(tool, {"text": "x"})
        assert not obs.is_error
    t1, c1 = time.perf_counter(), time.process_time()
    return (t1 - t0) / n, (c1 - c0) / n


def start_server():
    """The no-op `echo` tool in its own process, on agentd's own MCP server engine."""
    from tests.peers import PeerProcess, free_port

    port = free_port()
    peer = PeerProcess([sys.executable, "-m", "agentd.demo.servers", "echo", str(port)],
                       port, cwd=ROOT).start()
    return peer, "agentd-engine (agentd.demo.servers echo)", "echo"


async def main_async(steps: int, rounds: int) -> dict:
    peer, engine, tool = start_server()
    devnull = open(os.devnull, "w")  # noqa: ASYNC230 - set-up, outside the timing
    logmod.configure(stream=devnull, level="info", fmt="json", run_id="bench")
    try:
        url = peer.url
        with tempfile.TemporaryDirectory() as tmp:
            async with Toolbox([ServerSpec(name="noop", url=url)], run_id="bench",
                               ping_interval=None) as toolbox:
                qualified = f"noop__{tool}"
                selftools = SelfTools(resources=toolbox)

                async def noop(args: dict) -> object:
                    return ok("x")

                selftools.add(SelfTool("noop", "no-op", {"type": "object"}, noop))
                actions = Actions(toolbox, selftools)
                pb_mcp = script(Path(tmp) / "mcp.json", qualified)
                pb_self = script(Path(tmp) / "self.json", "agentd__noop")
                # warm up
                await direct_calls(toolbox, qualified, 200)
                await loop_steps(pb_mcp, actions, 200)
                step, rtt, inproc, step_cpu, rtt_cpu = [], [], [], [], []
                for _ in range(rounds):
                    s, sc = await loop_steps(pb_mcp, actions, steps)
                    r, rc = await direct_calls(toolbox, qualified, steps)
                    i, _ = await loop_steps(pb_self, actions, steps)
                    step.append(s)
                    rtt.append(r)
                    inproc.append(i)
                    step_cpu.append(sc)
                    rtt_cpu.append(rc)
    finally:
        logmod.configure(stream=sys.stderr)
        devnull.close()
        peer.stop()
    us = 1e6
    overheads = [(s - r) * us for s, r in zip(step, rtt, strict=True)]
    return {
        "bench": "loop_overhead_per_step",
        "server": engine,
        "steps": steps,
        "rounds": rounds,
        "step_us": round(min(step) * us, 1),
        "tool_rtt_us": round(min(rtt) * us, 1),
        "overhead_us": round(statistics.median(overheads), 1),
        "overhead_min_based_us": round(min(step) * us - min(rtt) * us, 1),
        "inproc_step_us": round(min(inproc) * us, 1),
        "loop_cpu_us": round((min(step_cpu) - min(rtt_cpu)) * us, 1),
        "target_us": 1000,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        print(json.dumps(runner.run(main_async(a.steps, a.rounds))))


if __name__ == "__main__":
    main()
