"""A2A benchmark: delegation overhead (client side) and served tasks/s (server side).

    python benchmarks/bench_a2a.py [--calls 300] [--rounds 3] [--tasks 60] [--inflight 8]

1. Delegation round trip. One `a2a-sdk` peer (tests/support/a2a_peer.py: the SDK's own
   request handler, the test's trivial executor answering ``echo``) over
   JSON-RPC with streaming. Two clients, connected at once and measured in
   interleaved rounds of ``--calls`` sequential delegations each:

   * ``agentd`` -- the ``agentd__a2a_delegate`` self-tool (``SelfTools.call``):
     SendStreamingMessage followed to the terminal state, distilled into the
     observation the model would see;
   * ``sdk``    -- the ``a2a-sdk`` client's ``send_message`` (streaming), the
     events collected until the stream ends.

   Figures: p50/p99 per client (best round) and ``added_ms_p50`` =
   agentd p50 - sdk p50: the latency agentd adds per delegation over the
   SDK's own client (target: <= 1 ms); and
   each client's CPU ms per call in this process (best round).

2. Served tasks/s. The same SDK client sends ``--tasks`` SendMessage calls
   (``--inflight`` at once, blocking until each task ends) to:

   * ``sdk_server``    -- the ``a2a-sdk`` server with the trivial executor;
   * ``agentd_served`` -- ``agentd --serve-a2a``, whose tasks are subagent runs
     (a forked child per task, a playback intelligence answering at once).

   The two do different work per task by design (agentd runs an agent per
   task); the figure is what an A2A client gets from each.

Prints one JSON line. Figures only; nothing asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from peers import PeerProcess, free_port, python_peer  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


async def timed(call, n: int) -> tuple[list[float], float]:
    """Latencies (ms) of `n` sequential calls, and this process's CPU ms per call."""
    out = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        out.append((time.perf_counter() - t0) * 1000)
    return out, (time.process_time() - cpu0) * 1000 / n


async def delegation(url: str, calls: int, rounds: int) -> dict:
    from a2a.client import create_client
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

    from agentd.a2a.peers import A2APeers
    from agentd.agent.a2a_delegate import install
    from agentd.agent.selftools import SelfTools
    from agentd.config.model import ServerSpec
    from agentd.log import configure

    configure(fmt="json", level="warning")
    sdk = await create_client(url)
    counter = iter(range(10**9))

    async def sdk_call() -> None:
        req = SendMessageRequest(message=Message(
            message_id=f"b{next(counter)}", role=Role.ROLE_USER, parts=[Part(text="echo hi")]))
        events = [ev async for ev in sdk.send_message(req)]
        assert events[-1].status_update.status.state == 3  # TASK_STATE_COMPLETED

    async with A2APeers((ServerSpec(name="p", url=url),), secrets_dir="/nonexistent") as peers:
        tools = SelfTools()
        install(tools, peers)

        async def agentd_call() -> None:
            obs = await tools.call("agentd__a2a_delegate", {"peer": "p", "message": "echo hi"})
            assert not obs.is_error, obs.text

        for call in (agentd_call, sdk_call):  # warm-up: connections, caches
            await timed(call, 20)
        best: dict[str, list[float]] = {}
        cpu: dict[str, float] = {}
        for _ in range(rounds):
            for name, call in (("agentd", agentd_call), ("sdk", sdk_call)):
                lat, cpu_ms = await timed(call, calls)
                if name not in best or statistics.median(lat) < statistics.median(best[name]):
                    best[name] = lat
                cpu[name] = min(cpu.get(name, cpu_ms), cpu_ms)
    await sdk.close()
    out: dict = {name: {"p50_ms": round(pct(lat, 0.5), 3), "p99_ms": round(pct(lat, 0.99), 3),
                        "client_cpu_ms_per_call": round(cpu[name], 3)}
                 for name, lat in best.items()}
    out["added_ms_p50"] = round(out["agentd"]["p50_ms"] - out["sdk"]["p50_ms"], 3)
    return out


async def served_rate(url: str, tasks: int, inflight: int) -> float:
    import httpx
    from a2a.client import ClientConfig, create_client
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

    client = await create_client(url, client_config=ClientConfig(
        streaming=False, httpx_client=httpx.AsyncClient(timeout=120)))
    sem = asyncio.Semaphore(inflight)
    counter = iter(range(10**9))

    async def one() -> None:
        async with sem:
            req = SendMessageRequest(message=Message(
                message_id=f"s{next(counter)}", role=Role.ROLE_USER,
                parts=[Part(text="echo hi")]))
            [ev] = [ev async for ev in client.send_message(req)]
            assert ev.task.status.state == 3, ev  # TASK_STATE_COMPLETED

    await asyncio.gather(*(one() for _ in range(min(inflight, tasks))))  # warm-up
    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(tasks)))
    rate = tasks / (time.perf_counter() - t0)
    await client.close()
    return round(rate, 1)


def start_served(tmp: Path, spawn: str | None) -> PeerProcess:
    script = tmp / "served.json"
    script.write_text(json.dumps({"playback": 1, "turns": [{"content": "done"}]}))
    port = free_port()
    return PeerProcess([sys.executable, "-m", "agentd", "--features", "a2a",
                        "--serve-mcp", f"http://127.0.0.1:{port}", "--serve-a2a",
                        "--mode", "reactive", "--subscribe", "file:///nowhere",
                        "--max-subagents", "100000", "--instruction", "worker",
                        "--intelligence", f"playback:{script}", "--log-format", "json",
                        *(["--spawn", spawn] if spawn else [])],
                       port).start()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=60)
    ap.add_argument("--inflight", type=int, default=8)
    ap.add_argument("--spawn", default=None, help="the served agentd's --spawn")
    args = ap.parse_args()
    result: dict = {"benchmark": "a2a", "calls": args.calls, "rounds": args.rounds}
    with python_peer("a2a_peer.py", "--binding", "jsonrpc") as peer:
        url = f"http://127.0.0.1:{peer.port}"
        result["delegation"] = await delegation(url, args.calls, args.rounds)
        result["served_tasks_per_s"] = {
            "sdk_server": await served_rate(url, args.tasks, args.inflight)}
    with tempfile.TemporaryDirectory() as tmp:
        served = start_served(Path(tmp), args.spawn)
        try:
            result["served_tasks_per_s"]["agentd_served"] = await served_rate(
                f"http://127.0.0.1:{served.port}", args.tasks, args.inflight)
        finally:
            served.stop()
    result["served_tasks_per_s"].update(tasks=args.tasks, inflight=args.inflight)
    print(json.dumps(result))


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
