"""A pool of workers behind one URL: what the relay costs, what the pool adds.

    python benchmarks/bench_pool.py [--calls 200] [--children 30]

Real console-script workers on loopback (scripted intelligence), HAProxy from
Debian's package as the balancer (round robin per request, no stickiness),
the official MCP Python SDK 2.3 ``Client`` in auto mode (2026-07-28). Figures:

* ``relay_overhead`` -- ``subagent.status`` against worker w1 for a handle w1
  owns vs one w2 owns (relayed): p50/p99 per call, in ms;
* ``async_children`` -- async children spawned through the balancer in front
  of three workers vs one worker directly, until every one reads terminal:
  children/s for each;
* ``owner_lost`` -- SIGKILL of the owner to its handle reading the terminal
  "worker lost" body through a peer (polled every 50 ms), in s.

One JSON line per figure.  Figures only; nothing asserts a time.
docs/benchmarks.md has the measured figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from conftest import agentd_executable  # noqa: E402
from pool_harness import Pool, balancer, sdk_client  # noqa: E402


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def relay_overhead(pool: Pool, calls: int) -> dict:
    async with sdk_client(pool.url("w1"), "alice") as c1, sdk_client(pool.url("w2"), "alice") as c2:
        own = (await c1.call_tool("subagent.spawn", {"instruction": "[slow] x",
                                                     "async": True})).structured_content
        peer = (await c2.call_tool("subagent.spawn", {"instruction": "[slow] x",
                                                      "async": True})).structured_content
        out = {}
        for name, handle in (("own", own["handle"]), ("peer", peer["handle"])):
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                r = await c1.call_tool("subagent.status", {"handle": handle})
                times.append((time.perf_counter() - t0) * 1000)
                assert not r.is_error, r.content[0].text
            out[name] = {"p50_ms": round(statistics.median(times), 3),
                         "p99_ms": round(_pct(times, 0.99), 3)}
        for c, h in ((c1, own["handle"]), (c1, peer["handle"])):
            await c.call_tool("subagent.cancel", {"handle": h})
    return {"bench": "relay_overhead", "calls": calls, **out}


async def children_per_s(url: str, n: int) -> float:
    async with sdk_client(url, "alice") as c:
        t0 = time.perf_counter()
        spawned = await asyncio.gather(*(c.call_tool(
            "subagent.spawn", {"instruction": "[quick] go", "async": True}) for _ in range(n)))
        pending = {r.structured_content["handle"] for r in spawned}
        while pending:
            for h in list(pending):
                r = await c.call_tool("subagent.status", {"handle": h})
                if r.structured_content.get("done"):
                    pending.discard(h)
            if pending:
                await asyncio.sleep(0.05)
        return n / (time.perf_counter() - t0)


async def owner_lost(pool: Pool) -> dict:
    async with sdk_client(pool.url("w1"), "alice") as c1:
        handle = (await c1.call_tool("subagent.spawn", {"instruction": "[slow] x",
                                                        "async": True})).structured_content
    w1 = pool.workers["w1"]
    async with sdk_client(pool.url("w2"), "alice") as c2:
        t0 = time.perf_counter()
        w1.proc.send_signal(signal.SIGKILL)
        while True:
            r = await c2.call_tool("subagent.status", {"handle": handle["handle"]})
            if not r.is_error and r.structured_content.get("status") == "failed":
                break
            await asyncio.sleep(0.05)
        took = time.perf_counter() - t0
    w1.proc.wait()
    return {"bench": "owner_lost", "seconds": round(took, 3), "bound_s": 12}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--children", type=int, default=30)
    args = ap.parse_args()
    agentd_bin = agentd_executable()
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        pool = Pool(tmp)
        try:
            for wid in pool.ports:
                pool.start(agentd_bin, wid)
            print(json.dumps(await relay_overhead(pool, args.calls)), flush=True)
            with balancer(tmp, pool.ports) as url:
                three = await children_per_s(url, args.children)
            one = await children_per_s(pool.url("w3"), args.children)
            print(json.dumps({"bench": "async_children", "children": args.children,
                              "three_workers_per_s": round(three, 2),
                              "one_worker_per_s": round(one, 2)}), flush=True)
            for w in ("w2", "w3"):
                pool.workers[w].wait_event("pool.peer", lambda r: r.get("peer") == "w1"
                                           and r.get("status") == "alive")
            print(json.dumps(await owner_lost(pool)), flush=True)
        finally:
            with contextlib.suppress(Exception):
                pool.stop()


if __name__ == "__main__":
    asyncio.run(main())
