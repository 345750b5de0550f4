"""MCP 2026-07-28 beside 2025-11-25 on agentd's server engine and the official SDK's.

    python benchmarks/bench_server_2026.py [--calls 10000] [--seq 1000] [--inflight 64]
                                           [--fresh 15] [--notify 300]

One run, one JSON line on stdout (a readable table on stderr):

* ``pair``: tools/call throughput / sequential p50 of agentd's ``MCPClient`` ->
  agentd's server (the revision the client negotiates is reported as ``era``)
  against the SDK ``Client`` -> the SDK ``MCPServer`` at the same revision
  (``mode="2026-07-28"`` vs ``mode="legacy"``), plus a bare aiohttp client at
  each revision against agentd's server (the server alone).  Servers run in
  their own processes (see benchmarks/bench_server.py, whose servers these are).
* ``fresh``: time to the first tools/call result from a freshly started
  process (interpreter and imports ready, timer started before the first
  connection): one stateless 2026-07-28 POST against initialize +
  notifications/initialized + the call at 2025-11-25.  Median of ``--fresh``
  processes each; ``cold`` starts the timer before the HTTP library's first use,
  ``warm`` after a throw-away ``server/discover`` POST on another connection and
  session, the same for both revisions (so the figure is the protocol's: a new
  connection and its exchanges, not the HTTP library's first use in a process);
  ``raw`` is the floor of a cold process: the same exchanges written by hand on
  an asyncio stream, no HTTP library at all.  The two revisions' processes are
  interleaved.
* ``notify``: publish -> listen -> read done: a handler in this process calls
  ``notify_updated(uri)``; the time until the client holding a
  ``subscriptions/listen`` stream (2026-07-28) or a session GET stream after
  ``resources/subscribe`` (2025-11-25) has the update and the ``resources/read``
  result in hand.  Server and client share this process's loop (loopback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_server as bs  # noqa: E402

V26 = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V26,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"}}


class BareModern(bs.BareClient):
    """The bare aiohttp+orjson client, stateless at 2026-07-28 (no handshake)."""

    async def __aenter__(self) -> BareModern:
        import aiohttp
        import orjson

        self._orjson = orjson
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self.headers = {"Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream",
                        "MCP-Protocol-Version": V26, "Mcp-Method": "tools/call",
                        "Mcp-Name": "echo"}
        return self

    async def call(self, text: str) -> str:
        self.n += 1
        body = self._orjson.dumps({"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                                   "params": {"name": "echo", "arguments": {"text": text},
                                              "_meta": META}})
        async with self.http.post(self.url, data=body, headers=self.headers) as r:
            msg = await self._body(r)
        return msg["result"]["content"][0]["text"]

    async def __aexit__(self, *exc) -> None:
        await self.http.close()


class SdkModern(bs.SdkClient):
    def __init__(self, url: str) -> None:
        from mcp import Client

        self.c = Client(url, mode=V26)


class AgentdLegacy(bs.AgentdClient):
    """agentd's client at 2025-11-25: primed as for a server already known to be
    legacy (its reconnect path initializes directly, no discover probe)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        conn = self.c._conn  # the connection's pin: re-initialize, as after a first handshake
        conn.reinitialize = True
        conn.generation = max(1, conn.generation)


_ERAS: dict = {}


def _recording(cls):
    """``cls`` that notes the revision its agentd client used (``MCPClient.era``)."""

    class Recording(cls):  # type: ignore[misc, valid-type]
        async def __aexit__(self, *exc) -> None:
            _ERAS[cls] = str(getattr(getattr(self, "c", None), "era", None))
            await super().__aexit__(*exc)

    return Recording


async def pair(args) -> dict:
    out: dict = {}
    combos = [
        ("2026:bare->agentd", "agentd", BareModern),
        ("2025:bare->agentd", "agentd", bs.BareClient),
        ("2026:agentd->agentd", "agentd", bs.AgentdClient),
        ("2025:agentd->agentd", "agentd", AgentdLegacy),
        ("2026:sdk->sdk", "sdk", SdkModern),
        ("2025:sdk->sdk", "sdk", bs.SdkClient),
    ]
    for name, server, cls in combos:
        calls = args.calls if server == "agentd" else max(500, args.calls // 10)
        with bs.server_process(server) as (proc, url):
            try:
                r = await bs.measure(_recording(cls), url, proc.pid, calls, args.seq,
                                     args.inflight)
                if "agentd->" in name:
                    r["era"] = _ERAS.pop(cls, None)
            except Exception as exc:  # report, keep the other figures
                r = {"error": f"{type(exc).__name__}: {exc}"}
        out[name] = r
        print(f"{name:22} {r}", file=sys.stderr, flush=True)
    with contextlib.suppress(KeyError, ZeroDivisionError):
        for v in ("2026", "2025"):
            out[f"pair_ratio_{v}"] = round(out[f"{v}:agentd->agentd"]["calls_per_s"]
                                           / out[f"{v}:sdk->sdk"]["calls_per_s"], 1)
    return out


FRESH = r"""
import asyncio, sys, time, aiohttp, orjson
url, era, warm = sys.argv[1], sys.argv[2], sys.argv[3] == "warm"
H = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
META = %s
async def main():
    if warm:  # the HTTP library's one-time costs (its first POST and JSON answer on a
        # session of its own) paid first, the same for both revisions: one server/discover
        async with aiohttp.ClientSession() as w:
            probe = {"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {"_meta": META}}
            async with w.post(url, data=orjson.dumps(probe),
                              headers={**H, "MCP-Protocol-Version": "2026-07-28",
                                       "Mcp-Method": "server/discover"}) as r:
                await r.read()
    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as http:
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "hi"}}}
        if era == "2026":
            call["params"]["_meta"] = META
            h = {**H, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
                 "Mcp-Name": "echo"}
        else:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}}}
            async with http.post(url, data=orjson.dumps(init), headers=H) as r:
                await r.read()
                sid = r.headers["Mcp-Session-Id"]
            h = {**H, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
            async with http.post(url, data=b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
                                 headers=h) as r:
                await r.read()
        async with http.post(url, data=orjson.dumps(call), headers=h) as r:
            body = await r.read()
        dt = time.perf_counter() - t0
        assert b'"hi"' in body, body
    print(dt)
asyncio.run(main())
""".replace("%s", json.dumps(META))


RAW = r"""
import asyncio, sys, time
from urllib.parse import urlsplit
url, era = sys.argv[1], sys.argv[2]
u = urlsplit(url)
META = %s
HEAD = ("POST %%s HTTP/1.1\r\nHost: %%s\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\n%%sContent-Length: %%d\r\n\r\n")
async def main():
    import json
    t0 = time.perf_counter()
    r, w = await asyncio.open_connection(u.hostname, u.port)
    async def post(body, extra=""):
        w.write((HEAD %% (u.path, u.netloc, extra, len(body))).encode() + body)
        head = await r.readuntil(b"\r\n\r\n")
        n, sid = 0, ""
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.lower() == b"content-length":
                n = int(v)
            elif k.lower() == b"mcp-session-id":
                sid = v.strip().decode()
        return (await r.readexactly(n)) if n else b"", sid
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}}}
    if era == "2026":
        call["params"]["_meta"] = META
        extra = "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n"
    else:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}}
        _, sid = await post(json.dumps(init).encode())
        extra = f"Mcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        await post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', extra)
    body, _ = await post(json.dumps(call).encode(), extra)
    dt = time.perf_counter() - t0
    assert b'"hi"' in body, body
    w.close()
    print(dt)
asyncio.run(main())
""".replace("%s", json.dumps(META), 1).replace("%%", "%")


def fresh(url: str, n: int, mode: str) -> dict:
    """Median seconds to the first result per revision, the two revisions'
    processes interleaved (so a drift in machine load falls on both alike)."""
    script = RAW if mode == "raw" else FRESH
    times: dict[str, list[float]] = {"2026": [], "2025": []}
    for i in range(2 * n):
        era_ = ("2026", "2025")[i % 2]
        argv = [sys.executable, "-c", script, url, era_] + ([] if mode == "raw" else [mode])
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
        times[era_].append(float(p.stdout.strip()))
    f26, f25 = statistics.median(times["2026"]), statistics.median(times["2025"])
    return {"2026_ms": round(f26 * 1e3, 3), "2025_ms": round(f25 * 1e3, 3), "ratio": round(f26 / f25, 3)}


async def notify(n: int) -> dict:
    import aiohttp
    import orjson

    from agentd.mcp.server.handler import Handler
    from agentd.mcp.server.http.server import serve

    h = Handler("bench", "1", subscribe=True)
    uri = "mem://watched"

    @h.resource(uri, name="watched")
    async def read(_uri):
        return "v"

    runner = await serve(h, port=0)
    url = runner.url
    acc = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    out = {}
    try:
        async with aiohttp.ClientSession() as http:
            # 2026-07-28: a listen stream; read statelessly
            lh = {**acc, "MCP-Protocol-Version": V26, "Mcp-Method": "subscriptions/listen"}
            listen = {"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
                      "params": {"notifications": {"resourceSubscriptions": [uri]},
                                 "_meta": META}}
            rh = {**acc, "MCP-Protocol-Version": V26, "Mcp-Method": "resources/read",
                  "Mcp-Name": uri}
            rd = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "resources/read",
                               "params": {"uri": uri, "_meta": META}})
            resp = await http.post(url, data=orjson.dumps(listen), headers=lh)
            await resp.content.readuntil(b"\n\n")  # the acknowledgement
            out["2026"] = await _loop(h, uri, n, resp, http, url, rd, rh)
            resp.close()
            # 2025-11-25: a session, resources/subscribe, the GET stream
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}}}
            async with http.post(url, data=orjson.dumps(init), headers=acc) as r:
                sid = r.headers["Mcp-Session-Id"]
            sh = {**acc, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
            for body in (b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
                         orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                                       "params": {"uri": uri}})):
                async with http.post(url, data=body, headers=sh) as r:
                    await r.read()
            resp = await http.get(url, headers={**sh, "Accept": "text/event-stream"})
            await resp.content.readuntil(b"\n\n")  # ": stream open"
            rd = orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                               "params": {"uri": uri}})
            out["2025"] = await _loop(h, uri, n, resp, http, url, rd, sh)
            resp.close()
    finally:
        await runner.stop()
    return out


async def _loop(h, uri, n, resp, http, url, rd, rh) -> dict:
    lat = []
    for i in range(n + 50):
        t0 = time.perf_counter()
        h.notify_updated(uri)
        frame = await resp.content.readuntil(b"\n\n")
        assert b"notifications/resources/updated" in frame, frame
        async with http.post(url, data=rd, headers=rh) as r:
            body = await r.read()
        assert b'"text":"v"' in body, body
        if i >= 50:
            lat.append(time.perf_counter() - t0)
    lat.sort()
    return {"p50_ms": round(statistics.median(lat) * 1e3, 3),
            "p99_ms": round(lat[int(len(lat) * 0.99) - 1] * 1e3, 3)}


async def run(args) -> dict:
    from agentd.log import configure

    configure(level="warning")
    out: dict = {"calls": args.calls, "seq": args.seq, "inflight": args.inflight}
    out["pair"] = await pair(args)
    out["fresh"] = {}
    with bs.server_process("agentd") as (_proc, url):
        for mode in ("cold", "warm", "raw"):
            out["fresh"][mode] = fresh(url, args.fresh, mode)
    print(f"fresh process          {out['fresh']}", file=sys.stderr, flush=True)
    out["notify"] = await notify(args.notify)
    print(f"publish->listen->read  {out['notify']}", file=sys.stderr, flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=10000)
    p.add_argument("--seq", type=int, default=1000)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--fresh", type=int, default=15)
    p.add_argument("--notify", type=int, default=300)
    args = p.parse_args()
    import uvloop

    print(json.dumps(uvloop.run(run(args))))


if __name__ == "__main__":
    main()
