"""Server restart -> recovered: how long agentd's client takes to be usable again.

    python benchmarks/bench_restart.py [--rounds 5]

Against ``@modelcontextprotocol/server-everything`` (npm, tests/peers), which
answers a session it does not know with HTTP 400 "No valid session ID
provided" (not the specification's 404), each round SIGKILLs the server and
starts a new one on the same port, then times, from the moment the new server
listens:

* ``restart_to_call`` -- a task-mode client (``reconnect_stale=False``, as
  ``agentd --mode task`` runs it) calling ``echo`` right after the restart:
  the first successful result (one re-initialize on the way);
* ``restart_to_wake`` -- a client subscribed to one resource (as the reactive
  daemon is): the first ``(server, uri)`` on its update queue after the
  restart, i.e. the re-initialize, the re-subscribe and the synthesized
  ``updated`` of spec §1.6 that wakes the daemon.

One JSON line per figure (median, max and every round, in seconds).  Figures
only; nothing asserts a time.  docs/benchmarks.md has the measured figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from peers import PeerProcess, ensure_npm_peers, free_port, npm_env  # noqa: E402

from agentd import log as _log  # noqa: E402
from agentd.config.model import ServerSpec  # noqa: E402
from agentd.mcp import MCPClient  # noqa: E402

DOC = "demo://resource/static/document/architecture.md"


def everything() -> PeerProcess:
    bin_dir = ensure_npm_peers("mcp-server-everything", "node")
    port = free_port()
    return PeerProcess([str(bin_dir / "mcp-server-everything"), "streamableHttp"], port,
                       env=npm_env({"PORT": str(port)}))


async def restart(srv: PeerProcess) -> float:
    """Kill and start again on the same port; the moment the new one listens."""
    await asyncio.to_thread(srv.kill)
    await asyncio.to_thread(srv.start)
    return time.perf_counter()


async def restart_to_call(srv: PeerProcess, rounds: int) -> list[float]:
    out = []
    async with MCPClient(ServerSpec(name="ev", url=srv.url), ping_interval=None,
                         reconnect_stale=False) as c:
        await c.call_tool("echo", {"message": "warm"})
        for _ in range(rounds):
            t0 = await restart(srv)
            obs = await c.call_tool("echo", {"message": "after"})
            out.append(time.perf_counter() - t0)
            assert obs.text == "Echo: after", obs
    return out


async def restart_to_wake(srv: PeerProcess, rounds: int) -> list[float]:
    out = []
    async with MCPClient(ServerSpec(name="ev", url=srv.url), ping_interval=None) as c:
        assert await c.subscribe(DOC)
        for _ in range(rounds):
            while not c.updates.empty():
                c.updates.get_nowait()
            gen = c.generation
            t0 = await restart(srv)
            async with asyncio.timeout(120):
                got = await c.updates.get()
                while c.generation == gen:  # a late update of the old server: not the wake
                    got = await c.updates.get()
            out.append(time.perf_counter() - t0)
            assert got == ("ev", DOC), got
            # settle before the next restart: the read the daemon does, and the re-listing
            await c.read_resource(DOC)
            await c.list_tools()
            await c.list_resources()
    return out


def line(name: str, samples: list[float]) -> str:
    return json.dumps({"bench": name, "server": "server-everything",
                       "median_s": round(statistics.median(samples), 3),
                       "max_s": round(max(samples), 3),
                       "rounds_s": [round(s, 3) for s in samples]})


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    _log.configure(level=os.environ.get("AGENTD_LOG_LEVEL", "error"))
    with everything() as srv:
        calls = await restart_to_call(srv, args.rounds)
    print(line("restart_to_call", calls), flush=True)
    with everything() as srv:
        wakes = await restart_to_wake(srv, args.rounds)
    print(line("restart_to_wake", wakes), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
