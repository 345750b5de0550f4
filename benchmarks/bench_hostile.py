"""Hostile load on a real `agentd --serve-mcp`: RSS, fds and a canary's p99 per attack;
and hostile *servers* against agentd as a client.

    python benchmarks/bench_hostile.py [--calls 100000] [--headers 2000] [--idle 15000]
                                       [--sessions 1024] [--slow 200] [--malformed 1000]
                                       [--only served|client] [--event-bytes N]
                                       [--retry-max-ms MS]

The client rows (issue 28) run the real `agentd` against the hostile MCP server
of `tests/support/hostile_sse_server.py`:

    {"bench": "hostile.client_sse_flood", "event_bytes", "rss_kib": {"before",
     "peak"}, "growth_mib", "target_mib", "flood_sent_mib", "fault"}
    {"bench": "hostile.client_absurd_retry", "retry", "clamp_ms", "cut_to_get_ms"}

`client_sse_flood`: a `tools/call` answered by one endless SSE event; agentd's
VmRSS when it listed the tools and its VmHWM when it dropped the stream
(target: growth <= event_bytes + 32 MiB; `--event-bytes` defaults to the
documented default).  `client_absurd_retry`: a stream cut after `retry:
100000000000000000000`; the time from the cut to the resumption GET (target:
<= the clamp, `--retry-max-ms`, shorter than the documented 60 s default so the
row stays short).

One agentd (playback intelligence that never answers, so it just serves) listens
on loopback; a second one with mTLS serves the session-lockout row, where two
certificates are two principals.  While each attack runs, a canary process
makes one authenticated ``tools/call status`` every 100 ms on its own
keep-alive connection.  For every attack one JSON line:

    {"bench": "hostile.<attack>", "rss_mib": {"before", "peak", "after"},
     "fds": {"before", "peak", "after", "limit"}, "canary": {"calls", "failed",
     "p50_ms", "p99_ms"}, ...attack figures}

``after`` is read once the attack's connections are gone and the server's
documented timeouts have passed (``AGENTD_SERVE_LIMITS`` shortens the body
and stream timeouts here so the run stays short; they are printed).  The last
line is the soak: ``--calls`` sequential authenticated calls over one
connection, RSS/fds before and after, and the bytes of log written at the
default level and with ``--log-level warning``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench-hostile", "version": "1"}}}
CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "status", "arguments": {}}}
HDRS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
LIMITS = {"body_timeout": 5.0, "stream_max_age": 5.0, "idle_timeout": 10.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def fd_limit(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return -1


class Server:
    """A real agentd serving its self-MCP; stderr goes to a file (its log size is a figure)."""

    def __init__(self, tmp: Path, name: str, *extra: str, scheme: str = "http",
                 level: str | None = None) -> None:
        script = tmp / "slow.json"
        script.write_text(json.dumps({"turns": [{"delay": 3600, "content": "never"}]}))
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}/mcp"
        self.log_path = tmp / f"{name}.log"
        env = dict(os.environ, AGENTD_SERVE_LIMITS=json.dumps(LIMITS))
        argv = ["agentd", "--instruction", "serve", "--intelligence", f"playback:{script}",
                "--serve-mcp", f"{scheme}://127.0.0.1:{self.port}", *extra]
        if level:
            argv += ["--log-level", level]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.log, env=env)
        deadline = time.monotonic() + 60
        while not self._listening():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"agentd did not start:\n{self.log_path.read_text()}")
            time.sleep(0.05)

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def sample(self) -> dict:
        return {"rss": rss_mib(self.proc.pid), "fds": fds(self.proc.pid)}

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def error_lines(self) -> int:
        n = 0
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                if json.loads(line).get("level") == "error":
                    n += 1
            except ValueError:
                n += 1  # a non-JSON line counts as an error: every line must be JSON
        return n


# ------------------------------------------------------------------ canary
def canary_main(url: str, cafile: str | None, cert: str | None, key: str | None) -> None:
    """Child process: one call every 100 ms until stdin closes; prints latencies (ms)."""
    import aiohttp
    import orjson

    async def run() -> None:
        ssl_ctx = None
        if cafile:
            import ssl

            ssl_ctx = ssl.create_default_context(cafile=cafile)
            ssl_ctx.load_cert_chain(cert, key)
        lat: list[float] = []
        failed = 0
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_reader(0, stop.set)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_ctx)) as http:
            async with http.post(url, data=orjson.dumps(INIT), headers=HDRS) as r:
                sid = r.headers["Mcp-Session-Id"]
            h = dict(HDRS, **{"Mcp-Session-Id": sid})
            body = orjson.dumps(CALL)
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    async with asyncio.timeout(10):
                        async with http.post(url, data=body, headers=h) as r:
                            ok = r.status == 200 and b'"result"' in await r.read()
                except Exception:
                    ok = False
                dt = (time.perf_counter() - t0) * 1000
                if ok:
                    lat.append(dt)
                else:
                    failed += 1
                try:
                    async with asyncio.timeout(max(0.0, 0.1 - dt / 1000)):
                        await stop.wait()
                except TimeoutError:
                    pass
        sys.stdout.write(json.dumps({"lat": lat, "failed": failed}))

    asyncio.run(run())


class Canary:
    def __init__(self, url: str, tls: tuple[str, str, str] | None = None) -> None:
        args = [sys.executable, __file__, "--canary", url]
        if tls:
            args += ["--tls", *tls]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def finish(self) -> dict:
        out, _ = self.proc.communicate(b"x", timeout=60)
        data = json.loads(out or b'{"lat": [], "failed": -1}')
        lat = sorted(data["lat"])

        def p(q: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(q * len(lat)))], 2) if lat else None

        return {"calls": len(lat), "failed": data["failed"], "p50_ms": p(0.5),
                "p99_ms": p(0.99)}


# ----------------------------------------------------------------- attacks
async def watch(server: Server, stop: asyncio.Event, peak: dict) -> None:
    while not stop.is_set():
        s = server.sample()
        peak["rss"] = max(peak["rss"], s["rss"])
        peak["fds"] = max(peak["fds"], s["fds"])
        try:
            async with asyncio.timeout(0.1):
                await stop.wait()
        except TimeoutError:
            pass


async def measure(name: str, server: Server, attack, settle: float = 0.0,
                  canary_tls: tuple[str, str, str] | None = None, **extra) -> dict:
    before = server.sample()
    canary = Canary(server.url, canary_tls)
    await asyncio.sleep(0.5)
    peak = dict(before)
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch(server, stop, peak))
    figures = await attack()
    if settle:
        await asyncio.sleep(settle)
    stop.set()
    await watcher
    after = server.sample()
    line = {"bench": f"hostile.{name}",
            "rss_mib": {"before": before["rss"], "peak": peak["rss"], "after": after["rss"],
                        "growth": round(after["rss"] - before["rss"], 1)},
            "fds": {"before": before["fds"], "peak": peak["fds"], "after": after["fds"],
                    "limit": fd_limit(server.proc.pid)},
            "canary": canary.finish(), **figures, **extra}
    print(json.dumps(line), flush=True)
    return line


async def raw(port: int, data: bytes, read: bool = True) -> bytes:
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return b"!connect"
    try:
        w.write(data)
        await w.drain()
        return await r.read(200) if read else b""
    except (ConnectionError, OSError):
        return b""
    finally:
        w.close()


async def attack_headers(server: Server, n: int) -> dict:
    big = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
    sem = asyncio.Semaphore(100)

    async def one() -> bytes:
        async with sem:
            return await raw(server.port, big)

    answers = await asyncio.gather(*(one() for _ in range(n)))
    return {"requests": n, "concurrency": 100, "header_bytes": 1 << 20,
            "answered_431": sum(a.startswith(b"HTTP/1.1 431") for a in answers),
            "reset": sum(a == b"" for a in answers)}


async def attack_idle(server: Server, n: int) -> dict:
    socks = []
    refused = 0
    for i in range(n):
        try:
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
        except OSError:
            refused += 1
            continue
        if i % 3 == 0:
            w.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half-sent
        socks.append((r, w))
    t0 = time.monotonic()
    closed = 0
    deadline = t0 + 60

    async def gone(r) -> bool:
        try:
            async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                await r.read()
            return True
        except TimeoutError:
            return False
        except ConnectionError:
            return True

    results = await asyncio.gather(*(gone(r) for r, _ in socks))
    closed = sum(results)
    for _, w in socks:
        w.close()
    return {"connections": n, "refused_at_connect": refused, "closed_by_server": closed,
            "all_closed_within_s": round(time.monotonic() - t0, 1)}


async def attack_slow(server: Server, n: int) -> dict:
    import aiohttp
    import orjson

    async with aiohttp.ClientSession() as http:
        async with http.post(server.url, data=orjson.dumps(INIT), headers=HDRS) as r:
            sid = r.headers["Mcp-Session-Id"]
    conns = []
    for i in range(n):
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        if i % 2:
            w.write((f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                     f"\r\nMcp-Session-Id: {sid}\r\nContent-Length: 100000\r\n\r\n{{").encode())
        else:  # an SSE stream that is never read
            w.write((f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                     f"Mcp-Session-Id: {sid}\r\n\r\n").encode())
        conns.append((r, w))
    t0 = time.monotonic()
    results = await asyncio.gather(*(_eof(r, 60) for r, _ in conns))
    for _, w in conns:
        w.close()
    return {"slow_bodies": n // 2, "unread_streams": n - n // 2, "closed_by_server": sum(results),
            "all_closed_within_s": round(time.monotonic() - t0, 1)}


async def _eof(r, limit: float) -> bool:
    try:
        async with asyncio.timeout(limit):
            while await r.read(65536):
                pass  # a stream's keepalives are drained only to see its end
        return True
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def attack_malformed(server: Server, n: int) -> dict:
    import aiohttp
    import orjson

    statuses: dict[str, int] = {}
    async with aiohttp.ClientSession() as http:
        async with http.post(server.url, data=orjson.dumps(INIT), headers=HDRS) as r:
            sid = r.headers["Mcp-Session-Id"]
        h = dict(HDRS, **{"Mcp-Session-Id": sid})
        cases = [
            (b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":' + b"[" * 983 +
             b"]" * 983 + b"}", h),
            (b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"status",'
             b'"arguments":{"x":"\xff"}}}', h),
            (orjson.dumps(INIT), dict(h, **{"Content-Type": "APPLICATION/JSON"})),
            (orjson.dumps(INIT), dict(h, **{"Content-Type": "application/jsonp"})),
        ]
        for i in range(n):
            body, headers = cases[i % len(cases)]
            async with http.post(server.url, data=body, headers=headers) as r:
                await r.read()
                statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
    for junk in (b"GARBAGE\r\n\r\n", b"\x16\x03\x01\x00\xa5" * 10):
        for _ in range(n // 10):
            await raw(server.port, junk)
    return {"requests": n, "statuses": statuses}


async def attack_sessions(server: Server, n: int, attacker_tls) -> dict:
    import ssl

    import aiohttp
    import orjson

    ctx = ssl.create_default_context(cafile=attacker_tls[0])
    ctx.load_cert_chain(attacker_tls[1], attacker_tls[2])
    codes: dict[str, int] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=16)) as http:
        async def one() -> None:
            async with http.post(server.url, data=orjson.dumps(INIT), headers=HDRS) as r:
                await r.read()
                codes[str(r.status)] = codes.get(str(r.status), 0) + 1

        await asyncio.gather(*(one() for _ in range(n + 16)))
    return {"sessions_tried": n + 16, "statuses": codes}


async def soak(server: Server, calls: int) -> dict:
    import aiohttp
    import orjson

    before = server.sample()
    size0 = server.log_path.stat().st_size
    lat = []
    async with aiohttp.ClientSession() as http:
        async with http.post(server.url, data=orjson.dumps(INIT), headers=HDRS) as r:
            sid = r.headers["Mcp-Session-Id"]
        h = dict(HDRS, **{"Mcp-Session-Id": sid})
        body = orjson.dumps(CALL)
        t0 = time.perf_counter()
        for _ in range(calls):
            t1 = time.perf_counter()
            async with http.post(server.url, data=body, headers=h) as r:
                await r.read()
            lat.append(time.perf_counter() - t1)
        wall = time.perf_counter() - t0
    after = server.sample()
    lat.sort()
    return {"calls": calls, "rss_mib": {"before": before["rss"], "after": after["rss"]},
            "fds": {"before": before["fds"], "after": after["fds"]},
            "calls_per_s": round(calls / wall), "p50_ms": round(lat[len(lat) // 2] * 1000, 3),
            "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3),
            "log_bytes": server.log_path.stat().st_size - size0}


def _client_peers():
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from gateway import Gateway, Reply
    from hostile_sse_server import HostileMCP

    return Gateway, Reply, HostileMCP


async def _agentd(*args: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_INTELLIGENCE")}
    env["PYTHONPATH"] = str(ROOT)
    env.setdefault("AGENTD_MODEL", "bench-model")  # an http gateway needs a model (docs/cli.md)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentd", *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)


async def client_rows(event_bytes: int, retry_max_ms: int) -> None:
    """agentd as the client of hostile MCP servers: the flood and the absurd retry."""
    Gateway, Reply, HostileMCP = _client_peers()
    script = [Reply.tools(("hostile__flood", {})), Reply.text("done")]
    async with HostileMCP() as mcp, Gateway(script) as gw:
        proc = await _agentd("--instruction", "flood", "--intelligence", gw.url,
                             "--mcp", f"hostile={mcp.url}", "--sse-event-bytes", str(event_bytes))
        mcp.pid = proc.pid
        await asyncio.wait_for(mcp.dropped.wait(), 300)
        _out, err = await proc.communicate()
    fault = next((json.loads(line).get("fault") for line in err.decode().splitlines()
                  if '"mcp.fault"' in line), None)
    growth = (mcp.peak_kib - mcp.baseline_kib) / 1024
    print(json.dumps({"bench": "hostile.client_sse_flood", "event_bytes": event_bytes,
                      "rss_kib": {"before": mcp.baseline_kib, "peak": mcp.peak_kib},
                      "growth_mib": round(growth, 1),
                      "target_mib": round(event_bytes / 2**20 + 32, 1),
                      "flood_sent_mib": round(mcp.flood_sent / 2**20, 1), "rc": proc.returncode,
                      "fault": fault}), flush=True)
    for retry in (b"100000000000000000000", b"9" * 400):
        script = [Reply.tools(("hostile__cut", {})), Reply.text("done")]
        async with HostileMCP(retry=retry) as mcp, Gateway(script) as gw:
            proc = await _agentd("--instruction", "cut", "--intelligence", gw.url,
                                 "--mcp", f"hostile={mcp.url}",
                                 "--sse-retry-max-ms", str(retry_max_ms))
            await asyncio.wait_for(mcp.resumed.wait(), 300)
            await proc.communicate()
        print(json.dumps({"bench": "hostile.client_absurd_retry",
                          "retry": retry.decode() if len(retry) < 30 else f"{len(retry)} digits",
                          "clamp_ms": retry_max_ms,
                          "cut_to_get_ms": round((mcp.resumed_at - mcp.cut_at) * 1000, 1),
                          "rc": proc.returncode}), flush=True)


async def main(args: argparse.Namespace) -> None:
    if args.only != "served":
        await client_rows(args.event_bytes, args.retry_max_ms)
    if args.only == "client":
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    print(json.dumps({"bench": "hostile.config", "limits_env": LIMITS}), flush=True)
    server = Server(tmp, "plain")
    errors_before = 0
    try:
        await measure("headers_1mib", server, lambda: attack_headers(server, args.headers),
                      settle=2.0)
        await measure("idle_connections", server, lambda: attack_idle(server, args.idle),
                      settle=1.0)
        await measure("slow_body_unread_sse", server, lambda: attack_slow(server, args.slow),
                      settle=1.0)
        await measure("malformed", server, lambda: attack_malformed(server, args.malformed))
        errors_before = server.error_lines()
    finally:
        server.stop()
    print(json.dumps({"bench": "hostile.error_lines", "error_level_lines": errors_before}),
          flush=True)

    try:
        import trustme
    except ImportError:
        print(json.dumps({"bench": "hostile.sessions", "skipped": "trustme not installed"}))
    else:
        ca = trustme.CA()
        srv = ca.issue_cert("127.0.0.1")
        paths = {}
        ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
        srv.cert_chain_pems[0].write_to_path(str(tmp / "srv.pem"))
        srv.private_key_pem.write_to_path(str(tmp / "srv.key"))
        for who in ("attacker", "canary"):
            c = ca.issue_cert(f"{who}.bench", common_name=who)
            c.cert_chain_pems[0].write_to_path(str(tmp / f"{who}.pem"))
            c.private_key_pem.write_to_path(str(tmp / f"{who}.key"))
            paths[who] = (str(tmp / "ca.pem"), str(tmp / f"{who}.pem"), str(tmp / f"{who}.key"))
        tls = Server(tmp, "mtls", "--serve-cert", str(tmp / "srv.pem"), "--serve-key",
                     str(tmp / "srv.key"), "--serve-client-ca", str(tmp / "ca.pem"),
                     scheme="https")
        try:
            await measure("sessions_one_principal", tls,
                          lambda: attack_sessions(tls, args.sessions, paths["attacker"]),
                          canary_tls=paths["canary"])
        finally:
            tls.stop()

    for level in (None, "warning") if args.calls > 0 else ():
        s = Server(tmp, f"soak-{level or 'info'}", level=level)
        try:
            figures = await soak(s, args.calls)
        finally:
            s.stop()
        print(json.dumps({"bench": "hostile.soak", "log_level": level or "info", **figures}),
              flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--canary":
        tls = sys.argv[4:7] if len(sys.argv) > 3 and sys.argv[3] == "--tls" else [None] * 3
        canary_main(sys.argv[2], *tls)
        sys.exit(0)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=100_000, help="soak: sequential calls")
    ap.add_argument("--headers", type=int, default=2000, help="1 MiB-header requests")
    ap.add_argument("--idle", type=int, default=15000,
                    help="idle/half-sent connections (keep below this process's fd limit)")
    ap.add_argument("--sessions", type=int, default=1024, help="sessions one principal opens")
    ap.add_argument("--slow", type=int, default=200, help="slow bodies + unread SSE streams")
    ap.add_argument("--malformed", type=int, default=1000, help="malformed requests")
    ap.add_argument("--only", choices=("served", "client"), help="one half of the rows")
    ap.add_argument("--event-bytes", type=int, default=64 * 1024 * 1024,
                    help="client flood: --sse-event-bytes (the documented default)")
    ap.add_argument("--retry-max-ms", type=int, default=2000,
                    help="client absurd retry: --sse-retry-max-ms")
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main(ap.parse_args()))
