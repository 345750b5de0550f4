"""Reactive benchmark: notification latency, publish -> `resources/read` of the new state done.

    python benchmarks/bench_reactive.py [--updates 1000] [--gap-ms 1]
                                        [--revision 2025-11-25,2026-07-28]

One run starts one watched MCP server in a subprocess (below, `--serve`: a small
aiohttp Streamable HTTP server with one subscribable resource, JSON answers,
notifications on the GET stream) and, in turn, on the same server:

* `agentd`   — `agentd.mcp.MCPClient`: subscribe; for each `(server, uri)` on
  its `updates` queue, `read_resource(uri)`;
* `sdk`      — the official SDK client (`mcp.Client(url, mode="legacy")`, no
  response cache): subscribe; its message handler queues each
  `notifications/resources/updated`, a reader task `read_resource`s it;
* `bare`     — the floor: aiohttp + orjson, GET stream parsed by hand;
* `reactive` — agentd's whole reactive path with debounce 0: the real Toolbox,
  `Router`, `ReactiveDaemon` (notify-then-read) up to the moment the loop run
  for the wake is entered with the fresh state (end-to-end wake latency).

Each client runs at both MCP revisions in one run (``--revision``): at
2025-11-25 the server is the session-ful one above (``initialize``,
``resources/subscribe``, updates on the GET stream); at 2026-07-28 it also
answers stateless requests (``--modern``: ``server/discover``,
``subscriptions/listen`` whose response stream carries the acknowledgement and
then the tagged updates, reads without a session), and the clients use it that
way: agentd's client picks the revision by itself, the SDK client runs in
``mode="auto"`` with ``Client.listen()``, the bare client posts the listen
request and parses its stream.

The server publishes update n (`{"seq": n, "t_ns": CLOCK_MONOTONIC}`, then
`updated` to every subscriber), and publishes n+1 `--gap-ms` after a subscriber
has read n: 1,000 sequential updates per client. Latency = the client's clock
when the read of seq n completed minus the server's `t_ns` of n (CLOCK_MONOTONIC
is one clock for every process on the host). "lost" counts updates whose new
state no read ever returned. Prints one JSON line per benchmark. Figures only;
nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import aiohttp  # noqa: E402
import orjson  # noqa: E402

URI = "bench://counter"
now_ns = time.monotonic_ns


# ---------------------------------------------------------------- the server

MODERN = "2026-07-28"
_MODERN_CACHE = {"ttlMs": 0, "cacheScope": "private", "resultType": "complete"}


def serve(port: int, sse: bool = False, modern: bool = False) -> None:
    from aiohttp import web

    state = {"seq": 0, "t_ns": now_ns(), "remaining": 0, "gap": 0.001, "triggered": 0}
    sessions: dict[str, dict] = {}
    listeners: list[dict] = []  # 2026-07-28: open subscriptions/listen streams
    loop_ref: list[asyncio.AbstractEventLoop] = []

    def rpc(rid, result) -> web.Response:
        body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result})
        if sse:  # the answer as one SSE event on the POST's own stream (the SDK default)
            return web.Response(body=b"event: message\ndata: " + body + b"\n\n",
                                headers={"Content-Type": "text/event-stream",
                                         "Cache-Control": "no-cache"})
        return web.Response(body=body, content_type="application/json")

    async def publish() -> None:
        state["seq"] += 1
        state["t_ns"] = now_ns()
        frame = (b"event: message\ndata: " + orjson.dumps(
            {"jsonrpc": "2.0", "method": "notifications/resources/updated",
             "params": {"uri": URI}}) + b"\n\n")
        for s in list(sessions.values()):
            if URI in s["subs"] and s["stream"] is not None:
                with contextlib.suppress(Exception):
                    await s["stream"].write(frame)
        for lst in list(listeners):
            if URI in lst["subs"]:
                with contextlib.suppress(Exception):
                    await lst["stream"].write(b"event: message\ndata: " + orjson.dumps(
                        {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                         "params": {"uri": URI, "_meta": lst["tag"]}}) + b"\n\n")

    def publish_soon() -> None:
        loop_ref[0].call_later(state["gap"], lambda: loop_ref[0].create_task(publish()))

    async def listen(request: web.Request, rid, params: dict) -> web.StreamResponse:
        subs = set(params["notifications"].get("resourceSubscriptions") or ())
        tag = {"io.modelcontextprotocol/subscriptionId": rid}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(b"event: message\ndata: " + orjson.dumps({
            "jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"notifications": {"resourceSubscriptions": sorted(subs)},
                       "_meta": tag}}) + b"\n\n")
        me = {"subs": subs, "stream": resp, "tag": tag}
        listeners.append(me)
        closed = asyncio.Event()  # set by nobody: the stream lives until the client goes
        try:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await closed.wait()
        finally:
            listeners.remove(me)
        return resp

    async def post_modern(request: web.Request, msg: dict) -> web.StreamResponse:
        method, rid = msg.get("method"), msg.get("id")
        params = msg.get("params") or {}
        if method == "server/discover":
            return rpc(rid, {"supportedVersions": [MODERN],
                             "capabilities": {"resources": {"subscribe": True}},
                             **_MODERN_CACHE})
        if method == "subscriptions/listen":
            return await listen(request, rid, params)
        if method == "resources/read":
            seq, t = state["seq"], state["t_ns"]
            resp = rpc(rid, {"contents": [{"uri": URI, "mimeType": "application/json",
                                           "text": f'{{"seq":{seq},"t_ns":{t}}}'}],
                             **_MODERN_CACHE})
            if state["remaining"] > 0 and listeners and state["triggered"] < seq:
                state["triggered"] = seq
                state["remaining"] -= 1
                publish_soon()
            return resp
        if method == "resources/list":
            return rpc(rid, {"resources": [{"uri": URI, "name": "counter"}], **_MODERN_CACHE})
        if method == "resources/templates/list":
            return rpc(rid, {"resourceTemplates": [], **_MODERN_CACHE})
        return web.Response(status=404, body=orjson.dumps({"jsonrpc": "2.0", "id": rid,
                            "error": {"code": -32601, "message": f"method not found: {method}"}}),
                            content_type="application/json")

    async def post(request: web.Request) -> web.StreamResponse:
        msg = orjson.loads(await request.read())
        if modern and request.headers.get("MCP-Protocol-Version") == MODERN:
            return await post_modern(request, msg)
        method, rid = msg.get("method"), msg.get("id")
        sid = request.headers.get("Mcp-Session-Id")
        if method == "initialize":
            sid = uuid.uuid4().hex
            sessions[sid] = {"subs": set(), "stream": None}
            resp = rpc(rid, {"protocolVersion": msg["params"].get("protocolVersion",
                                                                  "2025-11-25"),
                             "capabilities": {"resources": {"subscribe": True}},
                             "serverInfo": {"name": "bench-watched", "version": "1"}})
            resp.headers["Mcp-Session-Id"] = sid
            return resp
        s = sessions.get(sid or "")
        if s is None:
            return web.Response(status=404)
        if rid is None:
            return web.Response(status=202)
        params = msg.get("params") or {}
        if method == "resources/read":
            seq, t = state["seq"], state["t_ns"]
            resp = rpc(rid, {"contents": [{"uri": URI, "mimeType": "application/json",
                                           "text": f'{{"seq":{seq},"t_ns":{t}}}'}]})
            if state["remaining"] > 0 and URI in s["subs"] and state["triggered"] < seq:
                state["triggered"] = seq
                state["remaining"] -= 1
                publish_soon()
            return resp
        if method == "resources/subscribe":
            s["subs"].add(params["uri"])
            return rpc(rid, {})
        if method == "resources/unsubscribe":
            s["subs"].discard(params["uri"])
            return rpc(rid, {})
        if method == "resources/list":
            return rpc(rid, {"resources": [{"uri": URI, "name": "counter"}]})
        if method == "resources/templates/list":
            return rpc(rid, {"resourceTemplates": []})
        if method == "ping":
            return rpc(rid, {})
        return web.Response(body=orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": {
            "code": -32601, "message": f"method not found: {method}"}}),
            content_type="application/json")

    async def get(request: web.Request) -> web.StreamResponse:
        s = sessions.get(request.headers.get("Mcp-Session-Id") or "")
        if s is None:
            return web.Response(status=404)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        s["stream"] = resp
        closed = asyncio.Event()  # set by nobody: the stream lives until the client goes
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await closed.wait()
        return resp

    async def delete(request: web.Request) -> web.Response:
        sessions.pop(request.headers.get("Mcp-Session-Id") or "", None)
        return web.Response(status=200)

    async def start(request: web.Request) -> web.Response:
        # a subscriber whose GET stream is not open yet would miss update 1
        for _ in range(500):
            if all(s["stream"] is not None for s in sessions.values() if s["subs"]) and (
                    not modern or listeners or any(s["subs"] for s in sessions.values())):
                break
            await asyncio.sleep(0.01)
        state["remaining"] = int(request.query["n"]) - 1
        state["gap"] = float(request.query.get("gap_ms", "1")) / 1000
        state["triggered"] = state["seq"]
        await publish()
        return web.json_response({"first": state["seq"]})

    async def on_startup(app: web.Application) -> None:
        loop_ref.append(asyncio.get_running_loop())

    app = web.Application()
    app.router.add_post("/mcp", post)
    app.router.add_get("/mcp", get)
    app.router.add_delete("/mcp", delete)
    app.router.add_post("/start", start)
    app.on_startup.append(on_startup)
    try:
        import uvloop
        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# ---------------------------------------------------------------- measuring

def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


class Tally:
    def __init__(self, n: int, first: int = 0) -> None:
        self.n = n
        self.first = first
        self.lat: dict[int, float] = {}
        self.done = asyncio.Event()
        self.reads = 0
        self.wakes = 0

    def record(self, text: str) -> None:
        t = now_ns()
        self.reads += 1
        body = orjson.loads(text)
        seq = body["seq"]
        if seq >= self.first and seq not in self.lat:
            self.lat[seq] = (t - body["t_ns"]) / 1e6
        self.check()

    def start(self, first: int) -> None:
        """The chain's first seq, known once /start answers (a read may come first)."""
        self.first = first
        self.lat = {k: v for k, v in self.lat.items() if k >= first}
        self.check()

    def check(self) -> None:
        if self.first and len(self.lat) >= self.n:
            self.done.set()



def figures(tallies: list[Tally]) -> dict:
    lat = [v for t in tallies for v in t.lat.values()]
    n = sum(t.n for t in tallies)
    out = {"updates": n, "p50_ms": round(statistics.median(lat), 3) if lat else None,
           "p99_ms": round(pct(lat, 0.99), 3) if lat else None,
           "mean_ms": round(statistics.fmean(lat), 3) if lat else None,
           "reads": sum(t.reads for t in tallies), "lost": n - len(lat)}
    if any(t.wakes for t in tallies):
        out["wakes"] = sum(t.wakes for t in tallies)
    return out


async def start_chain(base: str, n: int, gap_ms: float) -> int:
    async with aiohttp.ClientSession() as http, \
            http.post(f"{base}/start?n={n}&gap_ms={gap_ms}") as r:
        return (await r.json())["first"]


async def wait_done(tally: Tally, limit: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(limit):
            await tally.done.wait()


async def bench_agentd(base: str, n: int, gap_ms: float, modern: bool = False) -> dict:
    from agentd.config.model import ServerSpec
    from agentd.mcp import MCPClient

    async with MCPClient(ServerSpec(name="bench", url=f"{base}/mcp"), run_id="bench",
                         ping_interval=None) as c:
        assert await c.subscribe(URI)
        first = await start_chain(base, n, gap_ms)
        tally = Tally(n, first)

        async def reader() -> None:
            while True:
                _server, uri = await c.updates.get()
                obs = await c.read_resource(uri)
                tally.record(obs.text)

        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(reader())
            await wait_done(tally, 10 + n * 0.05)
            task.cancel()
        return tally


async def bench_sdk(base: str, n: int, gap_ms: float, modern: bool = False) -> dict:
    import mcp_types as types
    from mcp import Client

    if modern:
        return await bench_sdk_listen(base, n, gap_ms)
    queue: asyncio.Queue = asyncio.Queue()

    async def on_message(message) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, types.ResourceUpdatedNotification):
            queue.put_nowait(root.params.uri)

    async with Client(f"{base}/mcp", mode="legacy", message_handler=on_message,
                      cache=None) as c:
        await c.subscribe_resource(URI)
        first = await start_chain(base, n, gap_ms)
        tally = Tally(n, first)

        async def reader() -> None:
            while True:
                uri = await queue.get()
                r = await c.read_resource(uri)
                tally.record(r.contents[0].text)

        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(reader())
            await wait_done(tally, 10 + n * 0.05)
            task.cancel()
        return tally


async def bench_sdk_listen(base: str, n: int, gap_ms: float) -> Tally:
    """The SDK client at 2026-07-28: ``Client.listen()``, then ``read_resource``."""
    from mcp import Client

    async with Client(f"{base}/mcp", mode="auto", cache=None) as c, \
            c.listen(resource_subscriptions=[URI]) as sub:
        first = await start_chain(base, n, gap_ms)
        tally = Tally(n, first)

        async def reader() -> None:
            async for ev in sub:
                r = await c.read_resource(ev.uri)
                tally.record(r.contents[0].text)

        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(reader())
            await wait_done(tally, 10 + n * 0.05)
            task.cancel()
        return tally


async def bench_bare_listen(base: str, n: int, gap_ms: float) -> Tally:
    """The floor at 2026-07-28: the listen POST's stream parsed by hand, stateless reads."""
    url = f"{base}/mcp"
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {}}
    hdr = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
           "MCP-Protocol-Version": MODERN}
    read_hdr = {**hdr, "Mcp-Method": "resources/read", "Mcp-Name": URI}
    async with aiohttp.ClientSession() as http:
        ids = iter(range(1, 1 << 60))
        body = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "subscriptions/listen",
                             "params": {"notifications": {"resourceSubscriptions": [URI]},
                                        "_meta": meta}})
        stream = await http.post(url, data=body,
                                 headers={**hdr, "Mcp-Method": "subscriptions/listen"})
        async for line in stream.content:  # the acknowledgement comes first
            if line.startswith(b"data:"):
                break
        first = await start_chain(base, n, gap_ms)
        tally = Tally(n, first)

        async def reader() -> None:
            async for line in stream.content:
                if line.startswith(b"data:"):
                    uri = orjson.loads(line[5:])["params"]["uri"]
                    req = orjson.dumps({"jsonrpc": "2.0", "id": next(ids),
                                        "method": "resources/read",
                                        "params": {"uri": uri, "_meta": meta}})
                    async with http.post(url, data=req, headers=read_hdr) as r:
                        data = await r.read()
                    if not data.startswith(b"{"):  # SSE: the data line of the one event
                        data = next(x for x in data.split(b"\n") if x.startswith(b"data:"))[5:]
                    tally.record(orjson.loads(data)["result"]["contents"][0]["text"])

        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(reader())
            await wait_done(tally, 10 + n * 0.05)
            task.cancel()
        stream.close()
        return tally


async def bench_bare(base: str, n: int, gap_ms: float, modern: bool = False) -> dict:
    if modern:
        return await bench_bare_listen(base, n, gap_ms)
    url = f"{base}/mcp"
    hdr = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bare", "version": "0"}}}
        async with http.post(url, data=orjson.dumps(init), headers=hdr) as r:
            sid = r.headers["Mcp-Session-Id"]
            await r.read()
        hdr = {**hdr, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        ids = iter(range(1, 1 << 60))

        async def call(method: str, params: dict) -> dict:
            body = orjson.dumps({"jsonrpc": "2.0", "id": next(ids), "method": method,
                                 "params": params})
            async with http.post(url, data=body, headers=hdr) as r:
                data = await r.read()
            if not data.startswith(b"{"):  # SSE: the data line of the one event
                data = next(x for x in data.split(b"\n") if x.startswith(b"data:"))[5:]
            return orjson.loads(data)

        await call("resources/subscribe", {"uri": URI})
        stream = await http.get(url, headers=hdr)
        first = await start_chain(base, n, gap_ms)
        tally = Tally(n, first)

        async def reader() -> None:
            async for line in stream.content:
                if line.startswith(b"data:"):
                    uri = orjson.loads(line[5:])["params"]["uri"]
                    msg = await call("resources/read", {"uri": uri})
                    tally.record(msg["result"]["contents"][0]["text"])

        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(reader())
            await wait_done(tally, 10 + n * 0.05)
            task.cancel()
        stream.close()
        return tally


async def bench_reactive_wake(base: str, n: int, gap_ms: float, modern: bool = False) -> dict:
    """publish -> the loop run entered with the fresh state (Router + daemon, debounce 0)."""
    from agentd.config.model import ServerSpec
    from agentd.mcp.client.toolbox import Toolbox
    from agentd.reactive.daemon import ReactiveDaemon, WakeRun

    holder: dict = {}
    wakes = [0]

    async def run_wake(wake, reads) -> WakeRun:
        wakes[0] += 1
        for r in reads:
            holder["tally"].record(r.text)
        return WakeRun(status="completed")

    stop = asyncio.Event()
    async with Toolbox([ServerSpec(name="bench", url=f"{base}/mcp")], run_id="bench",
                       ping_interval=None) as tb:
        daemon = ReactiveDaemon(tb, run_wake, debounce=0.0)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(daemon.serve(stop, [URI]))
            await daemon.ready.wait()
            holder["tally"] = tally = Tally(n)
            tally.start(await start_chain(base, n, gap_ms))
            await wait_done(tally, 10 + n * 0.05)
            stop.set()
    tally.wakes = wakes[0]
    return tally


async def run_server_mode(answer: str, n: int, gap_ms: float, chosen: list[str],
                          rounds: int, modern: bool = False) -> dict[str, dict]:
    from peers import free_port, wait_port

    port = free_port()
    argv = [sys.executable, __file__, "--serve", str(port)] + (["--sse"] if answer == "sse"
                                                               else [])
    if modern:
        argv.append("--modern")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,  # noqa: ASYNC220
                            stderr=subprocess.DEVNULL)
    try:
        await asyncio.to_thread(wait_port, "127.0.0.1", port, proc=proc)
        base = f"http://127.0.0.1:{port}"
        benches = {"agentd": bench_agentd, "sdk": bench_sdk, "bare": bench_bare,
                   "reactive": bench_reactive_wake}
        for name in chosen:
            await benches[name](base, 50, gap_ms, modern)  # warm-up
        # Interleaved rounds, so a busy host's drift hits every client alike.
        per = max(1, n // rounds)
        tallies: dict[str, list[Tally]] = {name: [] for name in chosen}
        for _ in range(rounds):
            for name in chosen:
                tallies[name].append(await benches[name](base, per, gap_ms, modern))
        return {name: figures(ts) for name, ts in tallies.items()}
    finally:
        proc.kill()  # it keeps SSE streams open: no graceful wait
        proc.wait(timeout=10)


async def main_async(n: int, gap_ms: float, which: list[str], rounds: int,
                     answers: list[str], revisions: tuple[str, ...] = ("2025-11-25",)
                     ) -> list[dict]:
    from agentd.log import configure

    configure(level="warning")
    chosen = [w for w in which if w in ("agentd", "sdk", "bare", "reactive")]
    by_answer = {}
    for rev in revisions:
        for a in answers:
            key = a if rev == "2025-11-25" else f"{a}_{rev}"
            by_answer[key] = await run_server_mode(a, n, gap_ms, chosen, rounds,
                                                   modern=rev == MODERN)
    lines = []
    clients = {a: {k: v for k, v in r.items() if k != "reactive"} for a, r in by_answer.items()}
    if any(clients.values()):
        line: dict = {"bench": "reactive_notify_then_read", "unit": "ms publish->read done",
                      "server": "aiohttp Streamable HTTP watched server (subprocess); "
                                "answer_sse: POST answered as SSE, answer_json: as JSON",
                      "updates_per_client": n, "rounds": rounds, "cpus": os.cpu_count(),
                      "loadavg_1m": round(os.getloadavg()[0], 2)}
        for a, res in clients.items():
            if "agentd" in res and "sdk" in res and res["agentd"]["p50_ms"]:
                res["p50_sdk_over_agentd"] = round(res["sdk"]["p50_ms"]
                                                   / res["agentd"]["p50_ms"], 2)
                res["p99_sdk_over_agentd"] = round(res["sdk"]["p99_ms"]
                                                   / res["agentd"]["p99_ms"], 2)
            line[f"answer_{a}"] = res
        lines.append(line)
    wake = {a: r["reactive"] for a, r in by_answer.items() if "reactive" in r}
    if wake:
        lines.append({"bench": "reactive_wake_e2e", "debounce": 0,
                      "unit": "ms publish->loop run entered with fresh state",
                      "rounds": rounds, **{f"answer_{a}": w for a, w in wake.items()}})
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--updates", type=int, default=1000)
    ap.add_argument("--gap-ms", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per client")
    ap.add_argument("--only", default="agentd,sdk,bare,reactive")
    ap.add_argument("--answer", choices=("sse", "json", "both"), default="both")
    ap.add_argument("--revision", default=f"2025-11-25,{MODERN}")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--sse", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--modern", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.serve:
        serve(opts.serve, opts.sse, opts.modern)
        return
    try:
        import uvloop
        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        lines = runner.run(main_async(opts.updates, opts.gap_ms, opts.only.split(","),
                                      opts.rounds, ["sse", "json"] if opts.answer == "both"
                                      else [opts.answer],
                                      tuple(opts.revision.split(","))))
    for line in lines:
        print(json.dumps(line))


if __name__ == "__main__":
    main()
