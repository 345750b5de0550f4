"""Fan-out of async subagents with playback children: exec vs forkserver, and the floors.

    python benchmarks/bench_fanout.py [--n 16,64,256] [--modes exec,forkserver] [--warm 8]

Prints one JSON line.  For each spawn mode and N: the wall time until all N
async spawns are terminal, children per second, the machine's busy CPU time
per child over that window (every process: this one, the forkserver, the
children — and whatever else runs), spawn-to-first-frame p50/p99
(from the spawn call to the child's answer to `child/configure`) under that
load, and the same latency for one child at a time on an idle machine.  Then
the unique (private) and total RSS of an idle warm child.  In the same run, the
floors: a bare `sys.executable -c` child answering one frame, and `os.fork`.

The fan-out goes over the self-MCP (`--via selfmcp`, the default): the
self-MCP is served on loopback over the Supervisor and agentd's own MCP client
calls `subagent.spawn {async: true}` N times concurrently; all-terminal is taken
from the supervisor's terminal callback.  `--via direct` calls the Supervisor
with the self-MCP's caller (`served`) instead, without the HTTP hop.  The
machine's load average is printed: other work on the machine skews everything,
the floors included, so compare within one line.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_host import busy_cpu_s, fork_burst  # noqa: E402

from agentd import log as agentd_log  # noqa: E402
from agentd import runtime  # noqa: E402
from agentd.config import Config  # noqa: E402
from agentd.tree.api import SpawnRequest  # noqa: E402
from agentd.tree.child import FAULT_ENV  # noqa: E402
from agentd.tree.supervisor import Supervisor  # noqa: E402

PLAYBACK = {"playback": 1, "turns": [{"content": "{\"ok\": true}",
                                      "usage": {"prompt_tokens": 3, "completion_tokens": 2}}],
            "repeat_last": True}

BARE_CHILD = (
    "import os\n"
    "n = int.from_bytes(os.read(0, 4), 'big')\n"
    "body = os.read(0, n)\n"
    "out = b'{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}'\n"
    "os.write(1, len(out).to_bytes(4, 'big') + out)\n"
)
FRAME = b'{"jsonrpc":"2.0","id":1,"method":"child/configure","params":{}}'


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return round(values[k] * 1000, 2)


# ----------------------------------------------------------------- floors
async def bare_child() -> float:
    """Spawn a bare interpreter, send one frame, return seconds to its answer."""
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", BARE_CHILD, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)
    proc.stdin.write(len(FRAME).to_bytes(4, "big") + FRAME)
    header = await proc.stdout.readexactly(4)
    await proc.stdout.readexactly(int.from_bytes(header, "big"))
    dt = time.perf_counter() - t0
    proc.stdin.close()
    await proc.wait()
    return dt


async def floor_bare(reps: int, n: int) -> dict:
    idle = [await bare_child() for _ in range(reps)]
    t0 = time.perf_counter()
    await asyncio.gather(*(bare_child() for _ in range(n)))
    wall = time.perf_counter() - t0
    return {"first_answer_p50_ms": pct(idle, 50), "first_answer_p99_ms": pct(idle, 99),
            "n": n, "children_per_s": round(n / wall, 1)}


def floor_fork(reps: int, n: int) -> dict:
    def one() -> float:
        r, w = os.pipe()
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.write(w, b"x")
            os._exit(0)
        os.read(r, 1)
        dt = time.perf_counter() - t0
        os.waitpid(pid, 0)
        os.close(r)
        os.close(w)
        return dt

    idle = [one() for _ in range(reps)]
    t0 = time.perf_counter()
    fork_burst(n)
    wall = time.perf_counter() - t0
    return {"first_answer_p50_ms": pct(idle, 50), "first_answer_p99_ms": pct(idle, 99),
            "n": n, "children_per_s": round(n / wall, 1)}


# ----------------------------------------------------------------- agentd
def uss_rss(pid: int) -> tuple[float, float]:
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[parts[0].rstrip(":")] = int(parts[1])
    uss = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return uss / 1024, fields.get("Rss", 0) / 1024


@contextlib.asynccontextmanager
async def self_mcp(sup: Supervisor):
    """Serve the self-MCP on loopback over `sup`; yield agentd's own MCP client to it."""
    from agentd.config import ServerSpec, ServeSpec
    from agentd.mcp.client import MCPClient
    from agentd.tree.selfmcp import serve_self_mcp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = ServeSpec(url=f"http://127.0.0.1:{port}", scheme="http", host="127.0.0.1", port=port)
    runner = await serve_self_mcp(spec, sup)
    try:
        async with MCPClient(ServerSpec(name="self", url=f"http://127.0.0.1:{port}/mcp"),
                             ping_interval=None) as client:
            yield client
    finally:
        await runner.stop()


async def fanout_configure_only(cfg: Config, n: int, via: str) -> dict:
    """Forked children that exit right after child/configure: fork, first frame, exit."""
    os.environ[FAULT_ENV] = "crash"  # read by the Supervisor as it admits each spawn
    try:
        res = await fanout(cfg, "forkserver", n, via)
    finally:
        del os.environ[FAULT_ENV]
    return {k: res[k] for k in ("n", "children_per_s", "busy_cpu_ms_per_child", "statuses")}


async def fanout(cfg: Config, mode: str, n: int, via: str) -> dict:
    async with Supervisor(cfg, spawn=mode) as sup, contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(self_mcp(sup)) if via == "selfmcp" else None
        all_done = asyncio.Event()
        ended: list[str] = []

        def terminal(state) -> None:
            ended.append(state.handle)
            if len(ended) == n:
                all_done.set()

        if mode == "forkserver":  # it starts with the first spawn: not what is measured
            await sup.spawn("served", SpawnRequest("prime"))
        sup.on_terminal(terminal)
        cpu0 = busy_cpu_s()
        t0 = time.perf_counter()
        if client is not None:  # over HTTP, as a peer does: subagent.spawn {async}
            obs = await asyncio.gather(*(
                client.call_tool("subagent.spawn", {"instruction": f"task {i}", "async": True})
                for i in range(n)))
            acks = [sup.status(o.structured["handle"]) for o in obs]
        else:
            acks = [await sup.spawn("served", SpawnRequest(f"task {i}", mode="async"))
                    for i in range(n)]
        await all_done.wait()
        wall = time.perf_counter() - t0
        cpu = busy_cpu_s() - cpu0
        states = [sup.status(a.handle) for a in acks]
        statuses = {s.status for s in states}
        failures = [s.result for s in states if s.status != "completed"][:3]
        firsts = []
        for a in acks:
            spawned, first = sup.timing(a.handle)
            if first is not None:
                firsts.append(first - spawned)
    return {"n": n, "all_terminal_s": round(wall, 3), "children_per_s": round(n / wall, 1),
            "busy_cpu_ms_per_child": round(cpu * 1000 / n, 2),
            "first_frame_p50_ms": pct(firsts, 50), "first_frame_p99_ms": pct(firsts, 99),
            "statuses": sorted(statuses), **({"failures": failures} if failures else {})}


async def idle_latency(cfg: Config, mode: str, reps: int) -> dict:
    async with Supervisor(cfg, spawn=mode) as sup:
        firsts = []
        if mode == "forkserver":
            await sup.spawn("served", SpawnRequest("prime"))
        for i in range(reps):
            st = await sup.spawn("served", SpawnRequest(f"one {i}"))
            spawned, first = sup.timing(st.handle)
            firsts.append(first - spawned)
    return {"first_frame_p50_ms": pct(firsts, 50), "first_frame_p99_ms": pct(firsts, 99)}


async def warm_rss(cfg: Config, mode: str, k: int) -> dict:
    async with Supervisor(cfg, spawn=mode) as sup:
        handles = [(await sup.spawn("served", SpawnRequest(f"warm {i}", mode="warm"))).handle
                   for i in range(k)]
        for h in handles:  # wait for each first turn: then the session is idle
            await sup.send("served", h, "ping")
        await asyncio.sleep(0.2)
        sizes = [uss_rss(sup.process(h).pid) for h in handles]
    return {"k": k, "uss_mib_mean": round(statistics.mean(s[0] for s in sizes), 1),
            "uss_mib_max": round(max(s[0] for s in sizes), 1),
            "rss_mib_mean": round(statistics.mean(s[1] for s in sizes), 1)}


async def main(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-"))
    pb = tmp / "playback.json"
    pb.write_text(json.dumps(PLAYBACK))
    ns = [int(x) for x in args.n.split(",")]
    cfg = Config(intelligence=f"playback:{pb}", max_children=max(ns), max_subagents=max(ns),
                 drain_timeout=10.0, init_timeout=60.0)
    out: dict = {"bench": "fanout", "via": args.via, "python": sys.version.split()[0],
                 "cpus": os.cpu_count(), "load": round(os.getloadavg()[0], 1),
                 "floors": {"bare_exec": await floor_bare(args.reps, 64),
                            "os_fork": floor_fork(args.reps, 256)}}
    if "forkserver" in args.modes:
        out["floors"]["forkserver_configure_only"] = await fanout_configure_only(
            cfg, max(ns), args.via)
    for mode in args.modes.split(","):
        res: dict = {"idle": await idle_latency(cfg, mode, args.reps), "fanout": []}
        for n in ns:
            res["fanout"].append(await fanout(cfg, mode, n, args.via))
        res["warm_idle"] = await warm_rss(cfg, mode, args.warm)
        out[mode] = res
    bare = out["floors"]["bare_exec"]["first_answer_p50_ms"]
    if "exec" in out:
        out["exec_first_frame_vs_bare"] = round(out["exec"]["idle"]["first_frame_p50_ms"] / bare, 2)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="16,64,256")
    ap.add_argument("--modes", default="exec,forkserver")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warm", type=int, default=8)
    ap.add_argument("--via", choices=("selfmcp", "direct"), default="selfmcp",
                    help="spawn over the self-MCP (HTTP, agentd's client) or call the Supervisor")
    ap.add_argument("--no-compile", action="store_true",
                    help="do not byte-compile agentd first (PYTHONDONTWRITEBYTECODE hurts exec)")
    a = ap.parse_args()
    if not a.no_compile:
        compileall.compile_dir(str(ROOT / "agentd"), quiet=1)
    os.environ["AGENTD_LOG_LEVEL"] = "warning"  # children's info lines would be the benchmark
    agentd_log.configure(level="warning")
    print(json.dumps(runtime.run(main(a))), flush=True)
