"""What the observability tests share: a playback book, a plain GET, a serving worker
and a spawn through its self-MCP (tests/obs: traces, metrics and health, `agentd top`)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from agentd_proc import Agentd, agentd_env, start_agentd

TOKEN = "obs-bearer-7f3a9c"


def write_book(tmp: Path, scripts: list[dict]) -> Path:
    """A playback book (`--intelligence playback:<path>`) of `scripts`."""
    path = tmp / "book.json"
    path.write_text(json.dumps({"playback": 1, "scripts": scripts}))
    return path


def http_get(url: str, *, bearer: str | None = None) -> tuple[int, str]:
    """(status, body) of a GET, an HTTP error's included."""
    req = urllib.request.Request(url)
    if bearer:
        req.add_header("Authorization", f"Bearer {bearer}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def start_worker(agentd_bin: str, book: Path, port: int, *extra: str) -> Agentd:
    """A reactive worker serving its self-MCP on `port` behind `TOKEN`."""
    return await start_agentd(agentd_bin, [
        "--instruction", "[worker] serve", "--intelligence", f"playback:{book}",
        "--mode", "reactive", "--subscribe", "file:///nowhere",
        "--serve-mcp", f"http://127.0.0.1:{port}", "--serve-bearer", TOKEN, *extra],
        env=agentd_env(OTEL_SDK_DISABLED="true"))


async def spawn_served(url: str, instruction: str, *, wait: bool = True) -> dict:
    """A served run spawned through the worker's self-MCP at `url`: its state."""
    from agentd.config.model import ServerSpec
    from agentd.mcp import MCPClient

    spec = ServerSpec(name="worker", url=url, headers={"Authorization": f"Bearer {TOKEN}"})
    async with MCPClient(spec, ping_interval=None) as c:
        r = await c.call_tool("subagent.spawn", {"instruction": instruction,
                                                 "async": not wait})
        assert not r.is_error, r.text
        return r.structured if isinstance(r.structured, dict) else json.loads(r.text)
