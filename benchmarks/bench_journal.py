"""The journal's cost (issue 42): served runs with and without `--journal`, resume time, bytes.

    python benchmarks/bench_journal.py [--n 32] [--reps 5] [--turns 20] [--resume 10,100]
                                       [--write-steps 400] [--dir DIR]

Prints one JSON line.  Only served runs (caller `served`, what the self-MCP
spawns) are journaled, and the journal touches only their brokered I/O, so
that is what is measured.  Every model is a loopback Chat Completions gateway
(a process of its own) that answers a tool call (`echo__echo`) for the first
`turns=K` turns a task names, then text; a task naming `hang=1` never gets its
last answer.  The tool is agentd's `echo` demo MCP server (its own process).

* `fanout`: `--n` served runs spawned at once over the self-MCP
  (`subagent.spawn {async: true}`), each one tool turn (2 completions + 1
  `tools/call`, brokered), to all terminal; a Supervisor without a journal and
  one with a `Journaling` built as `agentd.app.compose.open_journaling` builds
  it, alternating, `--reps` of each; medians.
* `steps` (the pair: a served run's brokered exchanges): one served run of
  `--turns` tool turns (2K+1 brokered requests, one after another), with and
  without, alternating; wall per step and the journal's added ms per step.
* `write_path`: the journal's own path in this process, no network:
  `Journaling.serve` of `--write-steps` exchanges (a completion, then a tool
  call: two commits) answered at once, with and without a journal: latency
  per exchange, the event loop's own CPU per exchange (`thread_time` of the
  loop's thread: the writes are on the journal's writer thread), and the loop's
  longest stall while 16 runs journal at once (a 1 ms ticker's worst lateness).
* `bytes_per_step`: a run's file (`runs/<name>.sqlite`) over the steps it
  recorded, for a one-turn run (the fan-out's) and a `--turns` run.  A
  completion's request holds the whole conversation so far, so a long run's
  steps are bigger.
* `resume`: for each N of `--resume`, a real worker (`agentd --serve-mcp
  --journal DIR`, the console script) is given N async runs whose second
  completion never answers; once all N are held there it is SIGKILLed.  Then
  `Journal.load()` of that directory alone, in this process; then a new worker
  on the directory: from its start to its listener up, to the N-th
  `journal.resumed` logged, and to every run's replay done (its in-flight
  completion re-sent: the gateway holds 2N).

Figures move with machine load: compare within one line.  The journal's
directory is a fresh one under `--dir` (default: the system's temporary
directory); `fs` names its filesystem, which sets the cost of each commit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fanout import chat_replies, io_peers, pct, self_mcp  # noqa: E402
from bench_host import busy_cpu_s  # noqa: E402

from agentd import log as agentd_log  # noqa: E402
from agentd import runtime  # noqa: E402
from agentd.agent.subagents import SpawnRequest  # noqa: E402
from agentd.app.compose import open_journaling, open_supervisor  # noqa: E402
from agentd.child.control import IoCall, IoComplete, IoCompletion  # noqa: E402
from agentd.config.model import Config, ServerSpec  # noqa: E402
from agentd.intelligence.base import Completion, Usage, user  # noqa: E402
from agentd.journal.store import Journal  # noqa: E402
from agentd.tree.journaling import Journaling  # noqa: E402
from agentd.tree.supervisor import SERVED  # noqa: E402
from agentd.wire.shapes import Observed  # noqa: E402

TURNS = re.compile(r"turns=(\d+)")


# ------------------------------------------------------------------ the gateway
def serve_gateway(port: int) -> None:
    """Chat Completions on loopback: a tool call for each of the first `turns=K`
    turns the task names (1 if none), then text; `hang=1` holds that last answer
    until the client goes.  GET /stats: requests so far and answers held."""
    import orjson
    from aiohttp import web

    counts = {"requests": 0, "held": 0}
    text = chat_replies()[1]

    async def complete(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        counts["requests"] += 1
        said = " ".join(m["content"] for m in body["messages"]
                        if m["role"] == "user" and isinstance(m.get("content"), str))
        found = TURNS.search(said)
        turns = int(found.group(1)) if found else 1
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn < turns:
            return web.Response(body=chat_replies(f"c{turn}")[0],
                                content_type="application/json")
        if "hang=1" in said:
            counts["held"] += 1
            await asyncio.Event().wait()
        return web.Response(body=text, content_type="application/json")

    async def stats(_request: web.Request) -> web.Response:
        return web.json_response(counts)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_get("/stats", stats)
    # held answers never end: a graceful stop would wait its whole timeout for them
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None,
                shutdown_timeout=0.1)


async def gateway_stats(gw: str) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as http, \
            http.get(gw.removesuffix("/v1") + "/stats") as r:
        return await r.json()


async def until_held(gw: str, count: int, limit: float = 180.0) -> None:
    """Until the gateway holds `count` answers (polled: it is another process)."""
    async with asyncio.timeout(limit):
        while (await gateway_stats(gw))["held"] < count:  # noqa: ASYNC110 (another process)
            await asyncio.sleep(0.02)


# ------------------------------------------------------------------ in-process runs
def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


@contextlib.asynccontextmanager
async def supervisor(cfg: Config, journal: Path | None):
    """A Supervisor as `open_supervisor` builds it, with (`journal`) the served
    runs' Journaling as a worker composes it (closed after the Supervisor)."""
    journaling = None
    if journal is not None:
        journaling = open_journaling(msgspec.structs.replace(cfg, journal=str(journal)),
                                     SERVED, None)
    try:
        async with open_supervisor(cfg, journaling=journaling) as sup:
            # the forkserver starts and the connections open: not what is measured
            await sup.spawn(SERVED, SpawnRequest("prime turns=1"))
            yield sup
    finally:
        if journaling is not None:
            await journaling.aclose()


async def fanout(cfg: Config, n: int, journal: Path | None) -> dict:
    async with supervisor(cfg, journal) as sup, self_mcp(sup) as client:
        done = asyncio.Event()
        ended: list[str] = []

        def terminal(state) -> None:
            ended.append(state.handle)
            if len(ended) == n:
                done.set()

        sup.on_terminal(terminal)
        cpu0, busy0 = own_cpu_s(), busy_cpu_s()
        t0 = time.perf_counter()
        obs = await asyncio.gather(*(
            client.call_tool("subagent.spawn", {"instruction": f"task {i} turns=1",
                                                "async": True}) for i in range(n)))
        refused = [o.text for o in obs if o.is_error]  # a refused spawn never ends
        n -= len(refused)
        if len(ended) < n:
            await done.wait()
        wall = time.perf_counter() - t0
        cpu, busy = own_cpu_s() - cpu0, busy_cpu_s() - busy0
        states = [sup.status(SERVED, o.structured["handle"]) for o in obs if not o.is_error]
    bad = [*refused, *(s.result for s in states if s.status != "completed")][:3]
    return {"wall_s": wall, "parent_cpu_ms": cpu * 1000 / n, "busy_cpu_ms": busy * 1000 / n,
            **({"failures": bad} if bad else {})}


async def served_steps(cfg: Config, turns: int, journal: Path | None) -> dict:
    async with supervisor(cfg, journal) as sup:
        t0 = time.perf_counter()
        st = await sup.spawn(SERVED, SpawnRequest(f"steps turns={turns}"))
        wall = time.perf_counter() - t0
    steps = 2 * turns + 1
    return {"wall_s": wall, "ms_per_step": wall * 1000 / steps, "status": st.status}


def run_files(journal: Path) -> list[dict]:
    """Each run file's bytes and its recorded steps (answered rows) and rows."""
    out = []
    for path in sorted((journal / "runs").glob("*.sqlite")):
        size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            answered, rows, payload = db.execute(
                "SELECT sum(state = 'answered'), count(*), "
                "coalesce(sum(length(request) + length(answer) + length(coalesce(error, ''))), 0)"
                " FROM steps").fetchone()
            run = json.loads(dict(db.execute("SELECT k, v FROM meta").fetchall())["run"])
        out.append({"name": run["name"], "bytes": size, "steps": answered or 0, "rows": rows,
                    "payload": payload})
    return out


def per_step(files: list[dict]) -> dict:
    steps = sum(f["steps"] for f in files)
    return {"runs": len(files), "steps_per_run": round(steps / len(files), 1),
            "file_bytes_per_run": round(sum(f["bytes"] for f in files) / len(files)),
            "file_bytes_per_step": round(sum(f["bytes"] for f in files) / steps),
            "payload_bytes_per_step": round(sum(f["payload"] for f in files) / steps),
            "rows_per_step": round(sum(f["rows"] for f in files) / steps, 2)}


def marginal(short: dict, long: dict) -> int:
    """File bytes of one more step: the long run's over the short one's (the floor
    of a run's file, its pages for the schema and the record, cancels out)."""
    return round((long["file_bytes_per_run"] - short["file_bytes_per_run"])
                 / (long["steps_per_run"] - short["steps_per_run"]))


# ------------------------------------------------------------------ the write path
def us(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))] * 1e6, 1)


async def write_path(base: Path, steps: int, concurrent: int = 16) -> dict:
    """`Journaling.serve` answered at once: what the journal alone adds to an exchange."""
    complete = IoComplete([user("x" * 200), user("task turns=1")], [])
    call = IoCall(name="echo__echo", arguments={"text": "hi"})
    answers = {"complete": IoCompletion(Completion(content="{}", usage=Usage(10, 5, 15))),
               "call": Observed("hi")}
    reqs = [complete if i % 2 == 0 else call for i in range(steps)]
    journal = Journal.open(str(base / "write-path"))
    journaling = Journaling(journal, under=SERVED)
    try:
        async def drive(handle: str, journaled: bool, out: list[float]) -> None:
            for req in reqs:
                answer = answers[str(req.__struct_config__.tag)]

                async def live(answer=answer):
                    return answer

                t0 = time.perf_counter()
                if journaled:
                    await journaling.serve(handle, req, live)
                else:
                    await live()
                out.append(time.perf_counter() - t0)

        res: dict = {"exchanges": steps, "commits": steps + steps // 2}
        for journaled, label in ((False, "without"), (True, "with")):
            lat: list[float] = []
            if journaled:
                await journaling.begin(f"{SERVED}.1", f"{SERVED}.1", SpawnRequest("x"), None)
            loop0 = time.thread_time()
            t0 = time.perf_counter()
            await drive(f"{SERVED}.1", journaled, lat)
            wall = time.perf_counter() - t0
            res[label] = {"p50_us": us(lat, 50), "p99_us": us(lat, 99),
                          "wall_s": round(wall, 3),
                          "loop_cpu_us_per_exchange":
                              round((time.thread_time() - loop0) * 1e6 / steps, 1)}
        # many runs at once: the loop's worst stall while the writer commits
        begins = []
        for i in range(concurrent):  # a run's file made (its spawn's answer waits for it)
            t0 = time.perf_counter()
            await journaling.begin(f"{SERVED}.{i + 2}", f"{SERVED}.{i + 2}",
                                   SpawnRequest("x"), None)
            begins.append(time.perf_counter() - t0)
        res["begin_p50_us"], res["begin_max_us"] = us(begins, 50), us(begins, 100)
        lateness: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                await asyncio.sleep(0.001)
                lateness.append(time.perf_counter() - t - 0.001)

        tick = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        await asyncio.gather(*(drive(f"{SERVED}.{i + 2}", True, []) for i in range(concurrent)))
        wall = time.perf_counter() - t0
        stop.set()
        await tick
        res["concurrent"] = {"runs": concurrent, "exchanges_per_s":
                             round(concurrent * steps / wall), "loop_stall_max_ms":
                             round(max(lateness) * 1000, 2), "loop_stall_p99_ms":
                             pct(lateness, 99)}
    finally:
        await journaling.aclose()
    return res


# ------------------------------------------------------------------ resume (processes)
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    """`agentd --serve-mcp --journal DIR` (the console script); the moment each
    log event of interest reached its stderr, from its start."""

    EVENTS = ("mcp.serve.listening", "journal.resumed")

    def __init__(self, journal: Path, gw: str, mcp_url: str, n: int) -> None:
        self.port = _free_port()
        self.argv = [shutil.which("agentd") or "agentd", "--instruction", "Be a worker",
                     "--intelligence", gw, "--model", "bench", "--mcp", f"echo={mcp_url}",
                     "--mode", "reactive", "--subscribe", "file:///nowhere",
                     "--serve-mcp", f"http://127.0.0.1:{self.port}", "--journal", str(journal),
                     "--max-children", str(n + 8),  # every run live at once, and
                     "--max-inflight-intelligence", str(n + 8),  # every held completion
                     "--log-level", "info"]
        self.seen: dict[str, list[float]] = {e: [] for e in self.EVENTS}
        self.changed = asyncio.Event()
        self.tail: list[str] = []

    async def __aenter__(self) -> Worker:
        self.t0 = time.perf_counter()
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)  # its group: the worker, its forkserver, its children
        self.reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            now = time.perf_counter() - self.t0
            line = raw.decode(errors="replace")
            self.tail = [*self.tail[-20:], line]
            for event in self.EVENTS:
                if f'"{event}"' in line:
                    self.seen[event].append(now)
                    self.changed.set()

    async def wait(self, event: str, count: int, limit: float = 180.0) -> float:
        async with asyncio.timeout(limit):
            while len(self.seen[event]) < count:
                if self.proc.returncode is not None:
                    raise RuntimeError(f"the worker exited {self.proc.returncode}: "
                                       + "".join(self.tail))
                self.changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await self.changed.wait()
        return self.seen[event][count - 1]

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # SIGKILL, the whole group (a pod's
            os.killpg(self.proc.pid, signal.SIGKILL)  # crash): the crash the journal is for
        await self.proc.wait()
        await self.reader


async def resume(base: Path, gw: str, mcp_url: str, n: int) -> dict:
    from agentd.mcp.client.facade import MCPClient

    journal = base / f"resume-{n}"
    held0 = (await gateway_stats(gw))["held"]
    async with Worker(journal, gw, mcp_url, n) as first:
        boot = await first.wait("mcp.serve.listening", 1)
        async with MCPClient(ServerSpec(name="w", url=f"http://127.0.0.1:{first.port}/mcp"),
                             ping_interval=None) as client:
            await asyncio.gather(*(client.call_tool(
                "subagent.spawn", {"instruction": f"run {i} turns=1 hang=1", "async": True})
                for i in range(n)))
            await until_held(gw, held0 + n)  # each run's 2 steps journaled, the 3rd in flight
    j = Journal.open(str(journal))
    try:
        t0 = time.perf_counter()
        loaded = await j.load()
        load_s = time.perf_counter() - t0
    finally:
        await j.aclose()
    running = sum(1 for r in loaded if r.record is not None and not r.record.terminal)
    async with Worker(journal, gw, mcp_url, n) as second:
        listening = await second.wait("mcp.serve.listening", 1)
        resumed = await second.wait("journal.resumed", n)
        await until_held(gw, held0 + 2 * n)
        replayed = time.perf_counter() - second.t0
    shutil.rmtree(journal, ignore_errors=True)
    return {"n": n, "running_in_journal": running, "load_s": round(load_s, 4),
            "empty_journal_start_to_listening_s": round(boot, 3),
            "start_to_listening_s": round(listening, 3),
            "start_to_all_resumed_s": round(resumed, 3),
            "start_to_all_replayed_s": round(replayed, 3)}


# ------------------------------------------------------------------ main
def fs_type(path: Path) -> str:
    best, kind = "", "?"
    with open("/proc/mounts") as fh:
        for line in fh:
            mount, typ = line.split()[1:3]
            if str(path).startswith(mount) and len(mount) > len(best):
                best, kind = mount, typ
    return kind


def medians(rows: list[dict], keys: tuple[str, ...]) -> dict:
    return {k: round(statistics.median(r[k] for r in rows), 4) for k in keys}


async def main(args: argparse.Namespace) -> dict:
    base = Path(tempfile.mkdtemp(prefix="agentd-bench-journal-", dir=args.dir))
    out: dict = {"bench": "journal", "python": sys.version.split()[0], "cpus": os.cpu_count(),
                 "load": round(os.getloadavg()[0], 1), "fs": fs_type(base)}
    try:
        out["write_path"] = await write_path(base, args.write_steps)
        async with io_peers(script=__file__) as (gw, mcp_url):
            top = max(args.n, 4)
            cfg = Config(intelligence=gw, mcp=(ServerSpec(name="echo", url=mcp_url),),
                         max_children=top + 1, max_subagents=4 * top, drain_timeout=10.0,
                         init_timeout=60.0, ping_interval=3600.0, log_level="warning")
            runs: dict[str, list[dict]] = {"without": [], "with": []}
            steps: dict[str, list[dict]] = {"without": [], "with": []}
            files: dict[str, list[dict]] = {}
            for rep in range(args.reps):
                order = ("without", "with") if rep % 2 == 0 else ("with", "without")
                for label in order:
                    jdir = base / f"fanout-{rep}" if label == "with" else None
                    runs[label].append(await fanout(cfg, args.n, jdir))
                    if jdir is not None:
                        files["fanout"] = [f for f in run_files(jdir)
                                           if f["name"] != f"{SERVED}.1"]  # not the prime
                        shutil.rmtree(jdir)
                    jdir = base / f"steps-{rep}" if label == "with" else None
                    steps[label].append(await served_steps(cfg, args.turns, jdir))
                    if jdir is not None:
                        files["steps"] = [f for f in run_files(jdir)
                                          if f["name"] != f"{SERVED}.1"]
                        shutil.rmtree(jdir)
            fan = {k: medians(v, ("wall_s", "parent_cpu_ms", "busy_cpu_ms"))
                   for k, v in runs.items()}
            for k, v in runs.items():
                fan[k]["children_per_s"] = round(args.n / fan[k]["wall_s"], 1)
                fan[k]["walls_s"] = [round(r["wall_s"], 3) for r in v]
                failures = [f for r in v for f in r.get("failures", [])]
                if failures:
                    fan[k]["failures"] = failures[:3]
            fan["wall_ratio"] = round(fan["with"]["wall_s"] / fan["without"]["wall_s"], 3)
            out["fanout"] = {"n": args.n, "reps": args.reps, **fan}
            st = {k: medians(v, ("wall_s", "ms_per_step")) for k, v in steps.items()}
            for k, v in steps.items():
                st[k]["statuses"] = sorted({r["status"] for r in v})
            st["added_ms_per_step"] = round(st["with"]["ms_per_step"]
                                            - st["without"]["ms_per_step"], 3)
            out["steps"] = {"turns": args.turns, "steps_per_run": 2 * args.turns + 1,
                            "reps": args.reps, **st}
            short, long = per_step(files["fanout"]), per_step(files["steps"])
            out["bytes_per_step"] = {"one_turn_run": short, f"{args.turns}_turn_run": long,
                                     "marginal_file_bytes_per_step": marginal(short, long)}
            out["resume"] = [await resume(base, gw, mcp_url, n) for n in args.resume]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32, help="served runs per fan-out")
    ap.add_argument("--reps", type=int, default=5, help="fan-outs and step runs of each kind")
    ap.add_argument("--turns", type=int, default=20, help="tool turns of the steps run")
    ap.add_argument("--write-steps", type=int, default=400,
                    help="exchanges of the in-process write path")
    ap.add_argument("--resume", type=lambda s: [int(x) for x in s.split(",") if x],
                    default=[10, 100], help="journaled runs to resume (comma-separated)")
    ap.add_argument("--dir", default=None,
                    help="where the journals go (default: the temporary directory)")
    return ap.parse_args(argv)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--serve-gateway":
        serve_gateway(int(sys.argv[2]))
        sys.exit(0)
    a = parse()
    agentd_log.configure(level="error")  # the loopback self-MCP's "unauthenticated"
    print(json.dumps(runtime.run(main(a))), flush=True)
