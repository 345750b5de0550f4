"""tools/call p50: the HTTP+SSE transport (2024-11-05) beside Streamable HTTP.

    python benchmarks/bench_legacy_sse.py [--calls 1000] [--rounds 3]

Both against the same official SDK 2.3 ``MCPServer`` (tests/sdk_mcpserver.py):
``--sse`` (its ``sse_app()``: GET ``/sse``, POSTs to the endpoint, answers on the
stream) and ``--legacy-only`` (its Streamable HTTP app at 2025-11-25, answers
in the POST's own SSE stream).  agentd's ``MCPClient.call_tool`` of ``echo``,
sequential calls, both clients connected at once and measured in interleaved
rounds so background load hits them alike.  Prints one JSON line (ms);
figures go to docs/benchmarks.md.  Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from peers import python_peer  # noqa: E402

from agentd.config.model import ServerSpec  # noqa: E402
from agentd.mcp.client.facade import MCPClient  # noqa: E402


async def _round(client: MCPClient, calls: int) -> list[float]:
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        await client.call_tool("echo", {"text": f"x{i}"})
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def main(calls: int, rounds: int) -> dict[str, float]:
    with python_peer("sdk_mcpserver.py", "--sse") as sse, \
            python_peer("sdk_mcpserver.py", "--legacy-only") as http:
        specs = {"legacy_sse": ServerSpec(name="s", url=f"http://127.0.0.1:{sse.port}/sse",
                                          transport="sse"),
                 "streamable_http": ServerSpec(name="h", url=http.url)}
        times: dict[str, list[float]] = {k: [] for k in specs}
        clients = {k: MCPClient(s, ping_interval=None) for k, s in specs.items()}
        for c in clients.values():
            await c.__aenter__()
        try:
            for c in clients.values():
                await _round(c, 20)  # warm-up
            for _ in range(rounds):
                for k, c in clients.items():
                    times[k] += await _round(c, calls)
        finally:
            for c in clients.values():
                await c.aclose()
    out = {f"{k}_p50_ms": round(statistics.median(v), 3) for k, v in times.items()}
    out |= {f"{k}_p99_ms": round(statistics.quantiles(v, n=100)[98], 3) for k, v in times.items()}
    out["calls"] = calls * rounds
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(main(a.calls, a.rounds))))
