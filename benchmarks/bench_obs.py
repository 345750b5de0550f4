"""What tracing costs: the loop step and self-MCP calls/s, tracing off / on / exporting.

    python benchmarks/bench_obs.py [--steps N] [--calls N] [--rounds R]

Three modes, measured in one run and one process, interleaved mode by mode
within every round (tracing is switched on and off between them, as
`agentd.obs.trace.setup`/`shutdown` do for a run), best of R rounds:

* `off`: no `OTEL_EXPORTER_OTLP_*` environment: the facade's no-op path;
* `record`: spans are made and dropped, no exporter (the cost of tracing
  itself);
* `export`: spans are made and exported over OTLP/HTTP by the batch thread to
  a local receiver (an aiohttp server in its own process that reads and
  discards each body).

Per mode:

* `step_us`: one loop step of the real `Loop` (playback intelligence, one tool
  call of a no-op MCP tool on a real server over loopback HTTP, through the
  real Toolbox and MCP client): the `agent.step`, `intelligence.call` and
  `tools/call` spans, the `_meta.traceparent` and the W3C headers;
* `inproc_step_us`: the same loop with an in-process no-op self-tool (no
  network: the loop's own cost, where tracing weighs most);
* `selfmcp_calls_per_s`: `tools/call status` requests a second against a
  self-MCP served in this process (the `mcp.server` span, continuing the
  request's `_meta.traceparent`), one client, sequential;
* `*_cpu_us`: this process's CPU time for the same work (the export thread
  included: it is flushed before the clock stops); steadier than wall time on
  a shared machine.

`overhead_pct` compares each mode to `off`. The echo MCP server and the
receiver run untraced in their own processes. Prints one JSON line. Nothing
here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MODES = ("off", "record", "export")
_LOWER = ("step_us", "inproc_step_us", "step_cpu_us", "inproc_step_cpu_us",
          "selfmcp_cpu_us_per_call")


async def _selfmcp_client(url: str):
    """An initialized raw session to the self-MCP; returns (http, once)."""
    import aiohttp

    http = aiohttp.ClientSession()
    hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}}
    async with http.post(url, json=init, headers=hdrs) as r:
        sid = r.headers["Mcp-Session-Id"]
        await r.read()
    hdrs = {**hdrs, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
    async with http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                         headers=hdrs):
        pass
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "status", "arguments": {}, "_meta": {"traceparent": tp}}}).encode()

    async def once() -> None:
        async with http.post(url, data=body, headers=hdrs) as r:
            await r.read()
            assert r.status == 200

    return http, once


async def _run(echo_url: str, receiver_url: str, steps: int, calls: int,
               rounds: int) -> dict[str, list[dict]]:
    from bench_loop import direct_calls, loop_steps, script
    from bench_server import free_port

    from agentd import log as logmod
    from agentd.agent.loop import Actions
    from agentd.agent.selftools import SelfTool, SelfTools, ok
    from agentd.config import ServerSpec, ServeSpec
    from agentd.mcp.toolbox import Toolbox
    from agentd.obs import trace
    from agentd.tree.api import Unavailable
    from agentd.tree.selfmcp import serve_self_mcp

    for k in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[k]
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver_url  # read by export mode only
    devnull = open(os.devnull, "w")  # noqa: ASYNC230 - set-up, outside the timing
    logmod.configure(stream=devnull, level="info", fmt="json", run_id="bench")
    results: dict[str, list[dict]] = {m: [] for m in MODES}
    port = free_port()
    runner = await serve_self_mcp(ServeSpec(url=f"http://127.0.0.1:{port}", host="127.0.0.1",
                                            port=port, scheme="http"), Unavailable(),
                                  run_id="bench")
    http, once = await _selfmcp_client(f"http://127.0.0.1:{port}/mcp")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with Toolbox([ServerSpec(name="noop", url=echo_url)], run_id="bench",
                               ping_interval=None) as toolbox:
                selftools = SelfTools(resources=toolbox)

                async def noop(args: dict) -> object:
                    return ok("x")

                selftools.add(SelfTool("noop", "no-op", {"type": "object"}, noop))
                actions = Actions(toolbox, selftools)
                pb_mcp = script(Path(tmp) / "mcp.json", "noop__echo")
                pb_self = script(Path(tmp) / "self.json", "agentd__noop")
                await direct_calls(toolbox, "noop__echo", 200)  # warm up
                await loop_steps(pb_mcp, actions, 200)
                for _ in range(200):
                    await once()
                for _ in range(rounds):
                    for mode in MODES:
                        if mode != "off":
                            assert trace.setup("agentd-bench", mode=mode)
                        out: dict = {}
                        with trace.run_span("agentd.run", "bench"):
                            step, step_cpu = await loop_steps(pb_mcp, actions, steps)
                            inproc, inproc_cpu = await loop_steps(pb_self, actions, steps)
                            trace.flush()
                        out["step_us"] = round(step * 1e6, 1)
                        out["inproc_step_us"] = round(inproc * 1e6, 1)
                        out["step_cpu_us"] = round(step_cpu * 1e6, 1)
                        out["inproc_step_cpu_us"] = round(inproc_cpu * 1e6, 1)
                        c0, t0 = time.process_time(), time.perf_counter()
                        for _ in range(calls):
                            await once()
                        trace.flush()
                        t1, c1 = time.perf_counter(), time.process_time()
                        out["selfmcp_calls_per_s"] = round(calls / (t1 - t0), 1)
                        out["selfmcp_cpu_us_per_call"] = round((c1 - c0) / calls * 1e6, 1)
                        trace.shutdown()
                        results[mode].append(out)
    finally:
        await http.close()
        await runner.stop()
        logmod.configure(stream=sys.stderr)
        devnull.close()
    return results


def _receiver(port: int) -> None:
    """The local OTLP/HTTP receiver (its own process): reads and discards."""
    from aiohttp import web

    async def traces(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    import uvloop
    from bench_loop import start_server
    from bench_server import free_port

    from tests.peers import PeerProcess

    peer, engine, _tool = start_server()
    rport = free_port()
    receiver = PeerProcess([sys.executable, "-c",
                            "import sys; sys.path.insert(0, sys.argv[1]); "
                            "import bench_obs; bench_obs._receiver(int(sys.argv[2]))",
                            str(ROOT / "benchmarks"), str(rport)], rport, cwd=ROOT).start()
    try:
        results = uvloop.run(_run(peer.url, f"http://127.0.0.1:{rport}", a.steps, a.calls,
                                  a.rounds))
    finally:
        receiver.stop()
        peer.stop()
    best = {m: {**{k: min(r[k] for r in rs) for k in _LOWER},
                "selfmcp_calls_per_s": max(r["selfmcp_calls_per_s"] for r in rs)}
            for m, rs in results.items()}
    off = best["off"]
    for m in ("record", "export"):
        b = best[m]
        pct = {k.removesuffix("_us"): round((b[k] / off[k] - 1) * 100, 1) for k in _LOWER}
        pct["selfmcp_calls_per_s"] = round((1 - b["selfmcp_calls_per_s"]
                                            / off["selfmcp_calls_per_s"]) * 100, 1)
        b["overhead_pct"] = pct
    print(json.dumps({"bench": "tracing_overhead", "server": engine, "steps": a.steps,
                      "calls": a.calls, "rounds": a.rounds, "load": os.getloadavg()[0],
                      **best}))


if __name__ == "__main__":
    main()
