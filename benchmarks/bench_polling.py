"""Polling fallback benchmark: a change on a server that cannot push -> the wake's run.

    python benchmarks/bench_polling.py [--rounds 8] [--interval 5] [--debounce 0.05]
                                       [--seed 29]

One watched server in a subprocess: the official-SDK server of the reactive
tests (tests/support/reactive_peers.py `--no-subscribe`: no `resources.subscribe`, so
agentd polls it). agentd's whole reactive path runs in-process — the real
`Toolbox`, `ReactiveDaemon` (whose `Poller` re-reads the URI every
`--poll-interval`), `Router` (debounce) and notify-then-read — up to the
moment the loop run for the wake is entered with the fresh state.

Each round changes the resource without any notification (`POST /set`, the
body's `t_ns` is CLOCK_MONOTONIC at the change, one clock for every process on
the host) at a random phase of the poll cycle (uniform over one interval,
seeded), then waits for the wake. Latency = the run's clock when it was
entered minus that `t_ns`. Defaults are agentd's own (`--poll-interval 5`,
`--debounce 0.05`): the expected mean is about half an interval, the bound one
interval plus the debounce and two reads. Prints one JSON line. Figures only;
nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from agentd.config.model import DEFAULT_DEBOUNCE, DEFAULT_POLL_INTERVAL, ServerSpec  # noqa: E402

URI = "watch://counter/a"


def _set(port: int, value: int) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/set?uri={URI}&value={value}",
                                 method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


async def bench(rounds: int, interval: float, debounce: float, seed: int) -> dict:
    import peers

    from agentd.mcp.client.toolbox import Toolbox
    from agentd.reactive.daemon import ReactiveDaemon, Read, WakeRun
    from agentd.reactive.router import Wake

    rng = random.Random(seed)
    woken: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

    async def run_wake(wake: Wake, reads: list[Read]) -> WakeRun:
        now = time.monotonic_ns()
        body = json.loads(reads[0].text)
        woken.put_nowait((body["value"], now - body["t_ns"]))
        return WakeRun(status="completed")

    latencies: list[float] = []
    lost = 0
    with peers.python_peer("reactive_peers.py", "--no-subscribe") as srv:
        async with Toolbox([ServerSpec(name="plain", url=srv.url)], run_id="bench",
                           ping_interval=None) as tb, asyncio.TaskGroup() as tg:
            daemon = ReactiveDaemon(tb, run_wake, debounce=debounce, poll_interval=interval)
            stop = asyncio.Event()
            serving = tg.create_task(daemon.serve(stop, [URI]))
            async with asyncio.timeout(60):
                await daemon.ready.wait()
            assert daemon.modes == {URI: "poll"}, daemon.modes
            for n in range(1, rounds + 1):
                await asyncio.sleep(rng.uniform(0, interval))  # a random phase of the cycle
                await asyncio.to_thread(_set, srv.port, n)
                try:
                    async with asyncio.timeout(interval * 3 + 30):
                        while True:
                            value, ns = await woken.get()
                            if value == n:
                                latencies.append(ns / 1e6)
                                break
                except TimeoutError:
                    lost += 1
            stop.set()
            await serving
    return {
        "bench": "polling_wake",
        "what": "change on a server without resources.subscribe -> the wake's run entered",
        "interval_s": interval, "debounce_s": debounce, "rounds": rounds, "lost": lost,
        "mean_ms": round(statistics.fmean(latencies), 1) if latencies else None,
        "p50_ms": round(statistics.median(latencies), 1) if latencies else None,
        "min_ms": round(min(latencies), 1) if latencies else None,
        "max_ms": round(max(latencies), 1) if latencies else None,
        "bound_ms": round((interval + debounce) * 1000, 1),
        "reads": daemon.poller.reads if daemon.poller else 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--interval", type=float, default=DEFAULT_POLL_INTERVAL)
    ap.add_argument("--debounce", type=float, default=DEFAULT_DEBOUNCE)
    ap.add_argument("--seed", type=int, default=29)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(bench(args.rounds, args.interval, args.debounce, args.seed))))


if __name__ == "__main__":
    main()
