"""What the tool-call limits cost a tools/call: agentd's client with them on and off.

    python benchmarks/bench_call_limits.py [--calls 3000] [--rounds 5]

One ``raw`` server (the fixed-answer HTTP server of ``bench_client.py``, which
costs almost no CPU) and two ``MCPClient`` connected to it at once: ``limits``
with the default ``--tool-idle-timeout``/``--tool-timeout`` (a progress token
spliced into every call's ``_meta``, a timeout armed around every send) and
``none`` with both off (no token, no timeout).  They are measured in
interleaved rounds of ``--calls`` sequential calls, so background load hits both
alike; the figures are each client's best round.  Prints one JSON line: client
CPU per call, the round trip p50, their difference (small beside the noise of a
shared machine), and ``watch_us_per_call``, the watch alone measured in-process
without the network (open, token, arm, disarm, release).  Figures only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_client import ARGS, pct, sequential  # noqa: E402


@contextlib.asynccontextmanager
async def client(url: str, on: bool):
    from agentd.config.model import ServerSpec
    from agentd.log import configure
    from agentd.mcp import MCPClient
    from agentd.mcp.client.rules.call_limits import ToolLimits

    configure(level="warning")
    limits = ToolLimits() if on else ToolLimits(None, None)
    async with MCPClient(ServerSpec(name="bench", url=url), run_id="bench",
                         ping_interval=None, tool_limits=limits) as c:
        async def call():
            obs = await c.call_tool("echo", ARGS)
            assert obs.text == "hello, world"
        yield call


async def watch_cost(n: int) -> float:
    """The watch alone, no network: open, token, arm and disarm, release (best of 3)."""
    import time

    from agentd.log import log
    from agentd.mcp.client.call_watch import CallWatches
    from agentd.mcp.client.rules.call_limits import ToolLimits

    watches = CallWatches(ToolLimits(), log)
    meta = b'{"io.modelcontextprotocol/run-id":"bench"}'
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        for _ in range(n):
            w = watches.open("echo")
            assert w is not None
            w.meta(meta)
            async with w:
                pass
            w.release()
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return round(best, 2)


async def run(calls: int, rounds: int) -> dict:
    from peers import PeerProcess, free_port

    port = free_port()
    bench = str(ROOT / "benchmarks" / "bench_client.py")
    with PeerProcess([sys.executable, bench, "--serve-raw", str(port)], port) as peer:
        async with client(peer.url, True) as on, client(peer.url, False) as off:
            best: dict[str, tuple[float, float]] = {}
            for r in range(rounds):
                pair = [("limits", on), ("none", off)]
                for name, call in pair if r % 2 == 0 else pair[::-1]:
                    await sequential(call, 50)  # warm
                    cpu, lat = await sequential(call, calls)
                    fig = (cpu / calls * 1000, pct(lat, 0.5) * 1000)
                    if name not in best or fig[0] < best[name][0]:
                        best[name] = fig
    (cpu_on, p50_on), (cpu_off, p50_off) = best["limits"], best["none"]
    return {"bench": "call_limits", "calls": calls, "rounds": rounds,
            "watch_us_per_call": await watch_cost(20000),
            "limits": {"cpu_ms_per_call": round(cpu_on, 4), "p50_ms": round(p50_on, 4)},
            "none": {"cpu_ms_per_call": round(cpu_off, 4), "p50_ms": round(p50_off, 4)},
            "cpu_us_added_per_call": round((cpu_on - cpu_off) * 1000, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    from agentd.runtime import run as run_loop

    print(json.dumps(run_loop(run(a.calls, a.rounds))))


if __name__ == "__main__":
    main()
