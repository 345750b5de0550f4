"""`agentd acp` beside the in-process run of the same task: prints one JSON line.

The task: a playback script of `STEPS` turns, each one tool call of a
self-tool (no network) and its result, then a final answer: `1 + 3*STEPS + 1`
session/update notifications per prompt.  Figures (median of `ROUNDS`):

* `acp_first_update_ms`: from sending `initialize` to the first
  `session/update` of a prompt (initialize, session/new, prompt) in an agentd
  process that has run one prompt already (`acp_cold_first_prompt_ms` is that
  first prompt whole: the run's modules are imported at the first prompt);
* `inproc_first_turn_ms`: the same prompt run in this process by
  `agentd.app.run.execute`, from the call to the loop's first `turn` hook;
* `acp_per_update_us` / `inproc_per_update_us`: the prompt's whole time over
  its updates (the ACP side includes encoding, the pipe and the client's decode).

Run: `PYTHONPATH=. python benchmarks/bench_acp.py`.  Results: docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

STEPS = 20
ROUNDS = 5


def _script(path: str) -> str:
    turns = [{"tool_calls": [{"name": "agentd__subagent_status",
                              "arguments": {"handle": f"0.{i}"}}]} for i in range(STEPS)]
    turns.append({"content": "done"})
    with open(path, "w") as fh:
        json.dump({"playback": 1, "turns": turns}, fh)
    return f"playback:{path}"


async def _acp_round(spec: str) -> tuple[float, float, int, float]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentd", "acp", "--intelligence", spec,
        "--max-steps", str(STEPS + 5), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None

    def send(obj: dict) -> None:
        proc.stdin.write(json.dumps(obj).encode() + b"\n")  # type: ignore[union-attr]

    async def read() -> dict:
        return json.loads(await proc.stdout.readline())  # type: ignore[union-attr]

    # warm the process first: one whole prompt in a throwaway session loads the
    # run's modules (lazily imported at the first prompt: `cold_first_prompt_ms`)
    send({"jsonrpc": "2.0", "id": 0, "method": "session/new",
          "params": {"cwd": "/", "mcpServers": []}})
    warm = (await read())["result"]["sessionId"]
    c0 = time.perf_counter()
    send({"jsonrpc": "2.0", "id": "w", "method": "session/prompt",
          "params": {"sessionId": warm, "prompt": [{"type": "text", "text": "go"}]}})
    while (await read()).get("id") != "w":
        pass
    cold_ms = (time.perf_counter() - c0) * 1e3
    t0 = time.perf_counter()
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
    await read()
    send({"jsonrpc": "2.0", "id": 2, "method": "session/new",
          "params": {"cwd": "/", "mcpServers": []}})
    sid = (await read())["result"]["sessionId"]
    t_prompt = time.perf_counter()
    send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
          "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}})
    first = None
    updates = 0
    while True:
        msg = await read()
        if msg.get("method") == "session/update":
            updates += 1
            first = first or time.perf_counter()
        elif msg.get("id") == 3:
            break
    end = time.perf_counter()
    proc.stdin.close()
    await proc.wait()
    assert first is not None
    return (first - t0) * 1e3, (end - t_prompt) / updates * 1e6, updates, cold_ms


async def _inproc_round(spec: str) -> tuple[float, float, int]:
    from agentd.acp.updates import Updates
    from agentd.app.run import execute, new_run_id
    from agentd.config.model import Config

    config = Config(instruction="go", intelligence=spec, max_steps=STEPS + 5)
    times: list[float] = []
    tracer = Updates(lambda u: times.append(time.perf_counter()), observation_bytes=65536)
    t0 = time.perf_counter()
    await execute(config, run_id=new_run_id(), tracer=tracer, serve=False, signals=False)
    end = time.perf_counter()
    return (times[0] - t0) * 1e3, (end - t0) / len(times) * 1e6, len(times)


async def main() -> None:
    from agentd.log import configure

    configure(fmt="json", level="error")
    with tempfile.TemporaryDirectory() as tmp:
        spec = _script(os.path.join(tmp, "script.json"))
        acp = [await _acp_round(spec) for _ in range(ROUNDS)]
        inproc = [await _inproc_round(spec) for _ in range(ROUNDS)]
    print(json.dumps({
        "steps": STEPS, "updates": acp[0][2], "rounds": ROUNDS,
        "acp_first_update_ms": round(statistics.median(r[0] for r in acp), 2),
        "inproc_first_turn_ms": round(statistics.median(r[0] for r in inproc), 2),
        "acp_per_update_us": round(statistics.median(r[1] for r in acp), 1),
        "acp_cold_first_prompt_ms": round(statistics.median(r[3] for r in acp), 1),
        "inproc_per_update_us": round(statistics.median(r[1] for r in inproc), 1)}))


if __name__ == "__main__":
    asyncio.run(main())
