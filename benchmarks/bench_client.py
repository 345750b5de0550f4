"""tools/call benchmark: agentd's MCP client vs the official SDK client vs bare aiohttp.

    python benchmarks/bench_client.py [--calls 2000] [--inflight 64]
                                      [--servers sdk_json,sdk_sse,raw,sdk_json_2026,sdk_sse_2026]
                                      [--first 30]

Each configuration starts one server in a subprocess and drives the same
``echo`` tool with all three clients, in turn:

* ``sdk_json`` / ``sdk_sse`` -- the official SDK's low-level ``Server``
  (``tests/support/sdk_servers.py``) answering JSON bodies / SSE streams;
* ``sdk_json_2026`` / ``sdk_sse_2026`` -- the same server run with
  ``--era modern``: it also speaks MCP 2026-07-28, so agentd's client (which
  probes ``server/discover`` first) and the SDK client in ``mode="auto"`` both
  use it statelessly, and the bare client posts stateless requests (the
  revision's ``_meta`` and headers, no ``initialize``).  The pair at
  2026-07-28 beside the pair at 2025-11-25, in one run;
* ``raw`` -- a fixed-answer HTTP/1.1 server on a bare asyncio protocol (this
  file, ``--serve-raw PORT``): it costs almost no CPU, so on a small machine
  the client figures are not disturbed by the server competing for cores.

The clients:

* ``agentd``  -- ``agentd.mcp.MCPClient.call_tool`` (validation, run-id
  ``_meta``, typed result, Observation);
* ``sdk``     -- ``mcp.Client(url, mode="legacy")`` (2.x, 2025-11-25 handshake);
* ``bare``    -- the floor: one ``aiohttp.ClientSession`` posting the same JSON
  with orjson and reading the body (no MCP logic at all).

For each: round trip p50/p99 over ``--calls`` sequential calls, throughput
with ``--inflight`` calls in flight on one session, and client CPU time per
call (``time.process_time`` of this process over the sequential calls; the
server is another process).  The three clients are connected at once and
measured in ``--rounds`` interleaved rounds, so background load hits them
alike; CPU per call is each client's best round.  Prints one JSON line with the figures and the
ratios (agentd/sdk, agentd/bare).  Figures only; nothing asserts a time.

``first_result`` (with ``--first N`` > 0): the time from nothing (no
connection, no session) to the first ``tools/call`` result, median of N fresh
starts against the ``sdk_json`` server of each revision, on agentd's own
session and transport layers: at 2025-11-25 ``initialize`` +
``notifications/initialized`` + the call; at 2026-07-28 the stateless call
alone (no handshake: the version rides in ``_meta``).  Beside it,
``connect_to_first_result`` is the whole ``MCPClient`` (version selection --
``server/discover`` first, a fallback ``initialize`` when the server is older
-- the catalogue listing, then the call).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import aiohttp  # noqa: E402
import orjson  # noqa: E402

ARGS = {"text": "hello, world"}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


async def sequential(call, calls: int) -> tuple[float, list[float]]:
    """CPU seconds and the latencies of ``calls`` sequential calls."""
    gc.collect()
    lat: list[float] = []
    cpu0 = time.process_time()
    for _ in range(calls):
        t0 = time.perf_counter()
        await call()
        lat.append(time.perf_counter() - t0)
    return time.process_time() - cpu0, lat


async def concurrent(call, calls: int, inflight: int) -> tuple[float, float]:
    """Wall and CPU seconds of ``calls`` calls with ``inflight`` in flight."""
    sem = asyncio.Semaphore(inflight)

    async def one():
        async with sem:
            await call()

    gc.collect()
    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(calls)))
    return time.perf_counter() - t0, time.process_time() - cpu0


@contextlib.asynccontextmanager
async def agentd_client(url: str):
    from agentd.config.model import ServerSpec
    from agentd.log import configure
    from agentd.mcp import MCPClient

    configure(level="warning")
    async with MCPClient(ServerSpec(name="bench", url=url), run_id="bench",
                         ping_interval=None) as c:
        async def call():
            obs = await c.call_tool("echo", ARGS)
            assert obs.text == "hello, world"
        yield call


@contextlib.asynccontextmanager
async def sdk_client(url: str, mode: str = "legacy"):
    from mcp import Client

    async with Client(url, mode=mode) as c:
        async def call():
            r = await c.call_tool("echo", ARGS)
            assert r.content[0].text == "hello, world"
        yield call


@contextlib.asynccontextmanager
async def bare_client(url: str):
    """The floor: aiohttp + orjson, the same JSON on the wire, no MCP logic."""
    base = {"Accept": "application/json, text/event-stream",
            "Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128)) as http:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bare", "version": "0"}}}
        async with http.post(url, data=orjson.dumps(init), headers=base) as r:
            sid = r.headers.get("Mcp-Session-Id")
            await r.read()
        headers = dict(base)
        if sid:
            headers["Mcp-Session-Id"] = sid
        headers["MCP-Protocol-Version"] = "2025-11-25"
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post(url, data=orjson.dumps(note), headers=headers) as r:
            await r.read()
        counter = iter(range(1, 1 << 60))

        async def call():
            body = orjson.dumps({"jsonrpc": "2.0", "id": next(counter), "method": "tools/call",
                                 "params": {"name": "echo", "arguments": ARGS,
                                            "_meta": {"io.modelcontextprotocol/run-id": "b"}}})
            async with http.post(url, data=body, headers=headers) as r:
                data = await r.read()
            if data.startswith(b"{"):
                msg = orjson.loads(data)
            else:  # SSE: the data line of the one event
                line = next(x for x in data.split(b"\n") if x.startswith(b"data:"))
                msg = orjson.loads(line[5:])
            assert msg["result"]["content"][0]["text"] == "hello, world"

        yield call


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientInfo": {"name": "bare", "version": "0"},
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/run-id": "b"}


@contextlib.asynccontextmanager
async def bare_client_2026(url: str):
    """The floor at 2026-07-28: stateless POSTs, the revision's _meta and headers."""
    headers = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28",
               "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128)) as http:
        counter = iter(range(1, 1 << 60))

        async def call():
            body = orjson.dumps({"jsonrpc": "2.0", "id": next(counter), "method": "tools/call",
                                 "params": {"name": "echo", "arguments": ARGS,
                                            "_meta": MODERN_META}})
            async with http.post(url, data=body, headers=headers) as r:
                data = await r.read()
            if data.startswith(b"{"):
                msg = orjson.loads(data)
            else:
                line = next(x for x in data.split(b"\n") if x.startswith(b"data:"))
                msg = orjson.loads(line[5:])
            assert msg["result"]["content"][0]["text"] == "hello, world"

        yield call


CLIENTS = (("bare", bare_client), ("agentd", agentd_client), ("sdk", sdk_client))
CLIENTS_2026 = (("bare", bare_client_2026), ("agentd", agentd_client),
                ("sdk", lambda url: sdk_client(url, "auto")))


async def measure_all(url: str, calls: int, inflight: int, rounds: int,
                      clients: tuple = CLIENTS) -> dict:
    """All three clients connected at once, measured in interleaved rounds.

    Per client: CPU per call = the best round (least disturbed by other load),
    latency percentiles over every sample, throughput = the best round.
    """
    async with contextlib.AsyncExitStack() as stack:
        calls_of = {name: await stack.enter_async_context(cm(url)) for name, cm in clients}
        for call in calls_of.values():
            for _ in range(50):  # warm-up
                await call()
        cpu = {n: [] for n in calls_of}
        lat: dict[str, list[float]] = {n: [] for n in calls_of}
        tput = {n: [] for n in calls_of}
        tcpu = {n: [] for n in calls_of}
        for _ in range(rounds):
            for name, call in calls_of.items():
                c, samples = await sequential(call, calls)
                cpu[name].append(c / calls)
                lat[name].extend(samples)
                wall, c2 = await concurrent(call, calls, inflight)
                tput[name].append(calls / wall)
                tcpu[name].append(c2 / calls)
    return {name: {
        "p50_ms": round(statistics.median(lat[name]) * 1e3, 3),
        "p99_ms": round(pct(lat[name], 0.99) * 1e3, 3),
        "cpu_ms_per_call": round(min(cpu[name]) * 1e3, 4),
        "cpu_ms_per_call_rounds": [round(x * 1e3, 4) for x in cpu[name]],
        "throughput_per_s": round(max(tput[name]), 1),
        "cpu_ms_per_call_inflight": round(min(tcpu[name]) * 1e3, 4),
    } for name in calls_of}


_RAW_ANSWERS = {
    "initialize": b'{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},'
                  b'"serverInfo":{"name":"raw","version":"1"}}',
    "tools/list": b'{"tools":[{"name":"echo","inputSchema":{"type":"object","properties":'
                  b'{"text":{"type":"string"}},"required":["text"]}}]}',
    "tools/call": b'{"content":[{"type":"text","text":"hello, world"}]}',
}


def serve_raw(port: int) -> None:
    """A fixed-answer MCP endpoint on a bare asyncio protocol (keep-alive, JSON)."""

    class Proto(asyncio.Protocol):
        def connection_made(self, transport):
            self.t, self.buf = transport, b""

        def data_received(self, data):
            self.buf += data
            while (i := self.buf.find(b"\r\n\r\n")) >= 0:
                head = self.buf[:i].lower()
                n = 0
                for line in head.split(b"\r\n"):
                    if line.startswith(b"content-length:"):
                        n = int(line[15:])
                if len(self.buf) < i + 4 + n:
                    return
                body, self.buf = self.buf[i + 4:i + 4 + n], self.buf[i + 4 + n:]
                if not head.startswith(b"post"):
                    self.t.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                    continue
                msg = orjson.loads(body)
                if "id" not in msg:
                    self.t.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
                    continue
                out = (b'{"jsonrpc":"2.0","id":' + orjson.dumps(msg["id"]) + b',"result":'
                       + _RAW_ANSWERS.get(msg["method"], b"{}") + b"}")
                self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Mcp-Session-Id: raw-1\r\nContent-Length: "
                             + str(len(out)).encode() + b"\r\n\r\n" + out)

    async def main():
        server = await asyncio.get_running_loop().create_server(Proto, "127.0.0.1", port)
        await server.serve_forever()

    asyncio.run(main())


async def run_mode(server: str, calls: int, inflight: int, rounds: int) -> dict:
    from peers import PeerProcess, free_port, python_peer

    modern = server.endswith("_2026")
    if server == "raw":
        port = free_port()
        peer = PeerProcess([sys.executable, __file__, "--serve-raw", str(port)], port)
    else:
        args = ["--era", "modern"] if modern else []
        if server.startswith("sdk_json"):
            args.append("--json")
        peer = python_peer("sdk_servers.py", *args)
    with peer:
        out = await measure_all(peer.url, calls, inflight, rounds,
                                CLIENTS_2026 if modern else CLIENTS)
    a, s, b = out["agentd"], out["sdk"], out["bare"]
    out["ratios"] = {
        "cpu_agentd_over_sdk": round(a["cpu_ms_per_call"] / s["cpu_ms_per_call"], 3),
        "cpu_agentd_over_bare": round(a["cpu_ms_per_call"] / b["cpu_ms_per_call"], 3),
        "p50_agentd_over_sdk": round(a["p50_ms"] / s["p50_ms"], 3),
        "throughput_agentd_over_sdk": round(a["throughput_per_s"] / s["throughput_per_s"], 3),
    }
    return out


async def first_results(n: int) -> dict:
    """Nothing -> the first tools/call result, per revision (see the module doc)."""
    from peers import python_peer

    from agentd.config.model import ServerSpec
    from agentd.log import configure
    from agentd.mcp import MCPClient
    from agentd.mcp.client.rules.session import ClientSession, Resolved
    from agentd.mcp.client.transport import StreamableHTTPTransport

    configure(level="warning")
    out: dict = {}
    for era, args in (("2025-11-25", ["--json"]), ("2026-07-28", ["--json", "--era", "modern"])):
        with python_peer("sdk_servers.py", *args) as peer:
            layers: list[float] = []
            whole: list[float] = []
            for i in range(n + 3):  # three warm-ups (the server's first requests)
                got: list = []
                session = ClientSession(client_version="bench")

                def on_message(data, session=session, got=got):
                    got.extend(e for e in session.receive(data) if isinstance(e, Resolved))

                t0 = time.perf_counter()
                t = StreamableHTTPTransport(peer.url, on_message=on_message)
                await t.open()
                loop = asyncio.get_running_loop()
                if era == "2025-11-25":
                    _rid, data = session.start_initialize()
                    fut = loop.create_future()
                    await t.post(data, fut, initialize=True)
                    note = session.finish_initialize(got[-1].result)
                    t.set_protocol_version(session.protocol_version)
                    await t.post(note)
                    _rid, data = session.call_tool(b'"echo"', orjson.dumps(ARGS),
                                                   b'{"io.modelcontextprotocol/run-id":"b"}')
                    await t.post(data, loop.create_future())
                    headers: tuple = ()
                else:
                    session.set_meta({"io.modelcontextprotocol/run-id": "b"})
                    session.stateless, session.state = True, "ready"
                    session.capabilities = type(session.capabilities)(tools=True)
                    t.stateless = True
                    t.set_protocol_version("2026-07-28")
                    headers = session.headers("tools/call", "echo")
                    _rid, data = session.call_tool(b'"echo"', orjson.dumps(ARGS),
                                                   session.meta_json)
                    await t.post(data, loop.create_future(), headers=headers)
                assert b"hello, world" in bytes(got[-1].result)
                elapsed = time.perf_counter() - t0
                await t.close()
                t0 = time.perf_counter()
                async with MCPClient(ServerSpec(name="b", url=peer.url),
                                     ping_interval=None) as c:
                    await c.call_tool("echo", ARGS)
                    assert c.protocol_version == era
                whole_elapsed = time.perf_counter() - t0
                if i >= 3:
                    layers.append(elapsed)
                    whole.append(whole_elapsed)
            out[era] = {"first_result_ms": round(statistics.median(layers) * 1e3, 3),
                        "connect_to_first_result_ms": round(statistics.median(whole) * 1e3, 3)}
    out["ratio_2026_over_2025"] = round(out["2026-07-28"]["first_result_ms"]
                                        / out["2025-11-25"]["first_result_ms"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--servers", default="sdk_json,sdk_sse,raw,sdk_json_2026,sdk_sse_2026")
    ap.add_argument("--first", type=int, default=30, help="fresh starts for first_result")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve-raw", type=int, metavar="PORT", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.serve_raw:
        serve_raw(opts.serve_raw)
        return
    try:
        import uvloop
        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None
    result: dict = {"bench": "mcp_client_tools_call", "calls": opts.calls,
                    "inflight": opts.inflight, "rounds": opts.rounds}
    for server in opts.servers.split(","):
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            result[server] = runner.run(run_mode(server, opts.calls, opts.inflight, opts.rounds))
    if opts.first > 0:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            result["first_result"] = runner.run(first_results(opts.first))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
