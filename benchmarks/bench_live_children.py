"""Thousands of subagents alive at once, each waiting on a slow model (issue 43).

    python benchmarks/bench_live_children.py [--n 256,1024,2048] [--latency 10]
        [--rounds 1] [--spawn forkserver] [--via direct]

N sync spawns are made at once; each child makes two Chat Completions calls to a
loopback gateway (a process of its own) that answers each after `--latency`
seconds, and one `tools/call` on a loopback MCP server (agentd's `echo` demo
server), all brokered by the parent, so a child lives at least 2 x latency and
all N are alive together.  The Supervisor runs in this process with
`--max-children N --max-inflight-intelligence N` (the default of 64 would
serialise the slow model).  `--via selfmcp` makes the N spawns over the
self-MCP on loopback, as a peer of `agentd --serve-mcp` does (two more sockets
per child in this process); `--via direct` calls the Supervisor.

Prints one JSON line per N and round: how many completed and how many were
lost (`exited … before its result` and any other non-completed status, by
reason), the wall time against the ideal (2 x latency), the peak of live
children (sampled from the supervisor every 100 ms), memory per child (the
mean USS of the live children, from /proc/PID/smaps_rollup, read again at each
10 % higher peak; and the
machine's used memory at the peak less before, per child), this process's CPU
per child (the parent: the Supervisor, the broker's HTTP calls and the
spawning), and the machine limits met first: open files (this process's
RLIMIT_NOFILE against its peak of open fds), memory (MemAvailable at the
peak), pids (the cgroup's pids.max or kernel.pid_max against the peak of
processes).

The benchmark raises its own RLIMIT_NOFILE to the hard limit; an N whose
estimated need (fds_per_child x N + 256) exceeds it is refused with the limit
named, and so is an N whose estimated memory exceeds MemAvailable.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_fanout import io_peers, self_mcp, uss_rss  # noqa: E402

from agentd import log as agentd_log  # noqa: E402
from agentd import runtime  # noqa: E402
from agentd.agent.subagents import SpawnRequest  # noqa: E402
from agentd.app.compose import open_supervisor  # noqa: E402
from agentd.config.model import Config, ServerSpec  # noqa: E402

# Open fds in this process per live child: its three pipes (control in/out,
# stderr), a pidfd with --spawn exec, the HTTP connection of its model call in
# flight; the self-MCP adds the client's and the server's socket of its spawn.
FDS_PER_CHILD = {"direct": 5, "selfmcp": 7}
MIB_PER_CHILD = 8  # a child's USS is ~4 MiB (docs/benchmarks.md): twice, to be safe
SAMPLE_EVERY = 0.1


def raise_nofile() -> tuple[int, int]:
    """This process's RLIMIT_NOFILE raised to its hard limit: (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def meminfo() -> dict[str, int]:
    """/proc/meminfo in KiB."""
    out = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0])
    return out


def used_mib() -> float:
    m = meminfo()
    return (m["MemTotal"] - m["MemAvailable"]) / 1024


def pids_limit() -> tuple[str, int]:
    """The first limit on processes: the cgroup's pids.max, or kernel.pid_max."""
    try:
        with open("/proc/self/cgroup") as fh:
            rel = fh.read().strip().split("::", 1)[-1]
        with open(f"/sys/fs/cgroup{rel}/pids.max") as fh:
            v = fh.read().strip()
        if v != "max":
            return "pids.max", int(v)
    except (OSError, ValueError):
        pass
    with open("/proc/sys/kernel/pid_max") as fh:
        return "kernel.pid_max", int(fh.read())


def own_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def refusal(n: int, via: str, nofile: int) -> str | None:
    """Why this machine cannot hold N live children here (None: it can)."""
    need = FDS_PER_CHILD[via] * n + 256
    if need > nofile:
        return (f"RLIMIT_NOFILE {nofile} < ~{need} fds for {n} children: raise the hard "
                "limit (ulimit -Hn, LimitNOFILE=) and run again")
    avail = meminfo()["MemAvailable"] // 1024
    if MIB_PER_CHILD * n > avail:
        return f"MemAvailable {avail} MiB < ~{MIB_PER_CHILD * n} MiB for {n} children"
    return None


async def one_round(cfg: Config, n: int, latency: float, spawn: str, via: str) -> dict:
    from contextlib import AsyncExitStack

    async with open_supervisor(cfg, spawn=spawn) as sup, AsyncExitStack() as stack:
        client = await stack.enter_async_context(self_mcp(sup)) if via == "selfmcp" else None
        if spawn == "forkserver":  # it starts with the first spawn: not what is measured
            await sup.spawn("served", SpawnRequest("prime"))
        peak = {"live": 0, "fds": 0, "procs": 0, "uss_mib": 0.0, "used_mib": 0.0,
                "avail_mib": float("inf"), "uss_at": 1}
        used0 = used_mib()
        stop = asyncio.Event()

        def sample() -> None:
            live = [r for r in sup.registry.runs.values() if r.live and r.proc is not None
                    and r.proc.returncode is None]
            fds = len(os.listdir("/proc/self/fd"))
            peak["fds"] = max(peak["fds"], fds)
            if len(live) < peak["live"]:
                return
            peak["live"] = len(live)
            peak["procs"] = max(peak["procs"], len(live))
            m = meminfo()
            peak["used_mib"] = (m["MemTotal"] - m["MemAvailable"]) / 1024
            peak["avail_mib"] = m["MemAvailable"] / 1024

        async def sampler() -> None:
            while not stop.is_set():
                sample()
                if peak["live"] >= 1.1 * peak["uss_at"]:  # a new peak: their USS again
                    usses = []
                    for r in list(sup.registry.runs.values()):
                        if r.live and r.proc is not None:
                            try:
                                usses.append(uss_rss(r.proc.pid)[0])
                            except OSError:
                                pass
                    peak["uss_mib"] = sum(usses) / max(len(usses), 1)
                    peak["uss_at"] = max(len(usses), 1)
                try:
                    await asyncio.wait_for(stop.wait(), SAMPLE_EVERY)
                except TimeoutError:
                    pass

        sampling = asyncio.create_task(sampler())
        cpu0 = own_cpu_s()
        t0 = time.perf_counter()
        if client is not None:
            obs = await asyncio.gather(*(
                client.call_tool("subagent.spawn", {"instruction": f"task {i}"},
                                 time_limit=latency * 20 + 600)
                for i in range(n)))
            states = [o.structured or {} for o in obs]
            outcomes = [(s.get("status", "refused"), str(s.get("result"))[:80]) for s in states]
        else:
            done = await asyncio.gather(*(sup.spawn("served", SpawnRequest(f"task {i}"))
                                          for i in range(n)))
            outcomes = [(getattr(s, "status", "refused"),
                         str(getattr(s, "result", getattr(s, "text", "")))[:80]) for s in done]
        wall = time.perf_counter() - t0
        cpu = own_cpu_s() - cpu0
        stop.set()
        await sampling
    completed = sum(1 for status, _ in outcomes if status == "completed")
    lost = Counter(f"{status}: {why}" for status, why in outcomes if status != "completed")
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    pid_key, pid_max = pids_limit()
    avail = peak["avail_mib"]
    return {
        "n": n, "completed": completed, "lost": n - completed, "lost_by_reason": dict(lost),
        "wall_s": round(wall, 1), "ideal_s": 2 * latency,
        "peak_live_children": peak["live"],
        "uss_mib_per_child": round(peak["uss_mib"], 2),
        "machine_used_mib_per_child": round((peak["used_mib"] - used0) / max(peak["live"], 1),
                                            2),
        "parent_cpu_ms_per_child": round(cpu * 1000 / n, 2),
        "limits": {  # the share of each machine limit used at the peak: the highest meets first
            "fds": f"{peak['fds']}/{nofile} (RLIMIT_NOFILE)",
            "memory": f"{round(peak['used_mib'])} MiB used, {round(avail)} MiB available",
            "pids": f"{peak['procs']}/{pid_max} ({pid_key})",
            "first": max((("fds", peak["fds"] / nofile),
                          ("memory", peak["used_mib"] / (peak["used_mib"] + avail)),
                          ("pids", peak["procs"] / pid_max)), key=lambda kv: kv[1])[0]},
    }


async def main(args: argparse.Namespace) -> None:
    soft, _hard = raise_nofile()
    ns = [int(x) for x in args.n.split(",")]
    async with io_peers(args.latency) as (gw, mcp_url):
        for n in ns:
            why = refusal(n, args.via, soft)
            if why is not None:
                print(json.dumps({"n": n, "refused": why}), flush=True)
                continue
            cfg = Config(intelligence=gw, mcp=(ServerSpec(name="echo", url=mcp_url),),
                         max_children=n + 1, max_subagents=10 * n + 10,
                         max_inflight_intelligence=n, init_timeout=60.0,
                         ping_interval=3600.0, log_level="warning")
            for r in range(args.rounds):
                row = await one_round(cfg, n, args.latency, args.spawn, args.via)
                row.update(round=r + 1, spawn=args.spawn, via=args.via, cpus=os.cpu_count(),
                           load=round(os.getloadavg()[0], 1))
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="256,1024,2048")
    ap.add_argument("--latency", type=float, default=10.0,
                    help="seconds the gateway takes for each completion")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--spawn", choices=("exec", "forkserver"), default="forkserver")
    ap.add_argument("--via", choices=("direct", "selfmcp"), default="direct")
    a = ap.parse_args()
    for package in ("agentd", "agentd_native"):  # what every exec'd child imports
        compileall.compile_dir(str(ROOT / package), quiet=1)
    agentd_log.configure(level="warning")
    runtime.run(main(a))
