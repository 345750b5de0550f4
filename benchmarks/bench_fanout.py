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

`--workload io` measures the children of issue 17 instead: each makes two Chat
Completions calls to a loopback gateway (a separate process) and one
`tools/call` on a loopback MCP server (agentd's `echo` demo server, a separate
process), all brokered by the parent; in the same run, the two in-process
baselines doing the same work: one SDK `mcp.Client` (and its own aiohttp
session) per asyncio task, and bare aiohttp with pooled connections and one
MCP session (the floor, no isolation); plus the parent's CPU per brokered call
(the broker's path on a pair of sans-IO control sessions, with a provider that
answers at once: what the parent adds beyond the HTTP request it makes anyway).
Where the CPU goes, per child: `parent_cpu_ms_per_child` (this process: the
self-MCP, the spawns, the brokered HTTP requests, the spawning client),
`peers_cpu_ms_per_child` (the gateway and the MCP server), and for forked
children `child_cpu_ms_per_child` / `child_faults_per_child` (the children
themselves, fork to exit, as charged to the forkserver that reaps them) with
`cap_from_child_cpu_per_s`: the machine's CPUs divided by that cost, the rate
the children alone would allow if nothing else ran.

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
from agentd.agent.subagents import SpawnRequest  # noqa: E402
from agentd.app.compose import open_supervisor  # noqa: E402
from agentd.child.boot import FAULT_ENV  # noqa: E402
from agentd.config.model import Config  # noqa: E402
from agentd.tree.forkserver import ForkserverSpawner  # noqa: E402
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



CHILD_LOG_LEVEL = "warning"  # children's info lines would be the benchmark (child/configure)

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
    from agentd.app.serving import serve_self_mcp
    from agentd.config.model import ServerSpec, ServeSpec
    from agentd.mcp.client.facade import MCPClient

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
    keep = ("n", "children_per_s", "busy_cpu_ms_per_child", "child_cpu_ms_per_child",
            "child_faults_per_child", "forkserver_cpu_ms_per_child", "statuses")
    return {k: res[k] for k in keep if k in res}


def forked_children_cost(sup: Supervisor) -> tuple[float, int, float] | None:
    """(CPU seconds, minor faults) of every reaped child of the supervisor's forkserver:
    what the children cost from fork to exit, kernel exit included, as the kernel
    charges it to their reaper (`cutime + cstime`, `cminflt` of /proc/PID/stat);
    then the forkserver's own CPU seconds (its forks and reaping)."""
    spawner = sup.spawner
    if not isinstance(spawner, ForkserverSpawner):
        return None
    pid = spawner.forkserver.pid
    if pid is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[13]) + int(f[14])) / tick, int(f[8]), (int(f[11]) + int(f[12])) / tick


def all_reaped(pids: list[int]) -> bool:
    return not any(os.path.exists(f"/proc/{pid}") for pid in pids)


async def fanout(cfg: Config, mode: str, n: int, via: str) -> dict:
    async with open_supervisor(cfg, spawn=mode) as sup, contextlib.AsyncExitStack() as stack:
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
        if mode == "forkserver":  # the prime child reaped: only the measured ones count
            await asyncio.sleep(0.05)
        kids0 = forked_children_cost(sup)
        cpu0 = busy_cpu_s()
        t0 = time.perf_counter()
        if client is not None:  # over HTTP, as a peer does: subagent.spawn {async}
            obs = await asyncio.gather(*(
                client.call_tool("subagent.spawn", {"instruction": f"task {i}", "async": True})
                for i in range(n)))
            acks = [sup.status("served", o.structured["handle"]) for o in obs]
        else:
            acks = [await sup.spawn("served", SpawnRequest(f"task {i}", mode="async"))
                    for i in range(n)]
        await all_done.wait()
        wall = time.perf_counter() - t0
        cpu = busy_cpu_s() - cpu0
        kids: dict = {}
        if kids0 is not None:
            pids = [p.pid for p in map(sup.process, (a.handle for a in acks)) if p is not None]
            for _ in range(250):  # until every child is reaped (terminal comes before exit)
                if all_reaped(pids):
                    break
                await asyncio.sleep(0.02)
            now = forked_children_cost(sup) or kids0
            per = (now[0] - kids0[0]) * 1000 / n
            kids = {"child_cpu_ms_per_child": round(per, 2),
                    "child_faults_per_child": round((now[1] - kids0[1]) / n),
                    "forkserver_cpu_ms_per_child": round((now[2] - kids0[2]) * 1000 / n, 2),
                    # the children alone, if nothing else ran: the machine's CPUs / their cost
                    "cap_from_child_cpu_per_s": round((os.cpu_count() or 1) * 1000 / per)
                    if per > 0 else None}
        states = [sup.status("served", a.handle) for a in acks]
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
            "statuses": sorted(statuses), **kids,
            **({"failures": failures} if failures else {})}


async def idle_latency(cfg: Config, mode: str, reps: int) -> dict:
    async with open_supervisor(cfg, spawn=mode) as sup:
        firsts = []
        if mode == "forkserver":
            await sup.spawn("served", SpawnRequest("prime"))
        for i in range(reps):
            st = await sup.spawn("served", SpawnRequest(f"one {i}"))
            spawned, first = sup.timing(st.handle)
            firsts.append(first - spawned)
    return {"first_frame_p50_ms": pct(firsts, 50), "first_frame_p99_ms": pct(firsts, 99)}


async def warm_rss(cfg: Config, mode: str, k: int) -> dict:
    async with open_supervisor(cfg, spawn=mode) as sup:
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
                 drain_timeout=10.0, init_timeout=60.0, log_level=CHILD_LOG_LEVEL)
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


# ------------------------------------------------------- the io workload (issue 17)
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def chat_replies(call_id: str = "c1") -> tuple[bytes, bytes]:
    """A gateway's two Chat Completions bodies: a call of `echo__echo`, and text."""
    import orjson

    tool = orjson.dumps({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": "echo__echo", "arguments": "{\"text\": \"hi\"}"}}]}}],
        "usage": USAGE})
    text = orjson.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "{\"ok\": true}"}}], "usage": USAGE})
    return tool, text


def serve_gateway(port: int, latency: float = 0.0) -> None:
    """A loopback Chat Completions gateway: first answer a tool call, then text;
    each answer after `latency` seconds (a model that thinks)."""
    import asyncio

    import orjson
    from aiohttp import web

    tool, text = chat_replies()

    async def complete(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if latency:
            await asyncio.sleep(latency)
        return web.Response(body=tool if turn == 0 else text, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PEER_PIDS: list[int] = []  # the gateway's and the MCP server's, while io_peers runs


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far."""
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def io_peers(latency: float = 0.0, script: str = __file__):
    """(gateway URL, MCP URL): each in a process of its own, on loopback; the
    gateway (`script --serve-gateway PORT LATENCY`: this one's, or another
    benchmark's) answers each completion after `latency` seconds."""
    gw_port, mcp_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [await asyncio.create_subprocess_exec(
                 sys.executable, script, "--serve-gateway", str(gw_port), str(latency),
                 env=env),
             await asyncio.create_subprocess_exec(
                 sys.executable, "-m", "agentd.demo.servers", "echo", str(mcp_port), env=env,
                 stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)]
    try:
        for port in (gw_port, mcp_port):
            for _ in range(300):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                await asyncio.sleep(0.05)
        PEER_PIDS[:] = [p.pid for p in procs]
        yield f"http://127.0.0.1:{gw_port}/v1", f"http://127.0.0.1:{mcp_port}/mcp"
    finally:
        PEER_PIDS.clear()
        for p in procs:
            p.terminate()
            await p.wait()


def _chat_body(turn: int) -> bytes:
    import orjson

    msgs = [{"role": "system", "content": "x"}, {"role": "user", "content": "task"}]
    if turn:
        msgs += [{"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": "echo__echo", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "hi"}]
    return orjson.dumps({"messages": msgs})


async def baseline_sdk_client(gw: str, mcp_url: str, n: int) -> dict:
    """One SDK Client (handshake, tools/list, tools/call) and one aiohttp session per task."""
    import aiohttp
    import mcp

    async def one() -> None:
        async with aiohttp.ClientSession() as http, mcp.Client(mcp_url) as client:
            hdr = {"Content-Type": "application/json"}
            async with http.post(f"{gw}/chat/completions", data=_chat_body(0), headers=hdr) as r:
                await r.read()
            await client.list_tools()
            await client.call_tool("echo", {"text": "hi"})
            async with http.post(f"{gw}/chat/completions", data=_chat_body(1), headers=hdr) as r:
                await r.read()

    cpu0 = busy_cpu_s()
    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    wall = time.perf_counter() - t0
    return {"n": n, "children_per_s": round(n / wall, 1),
            "busy_cpu_ms_per_child": round((busy_cpu_s() - cpu0) * 1000 / n, 2)}


async def baseline_pooled(gw: str, mcp_url: str, n: int) -> dict:
    """Bare aiohttp, pooled: one session, one MCP session, three POSTs per task."""
    import aiohttp
    import orjson

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as http:
        accept = {"Accept": "application/json, text/event-stream",
                  "Content-Type": "application/json"}
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}}
        async with http.post(mcp_url, data=orjson.dumps(init), headers=accept) as r:
            sid = r.headers.get("Mcp-Session-Id", "")
            await r.read()
        hdr = {**accept, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post(mcp_url, data=orjson.dumps(note), headers=hdr) as r:
            await r.read()

        async def one(i: int) -> None:
            call = orjson.dumps({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                                 "params": {"name": "echo", "arguments": {"text": "hi"}}})
            ct = {"Content-Type": "application/json"}
            async with http.post(f"{gw}/chat/completions", data=_chat_body(0), headers=ct) as r:
                await r.read()
            async with http.post(mcp_url, data=call, headers=hdr) as r:
                await r.read()
            async with http.post(f"{gw}/chat/completions", data=_chat_body(1), headers=ct) as r:
                await r.read()

        cpu0 = busy_cpu_s()
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - t0
    return {"n": n, "children_per_s": round(n / wall, 1),
            "busy_cpu_ms_per_child": round((busy_cpu_s() - cpu0) * 1000 / n, 2)}


async def fanout_io(cfg: Config, mode: str, n: int, via: str) -> dict:
    """`fanout` with the io workload; adds the parent's own CPU per child and per call."""
    import resource

    def own() -> float:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime

    c0 = own()
    p0 = sum(map(proc_cpu_s, PEER_PIDS))
    res = await fanout(cfg, mode, n, via)
    res["parent_cpu_ms_per_child"] = round((own() - c0) * 1000 / n, 2)
    res["peers_cpu_ms_per_child"] = round((sum(map(proc_cpu_s, PEER_PIDS)) - p0) * 1000 / n, 2)
    return res


async def broker_call_cost(reps: int = 20000) -> dict:
    """Parent CPU per brokered call, beyond the provider's own work: decode the
    child's io/request, ledger + gate + broker dispatch, encode the answer."""
    from agentd.child.control import ControlSession, IoComplete
    from agentd.intelligence.base import Completion, Usage, user
    from agentd.intelligence.flow import FlowGate
    from agentd.intelligence.ledger import Ledger, Metered
    from agentd.tree.broker import Broker

    class Instant:
        name = "instant"
        model = None
        done = Completion(content="{}", usage=Usage(10, 5, 15))

        async def complete(self, messages, tools):
            return self.done

        def share_gate(self, gate) -> None:
            pass

        async def aclose(self) -> None:
            pass

    async def run() -> float:
        broker = Broker(intelligence=Metered(Instant(), Ledger(None), "0", FlowGate(64)))
        parent, child = ControlSession("parent"), ControlSession("child")
        msgs = [user("x" * 200), user("task")]
        frames = [child.request("io/request", IoComplete(msgs, []))[1] for _ in range(reps)]
        scope = frozenset()
        t0 = time.process_time()
        for frame in frames:
            ev = parent.feed(frame)[0]
            result = await broker.serve("0.1", scope, ev.params)
            child.feed(parent.response(ev.id, result))
        return time.process_time() - t0

    total = await run()
    return {"reps": reps, "us_per_call": round(total * 1e6 / reps, 1),
            "includes": "the child's answer decoded too (an upper bound for the parent)"}


async def main_io(args: argparse.Namespace) -> dict:
    ns = [int(x) for x in args.n.split(",")]
    out: dict = {"bench": "fanout_io", "via": args.via, "python": sys.version.split()[0],
                 "cpus": os.cpu_count(), "load": round(os.getloadavg()[0], 1),
                 "broker_call": await broker_call_cost()}
    async with io_peers() as (gw, mcp_url):
        from agentd.config.model import ServerSpec

        cfg = Config(intelligence=gw, mcp=(ServerSpec(name="echo", url=mcp_url),),
                     max_children=max(ns), max_subagents=max(ns), drain_timeout=10.0,
                     init_timeout=60.0, ping_interval=3600.0, log_level=CHILD_LOG_LEVEL)
        out["baseline_sdk_client_per_task"] = [await baseline_sdk_client(gw, mcp_url, n)
                                               for n in ns]
        out["baseline_aiohttp_pooled"] = [await baseline_pooled(gw, mcp_url, n) for n in ns]
        for mode in args.modes.split(","):
            res: dict = {"fanout": [await fanout_io(cfg, mode, n, args.via) for n in ns]}
            res["warm_idle"] = await warm_rss(cfg, mode, args.warm)
            out[mode] = res
    top = max(ns)

    def at(rows: list[dict]) -> float:
        return next(r["children_per_s"] for r in rows if r["n"] == top)

    if "forkserver" in out:
        fs = at(out["forkserver"]["fanout"])
        out["targets_at_n"] = {
            "n": top, "forkserver_per_s": fs, "target_per_s": 300,
            "vs_sdk_client_per_task": round(fs / at(out["baseline_sdk_client_per_task"]), 1),
            "target_vs_sdk": 10,
            "vs_pooled_floor": round(fs / at(out["baseline_aiohttp_pooled"]), 2)}
    return out


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "--serve-gateway":
        serve_gateway(int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) == 4 else 0.0)
        sys.exit(0)
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="16,64,256")
    ap.add_argument("--modes", default="exec,forkserver")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warm", type=int, default=8)
    ap.add_argument("--via", choices=("selfmcp", "direct"), default="selfmcp",
                    help="spawn over the self-MCP (HTTP, agentd's client) or call the Supervisor")
    ap.add_argument("--no-compile", action="store_true",
                    help="do not byte-compile agentd first (PYTHONDONTWRITEBYTECODE hurts exec)")
    ap.add_argument("--workload", choices=("playback", "io"), default="playback",
                    help="playback children (no I/O), or issue 17's: 2 model calls + 1 MCP call")
    a = ap.parse_args()
    if not a.no_compile:
        for package in ("agentd", "agentd_native"):  # what every exec'd child imports
            compileall.compile_dir(str(ROOT / package), quiet=1)
    agentd_log.configure(level="warning")
    print(json.dumps(runtime.run(main_io(a) if a.workload == "io" else main(a))), flush=True)
