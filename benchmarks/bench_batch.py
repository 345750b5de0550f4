"""`agentd batch` benchmark: samples/s of one batch vs a process per sample, and replay.

    python benchmarks/bench_batch.py [--samples 256] [--parallel 16]
                                     [--model-latency S] [--no-loop]

Every sample is two model calls and one tool call: the gateway
(tests/gateway.py, in this process, answering at once, or after
``--model-latency`` seconds: a model's time) asks for
``sdk__echo`` and then answers with the echoed text; the MCP side is the
official SDK server (tests/sdk_servers.py, its own process). The same
samples run three ways, in the same run, against the same gateway and server:

* ``batch``  -- ``agentd batch --parallel P --record DIR``: one process, one
  connection to the server, samples as forked children of the batch root;
* ``loop``   -- ``agentd --instruction …`` once per sample, P at a time
  (the shell loop the batch replaces: every run imports, connects,
  handshakes and lists on its own);
* ``replay`` -- ``agentd batch --replay DIR``: the batch's cassettes, the
  gateway's request count checked to stay 0.

``--no-loop`` leaves the process-per-sample loop out (the replay-vs-live
figure with a model latency does not need it).

fast-agent's BatchRunner is not compared (docs/benchmarks.md says why).

Prints one JSON line. Figures only; nothing asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from batch_helpers import Samples, read_results, write_tasks  # noqa: E402
from gateway import Gateway  # noqa: E402
from peers import python_peer  # noqa: E402


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_INTELLIGENCE")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["AGENTD_LOG_LEVEL"] = "warning"
    return env


async def _run(*args: str) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentd", *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env())
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out, err


async def main(samples: int, parallel: int, latency: float, loop: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    tasks, rec = work / "tasks.jsonl", work / "rec"
    write_tasks(tasks, samples)
    instructions = [json.loads(ln)["instruction"] for ln in tasks.read_text().splitlines()]
    figures: dict = {"bench": "batch", "samples": samples, "parallel": parallel,
                     "model_latency_s": latency}
    with python_peer("sdk_servers.py") as server:
        mcp = f"sdk={server.url}"
        async with Gateway([Samples(latency=latency)] * (4 * samples + 16)) as gw:
            t0 = time.perf_counter()
            rc, _, err = await _run("batch", "--tasks", str(tasks), "--out",
                                    str(work / "batch.jsonl"), "--parallel", str(parallel),
                                    "--intelligence", gw.url, "--mcp", mcp, "--record", str(rec))
            wall = time.perf_counter() - t0
            assert rc == 0, err.decode()[-2000:]
            assert len(read_results(work / "batch.jsonl")) == samples
            figures.update(batch_wall_s=round(wall, 3),
                           batch_samples_per_s=round(samples / wall, 2),
                           batch_gateway_requests=len(gw.bodies))

            gate = asyncio.Semaphore(parallel)
            failed = 0

            async def one(instruction: str) -> None:
                nonlocal failed
                async with gate:
                    rc, _, _ = await _run("--instruction", instruction, "--intelligence",
                                          gw.url, "--mcp", mcp)
                    failed += rc != 0

            if loop:
                t0 = time.perf_counter()
                await asyncio.gather(*(one(i) for i in instructions))
                wall = time.perf_counter() - t0
                figures.update(loop_wall_s=round(wall, 3),
                               loop_samples_per_s=round(samples / wall, 2), loop_failed=failed)

            before = len(gw.bodies)
            t0 = time.perf_counter()
            rc, _, err = await _run("batch", "--tasks", str(tasks), "--out",
                                    str(work / "replay.jsonl"), "--parallel", str(parallel),
                                    "--mcp", mcp, "--replay", str(rec))
            wall = time.perf_counter() - t0
            assert rc == 0, err.decode()[-2000:]
            figures.update(replay_wall_s=round(wall, 3),
                           replay_samples_per_s=round(samples / wall, 2),
                           replay_gateway_requests=len(gw.bodies) - before)
    if loop:
        figures["batch_vs_loop"] = round(figures["batch_samples_per_s"]
                                         / figures["loop_samples_per_s"], 2)
    figures["replay_vs_batch"] = round(figures["replay_samples_per_s"]
                                       / figures["batch_samples_per_s"], 2)
    return figures


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--model-latency", type=float, default=0.0)
    ap.add_argument("--no-loop", action="store_true")
    a = ap.parse_args()
    print(json.dumps(asyncio.run(main(a.samples, a.parallel, a.model_latency, not a.no_loop))))
