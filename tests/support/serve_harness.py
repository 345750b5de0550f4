"""An agentd serving its self-MCP on loopback while its playback loop thinks, and
the raw probes of that surface: a POST, a canary exchange proving it still
serves, raw bytes, its RSS and descriptor count. Shared by the hostile-serving
and hostile-decode tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
from pathlib import Path

import aiohttp
import orjson
from agentd_proc import Agentd, agentd_env, start_agentd
from peers import free_port

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "hostile-test", "version": "1"}}}
HDRS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def start(agentd_bin: str, tmp: Path, *extra: str, scheme: str = "http",
                limits: dict | None = None, nofile: int | None = None,
                level: str = "info") -> tuple[Agentd, str]:
    """An agentd serving its self-MCP while its (playback) loop thinks for a minute."""
    script = tmp / "slow.json"
    script.write_text(json.dumps({"turns": [{"delay": 600, "content": "never"}] * 8}))
    port = free_port()
    env = agentd_env(AGENTD_LOG_LEVEL=level)
    if limits:
        env["AGENTD_SERVE_LIMITS"] = json.dumps(limits)
    argv = [agentd_bin, "--instruction", "serve while thinking",
            "--intelligence", f"playback:{script}",
            "--serve-mcp", f"{scheme}://127.0.0.1:{port}", *extra]
    if nofile is not None:  # a small descriptor limit, so the cap is reachable in a test
        cmd = f"ulimit -n {nofile} && exec {shlex.join(argv)}"
        agent = await start_agentd("/bin/sh", ["-c", cmd], env=env)
    else:
        agent = await start_agentd(argv[0], argv[1:], env=env)
    await agent.wait_for_event("mcp.serve.listening")
    return agent, f"{scheme}://127.0.0.1:{port}/mcp"


async def stop(agent: Agentd):
    agent.signal(signal.SIGTERM)
    done = await agent.done()
    assert done.rc == 130, done.stderr
    return done


def assert_all_json(stderr: str) -> None:
    for line in stderr.splitlines():
        if line.strip():
            assert isinstance(json.loads(line), dict), line


def errors(done) -> list[dict]:
    return [e for e in done.logs if e.get("level") == "error"]


async def post(http: aiohttp.ClientSession, url: str, body, sid: str | None = None,
               headers: dict | None = None, **kw):
    h = dict(HDRS)
    if sid:
        h["Mcp-Session-Id"] = sid
    h.update(headers or {})
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with http.post(url, data=data, headers=h, **kw) as r:
        raw = await r.read()
        out = orjson.loads(raw) if raw and r.content_type == "application/json" else raw
        return r.status, r.headers, out


async def canary(http: aiohttp.ClientSession, url: str, **kw) -> str:
    """A whole authenticated exchange: initialize, then the status tool."""
    status, headers, body = await post(http, url, INIT, **kw)
    assert status == 200, (status, body)
    sid = headers["Mcp-Session-Id"]
    status, _, body = await post(http, url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                             "params": {"name": "status", "arguments": {}}},
                                 sid, **kw)
    assert status == 200 and "result" in body, body
    return sid


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes, return what the server answers before it closes (b"" on a reset)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await reader.read(65536)
    except ConnectionError:
        return b""
    finally:
        writer.close()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])
