"""`agentd batch` benchmark: samples/s of one batch vs a process per sample, and replay.

    python benchmarks/bench_batch.py [--samples 256] [--parallel 16]
                                     [--model-latency S] [--no-loop]
                                     [--fast-agent-python PATH] [--no-fast-agent]

Every sample is two model calls and one tool call: the gateway
(tests/support/gateway.py, in this process, answering at once, or after
``--model-latency`` seconds: a model's time) asks for
``sdk__echo`` and then answers with the echoed text; the MCP side is the
official SDK server (tests/support/sdk_servers.py, its own process). The same
samples run four ways, in the same run, against the same gateway and server:

* ``batch``  -- ``agentd batch --parallel P --record DIR``: one process, one
  connection to the server, samples as forked children of the batch root;
* ``loop``   -- ``agentd --instruction …`` once per sample, P at a time
  (the shell loop the batch replaces: every run imports, connects,
  handshakes and lists on its own);
* ``fast_agent`` -- fast-agent-mcp 0.10.48's ``BatchRunner`` over the same
  tasks file at the same parallelism (its own venv on Python >= 3.12, made
  once and cached: benchmarks/fast_agent_batch.py); a second JSON line,
  ``{"bench": "batch_fast_agent", ...}``, or ``"skipped": reason`` where
  fast-agent cannot be had;
* ``replay`` -- ``agentd batch --replay DIR``: the batch's cassettes, the
  gateway's request count checked to stay 0;
* ``scored`` -- the ``batch`` column again with a target per task and the
  built-in scorers ``exact``, ``includes``, ``regex`` and ``json``; and
  ``scored_command`` with one ``command:`` scorer (a Python process per
  sample): scoring on vs off (``batch``), in the same run; and ``trajectories``,
  the same with ``--trajectories DIR`` (one ATIF file per sample).

Each live column reports the gateway's requests and the server's tool calls
it caused (``*_gateway_requests``, ``*_tool_calls``: 2 and 1 per sample), the
most samples the gateway saw between their first and last model call at once
(``*_max_in_flight``: a lower bound of the column's real parallelism), and the
CPU its processes used (``*_cpu_s``, user + system, children reaped included);
its wall time is the whole process's, start to exit.

``--no-loop`` leaves the process-per-sample loop out (the replay-vs-live
figure with a model latency does not need it).

Prints two JSON lines. Figures only; nothing asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

import aiohttp  # noqa: E402
import fast_agent_batch  # noqa: E402
from batch_helpers import Samples, read_results, write_tasks  # noqa: E402
from gateway import Gateway  # noqa: E402
from peers import python_peer  # noqa: E402


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_INTELLIGENCE")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["AGENTD_LOG_LEVEL"] = "warning"
    env.setdefault("AGENTD_MODEL", "bench-model")  # an http gateway needs a model (docs/cli.md)
    return env


async def _run(*args: str) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentd", *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env())
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out, err


def _cpu() -> float:
    """CPU seconds of this process's reaped children (and theirs) so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


async def _tool_calls(mcp_url: str) -> int:
    """The server's tools/call count so far (tests/support/sdk_servers.py's GET /stats)."""
    async with aiohttp.ClientSession() as http, \
            http.get(mcp_url.removesuffix("/mcp") + "/stats") as resp:
        return int((await resp.json())["calls"])


async def main(samples: int, parallel: int, latency: float, loop: bool,
               fa_python: Path | str) -> list[dict]:
    """`fa_python`: fast-agent's venv interpreter, or the reason it is skipped."""
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    tasks, rec = work / "tasks.jsonl", work / "rec"
    write_tasks(tasks, samples)
    instructions = [json.loads(ln)["instruction"] for ln in tasks.read_text().splitlines()]
    figures: dict = {"bench": "batch", "samples": samples, "parallel": parallel,
                     "model_latency_s": latency}
    fa: dict = {"bench": "batch_fast_agent", "samples": samples, "parallel": parallel,
                "model_latency_s": latency, "version": fast_agent_batch.VERSION}
    responder = Samples(latency=latency)
    with python_peer("sdk_servers.py") as server:
        mcp = f"sdk={server.url}"
        # two answers per sample and live column: batch, scored, scored_command,
        # trajectories and the loop
        async with Gateway([responder] * (10 * samples + 16)) as gw:
            t0, cpu = time.perf_counter(), _cpu()
            rc, _, err = await _run("batch", "--tasks", str(tasks), "--out",
                                    str(work / "batch.jsonl"), "--parallel", str(parallel),
                                    "--intelligence", gw.url, "--mcp", mcp, "--record", str(rec))
            wall = time.perf_counter() - t0
            assert rc == 0, err.decode()[-2000:]
            assert len(read_results(work / "batch.jsonl")) == samples
            figures.update(batch_wall_s=round(wall, 3),
                           batch_samples_per_s=round(samples / wall, 2),
                           batch_gateway_requests=len(gw.bodies),
                           batch_tool_calls=await _tool_calls(server.url),
                           batch_max_in_flight=responder.max_open,
                           batch_cpu_s=round(_cpu() - cpu, 2))

            for column, scorers in (("scored", ("exact", "includes", "regex", "json")),
                                    ("scored_command", (f"command:{sys.executable} -c "
                                                        f"{json.dumps(SCORER)}",))):
                flags = [x for s in scorers for x in ("--scorer", s)]
                figures.update(await _scored(column, flags, work, tasks, parallel, gw.url,
                                             mcp, samples))
            figures.update(await _scored("trajectories", ["--trajectories",
                                                          str(work / "trajectories")],
                                         work, tasks, parallel, gw.url, mcp, samples))

            gate = asyncio.Semaphore(parallel)
            failed = 0

            async def one(instruction: str) -> None:
                nonlocal failed
                async with gate:
                    rc, _, _ = await _run("--instruction", instruction, "--intelligence",
                                          gw.url, "--mcp", mcp)
                    failed += rc != 0

            if loop:
                before, calls = len(gw.bodies), await _tool_calls(server.url)
                responder.max_open = 0
                t0, cpu = time.perf_counter(), _cpu()
                await asyncio.gather(*(one(i) for i in instructions))
                wall = time.perf_counter() - t0
                figures.update(loop_wall_s=round(wall, 3),
                               loop_samples_per_s=round(samples / wall, 2), loop_failed=failed,
                               loop_gateway_requests=len(gw.bodies) - before,
                               loop_tool_calls=await _tool_calls(server.url) - calls,
                               loop_max_in_flight=responder.max_open,
                               loop_cpu_s=round(_cpu() - cpu, 2))

            if isinstance(fa_python, str):
                fa["skipped"] = fa_python
            else:
                before, calls = len(gw.bodies), await _tool_calls(server.url)
                responder.max_open, cpu = 0, _cpu()
                try:
                    wall, rows = await fast_agent_batch.run(
                        fa_python, work, tasks, parallel, gw.url, server.url)
                except fast_agent_batch.Unavailable as exc:
                    fa["skipped"] = str(exc)
                else:
                    # a sample counts as done when its answer is the echoed text
                    done = sum(r.get("ok") is True and r.get("result")
                               == f"done {int(r['id'][1:])}: echo {int(r['id'][1:])}"
                               for r in rows)
                    fa.update(wall_s=round(wall, 3), samples_per_s=round(samples / wall, 2),
                              rows=len(rows), done=done,
                              gateway_requests=len(gw.bodies) - before,
                              tool_calls=await _tool_calls(server.url) - calls,
                              max_in_flight=responder.max_open,
                              cpu_s=round(_cpu() - cpu, 2),
                              batch_vs_fast_agent=round(figures["batch_samples_per_s"]
                                                        / (samples / wall), 2))

            before = len(gw.bodies)
            t0, cpu = time.perf_counter(), _cpu()
            rc, _, err = await _run("batch", "--tasks", str(tasks), "--out",
                                    str(work / "replay.jsonl"), "--parallel", str(parallel),
                                    "--mcp", mcp, "--replay", str(rec))
            wall = time.perf_counter() - t0
            assert rc == 0, err.decode()[-2000:]
            figures.update(replay_wall_s=round(wall, 3),
                           replay_samples_per_s=round(samples / wall, 2),
                           replay_gateway_requests=len(gw.bodies) - before,
                           replay_cpu_s=round(_cpu() - cpu, 2))
    if loop:
        figures["batch_vs_loop"] = round(figures["batch_samples_per_s"]
                                         / figures["loop_samples_per_s"], 2)
    figures["replay_vs_batch"] = round(figures["replay_samples_per_s"]
                                       / figures["batch_samples_per_s"], 2)
    for column in ("scored", "scored_command"):
        figures[f"{column}_vs_batch"] = round(figures[f"{column}_samples_per_s"]
                                              / figures["batch_samples_per_s"], 2)
    return [figures, fa]


SCORER = ("import json,sys; d=json.load(sys.stdin); "
          "print(json.dumps({'reward': float(d['result']['result'] == d['sample']['target'])}))")


def _targeted(tasks: Path, path: Path) -> Path:
    """`tasks` with each sample's right answer as its target."""
    with path.open("w") as f:
        for line in tasks.read_text().splitlines():
            task = json.loads(line)
            n = int(task["id"][1:])
            f.write(json.dumps({**task, "target": f"done {n}: echo {n}"}) + "\n")
    return path


async def _scored(column: str, flags: list[str], work: Path, tasks: Path,
                  parallel: int, url: str, mcp: str, samples: int) -> dict:
    """The batch column again with `flags`: each sample scored against its target
    (`--scorer`), or its trajectory written (`--trajectories`)."""
    targeted = _targeted(tasks, work / f"{column}-tasks.jsonl")
    out = work / f"{column}.jsonl"
    t0, cpu = time.perf_counter(), _cpu()
    rc, _, err = await _run("batch", "--tasks", str(targeted), "--out", str(out),
                            "--parallel", str(parallel), "--intelligence", url, "--mcp", mcp,
                            *flags)
    wall = time.perf_counter() - t0
    assert rc == 0, err.decode()[-2000:]
    results = read_results(out)
    assert len(results) == samples and all(
        "--scorer" not in flags or min(r["scores"].values()) == 1.0 for r in results), results[:2]
    return {f"{column}_wall_s": round(wall, 3),
            f"{column}_samples_per_s": round(samples / wall, 2),
            f"{column}_cpu_s": round(_cpu() - cpu, 2)}


def _fast_agent(explicit: str | None, wanted: bool) -> Path | str:
    """fast-agent's venv interpreter (made or reused), or why it cannot be had."""
    if not wanted:
        return "--no-fast-agent"
    try:
        return fast_agent_batch.ensure_venv(fast_agent_batch.find_python(explicit))
    except fast_agent_batch.Unavailable as exc:
        return str(exc)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--model-latency", type=float, default=0.0)
    ap.add_argument("--no-loop", action="store_true")
    ap.add_argument("--fast-agent-python", help="a Python >= 3.12 for fast-agent's venv "
                    "(default: the newest found)")
    ap.add_argument("--no-fast-agent", action="store_true")
    a = ap.parse_args()
    fa_python = _fast_agent(a.fast_agent_python, not a.no_fast_agent)
    for line in asyncio.run(main(a.samples, a.parallel, a.model_latency, not a.no_loop,
                                 fa_python)):
        print(json.dumps(line))
