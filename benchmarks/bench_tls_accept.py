"""What the https listener's own accept loop costs: TLS connections per second.

    python benchmarks/bench_tls_accept.py [--connections 2000] [--concurrency 32]

The served engine (``agentd.mcp.server.http.server.serve``) on loopback with a
``trustme`` certificate, on uvloop as agentd runs; each client connection
makes the TLS handshake, sends one request (``GET /none``, a 404: the
request path without a handler) and closes.  Then the same number of
connections that the handshake refuses (a client certificate is required and
none is offered), which the listener logs as ``mcp.serve.tls_refused``.  Run it
with ``PYTHONPATH`` on two checkouts to compare (the server and the clients
share this one process, so the figures are relative).  One JSON line per
figure; nothing asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import tempfile
import time
from pathlib import Path

import trustme

from agentd.mcp.server.auth import server_ssl_context
from agentd.mcp.server.handler import Handler
from agentd.mcp.server.http.server import serve


async def _one(port: int, ctx: ssl.SSLContext, refused: bool) -> float:
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                                       server_hostname="localhost")
        writer.write(b"GET /none HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        await reader.read()
        writer.close()
    except (ssl.SSLError, ConnectionError):
        if not refused:
            raise
    return time.perf_counter() - t0


async def _round(port: int, ctx: ssl.SSLContext, n: int, concurrency: int,
                 refused: bool) -> dict[str, float]:
    sem = asyncio.Semaphore(concurrency)
    times: list[float] = []

    async def go() -> None:
        async with sem:
            times.append(await _one(port, ctx, refused))

    t0 = time.perf_counter()
    await asyncio.gather(*(go() for _ in range(n)))
    wall = time.perf_counter() - t0
    times.sort()
    return {"per_s": round(n / wall, 1),
            "p50_ms": round(statistics.median(times) * 1000, 2),
            "p99_ms": round(times[int(len(times) * 0.99) - 1] * 1000, 2)}


async def main(args: argparse.Namespace) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    tmp = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    client = ssl.create_default_context(cafile=str(tmp / "ca.pem"))
    for mtls, refused in ((False, False), (True, True)):
        ctx = server_ssl_context(str(tmp / "server.pem"), str(tmp / "server.pem"),
                                 str(tmp / "ca.pem") if mtls else None)
        runner = await serve(Handler("bench", "1"), port=0, ssl_context=ctx)
        try:
            row = await _round(runner.port, client, args.connections, args.concurrency,
                               refused)
        finally:
            await runner.stop()
        print(json.dumps({"bench": "tls_accept.refused" if refused else "tls_accept.served",
                          "connections": args.connections, "concurrency": args.concurrency,
                          **row}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    import uvloop

    uvloop.install()
    asyncio.run(main(parser.parse_args()))
