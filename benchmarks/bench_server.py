"""tools/call over Streamable HTTP: agentd's server engine against the official SDK's.

    python benchmarks/bench_server.py [--calls 20000] [--seq 2000] [--inflight 64]

Each server runs in its own process (so its CPU time can be read from
/proc/<pid>/stat) with one equivalent tool, ``echo{text}`` -> one text block:

* agentd: ``agentd.mcp.server.http.server.serve`` of a ``Handler`` (uvloop, logs at warning);
* sdk:    ``mcp.server.mcpserver.MCPServer`` (the SDK 2.x "FastMCP") under uvicorn,
          in its default configuration (SSE answers) and with ``json_response=True``.

Drivers (in this process, on uvloop):

* ``same client``: one bare aiohttp+orjson Streamable HTTP client against each
  server, so the difference is the server;
* ``pairs``: agentd's ``MCPClient`` -> agentd's server against the SDK's ``Client``
  -> the SDK's ``MCPServer``.

For every combination: throughput with ``--inflight`` calls in flight,
sequential p50/p99 latency, and server CPU per call (user+sys of the server
process over the throughput phase / calls).  Prints one JSON line of figures
(and a readable table on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TICK = os.sysconf("SC_CLK_TCK")
ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


# ---------------------------------------------------------------- servers

def serve_agentd(port: int) -> None:
    import uvloop

    from agentd.log import configure
    from agentd.mcp.server.handler import Handler
    from agentd.mcp.server.http.server import Limits, serve

    configure(level="warning")

    async def main() -> None:
        h = Handler("bench", "1")

        @h.tool("echo", ECHO_SCHEMA, description="echo the text")
        async def echo(args, ctx):
            return args["text"]

        runner = await serve(h, port=port, limits=Limits(sessions_per_client=100_000))
        try:
            await asyncio.Event().wait()
        finally:
            await runner.stop()

    uvloop.run(main())


def serve_sdk(port: int, json_response: bool) -> None:
    import logging

    import uvicorn
    from mcp.server.mcpserver import MCPServer

    logging.basicConfig(level=logging.WARNING)
    mcp = MCPServer("bench", log_level="WARNING")

    @mcp.tool(description="echo the text")
    def echo(text: str) -> str:
        return text

    app = mcp.streamable_http_app(json_response=json_response)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                loop="uvloop")


# ---------------------------------------------------------------- helpers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


@contextlib.contextmanager
def server_process(kind: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield proc, f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class BareClient:
    """A minimal Streamable HTTP client: aiohttp + orjson, JSON or SSE answers."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.n = 0

    async def __aenter__(self) -> BareClient:
        import aiohttp
        import orjson

        self._orjson = orjson
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self.headers = {"Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream"}
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "1"}}}
        async with self.http.post(self.url, data=orjson.dumps(init), headers=self.headers) as r:
            await self._body(r)
            self.headers["Mcp-Session-Id"] = r.headers["Mcp-Session-Id"]
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        async with self.http.post(self.url, data=b'{"jsonrpc":"2.0","method":'
                                  b'"notifications/initialized"}', headers=self.headers) as r:
            await r.read()
        return self

    async def _body(self, r) -> dict:
        data = await r.read()
        if r.content_type == "text/event-stream":
            for line in data.splitlines():
                if line.startswith(b"data:") and len(line) > 6:
                    return self._orjson.loads(line[5:])
        return self._orjson.loads(data)

    async def call(self, text: str) -> str:
        self.n += 1
        body = self._orjson.dumps({"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                                   "params": {"name": "echo", "arguments": {"text": text}}})
        async with self.http.post(self.url, data=body, headers=self.headers) as r:
            msg = await self._body(r)
        return msg["result"]["content"][0]["text"]

    async def __aexit__(self, *exc) -> None:
        with contextlib.suppress(Exception):
            async with self.http.delete(self.url, headers=self.headers) as r:
                await r.read()
        await self.http.close()


class AgentdClient:
    def __init__(self, url: str) -> None:
        from agentd.config.model import ServerSpec
        from agentd.mcp import MCPClient

        self.c = MCPClient(ServerSpec(name="bench", url=url), run_id="bench", ping_interval=None)

    async def __aenter__(self) -> AgentdClient:
        await self.c.__aenter__()
        await self.c.list_tools()
        return self

    async def call(self, text: str) -> str:
        obs = await self.c.call_tool("echo", {"text": text})
        return obs.text

    async def __aexit__(self, *exc) -> None:
        await self.c.__aexit__(*exc)


class SdkClient:
    def __init__(self, url: str) -> None:
        from mcp import Client

        self.c = Client(url, mode="legacy")

    async def __aenter__(self) -> SdkClient:
        await self.c.__aenter__()
        return self

    async def call(self, text: str) -> str:
        r = await self.c.call_tool("echo", {"text": text})
        return r.content[0].text

    async def __aexit__(self, *exc) -> None:
        await self.c.__aexit__(*exc)


async def measure(client_cls, url: str, pid: int, calls: int, seq: int, inflight: int) -> dict:
    async with client_cls(url) as c:
        assert await c.call("warm") == "warm"
        for _ in range(min(200, seq)):
            await c.call("x")
        lat = []
        for _ in range(seq):
            t0 = time.perf_counter()
            await c.call("hello")
            lat.append(time.perf_counter() - t0)
        lat.sort()
        queue = iter(range(calls))

        async def worker() -> None:
            for _ in queue:
                await c.call("hello")

        cpu0 = cpu_seconds(pid)
        t0 = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for _ in range(inflight):
                tg.create_task(worker())
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(pid) - cpu0
    return {"calls_per_s": round(calls / wall), "p50_ms": round(statistics.median(lat) * 1e3, 3),
            "p99_ms": round(lat[int(len(lat) * 0.99) - 1] * 1e3, 3),
            "server_cpu_us_per_call": round(cpu / calls * 1e6, 1)}


async def run(args) -> dict:
    from agentd.log import configure

    configure(level="warning")
    combos = [
        ("same_client", "agentd", "bare", BareClient),
        ("same_client", "sdk", "bare", BareClient),
        ("same_client", "sdk-json", "bare", BareClient),
        ("pair", "agentd", "agentd", AgentdClient),
        ("pair", "sdk", "sdk", SdkClient),
    ]
    out: dict = {"inflight": args.inflight, "calls": args.calls, "seq": args.seq}
    for group, server, client, cls in combos:
        calls = args.calls if server == "agentd" else max(1000, args.calls // 10)
        with server_process(server) as (proc, url):
            try:
                r = await measure(cls, url, proc.pid, calls, args.seq, args.inflight)
            except Exception as exc:  # report, keep the other figures
                r = {"error": f"{type(exc).__name__}: {exc}"}
        out[f"{group}:{client}->{server}"] = r
        print(f"{group:12} {client:>7} -> {server:9} {r}", file=sys.stderr, flush=True)
    a, s = out["pair:agentd->agentd"], out["pair:sdk->sdk"]
    sa, ss = out["same_client:bare->agentd"], out["same_client:bare->sdk"]
    with contextlib.suppress(KeyError, ZeroDivisionError):
        out["pair_throughput_ratio"] = round(a["calls_per_s"] / s["calls_per_s"], 1)
        out["pair_p50_ms"] = a["p50_ms"]
        out["server_cpu_ratio"] = round(sa["server_cpu_us_per_call"]
                                        / ss["server_cpu_us_per_call"], 3)
        out["pair_server_cpu_ratio"] = round(a["server_cpu_us_per_call"]
                                             / s["server_cpu_us_per_call"], 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"))
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--seq", type=int, default=2000)
    p.add_argument("--inflight", type=int, default=64)
    args = p.parse_args()
    if args.serve:
        kind, port = args.serve[0], int(args.serve[1])
        if kind == "agentd":
            serve_agentd(port)
        else:
            serve_sdk(port, json_response=kind == "sdk-json")
        return
    import uvloop

    print(json.dumps(uvloop.run(run(args))))


if __name__ == "__main__":
    main()
