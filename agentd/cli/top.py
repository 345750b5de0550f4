"""`agentd top URL`: a live terminal view of a serving agentd's tree.

It is an ordinary MCP client of the worker's self-MCP (the same `MCPClient`
a parent agentd uses, with the same auth: a bearer, or mTLS with a client
certificate, and a CA file for a private https endpoint): it reads
`agent://status`, whose body carries the `tree` rows this principal may see
(the worker's own subagents and the served runs it owns), subscribes to it
(MCP 2026-07-28 workers announce every spawn and every end; older sessions
never announce it, so the view also re-reads every `--interval` seconds for
the ages), and redraws.

Why `rich`: a live table that redraws in place in any terminal, with no
curses code of ours; it is the optional extra `agentd[top]`. `--once` prints
one frame as plain text and needs nothing extra (scripts, a quick look).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from agentd.config.model import ServerSpec
from agentd.exitcodes import ExitCode
from agentd.log import log
from agentd.wire.guard import loads_peer

__all__ = ["fetch", "render_text", "run_top"]

STATUS_URI = "agent://status"
COLUMNS = ("HANDLE", "STATUS", "DEPTH", "STEPS", "TOKENS", "AGE", "LAST EVENT")


def _key(handle: str) -> tuple:
    """Tree order: `0.2` before `0.10`, a parent right before its children."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in handle.split("."))


def _age(ms: int) -> str:
    s = ms / 1000
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def rows(status: dict[str, Any]) -> list[tuple[str, ...]]:
    """The table rows of a status body, in tree order, handles indented by depth."""
    tree = [r for r in status.get("tree") or () if isinstance(r, dict) and "handle" in r]
    out: list[tuple[str, ...]] = []
    base = min((int(r.get("depth", 1)) for r in tree), default=1)
    for r in sorted(tree, key=lambda r: _key(str(r["handle"]))):
        indent = "  " * max(int(r.get("depth", base)) - base, 0)
        state = str(r.get("status", "?"))
        if isinstance(r.get("ran_ms"), int):  # finished: how long it ran beside its age
            state = f"{state} in {_age(r['ran_ms'])}"
        out.append((f"{indent}{r['handle']}", state, str(r.get("depth", "")),
                    str(r.get("steps", "")), str(r.get("tokens", "")),
                    _age(int(r.get("age_ms", 0))), str(r.get("last", ""))[:60]))
    return out


def header(url: str, status: dict[str, Any]) -> str:
    spawns = status.get("spawns") or {}
    counts = " ".join(f"{k}={v}" for k, v in spawns.items() if v)
    return (f"agentd {status.get('version', '?')} at {url}  run {status.get('run_id', '?')}  "
            f"mode {status.get('mode', '?')}  pid {status.get('pid', '?')}  "
            f"up {_age(int(status.get('uptime_ms', 0)))}  {counts}").rstrip()


def render_text(url: str, status: dict[str, Any]) -> str:
    """One frame as plain text (`--once`, and the fallback without rich)."""
    table = [COLUMNS, *rows(status)]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    lines = [header(url, status), ""]
    for row in table:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    if len(table) == 1:
        lines.append("(no subagents)")
    return "\n".join(lines)


def _render_rich(url: str, status: dict[str, Any], note: str) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(expand=False, box=None, header_style="bold")
    for col in COLUMNS:
        table.add_column(col, no_wrap=True)
    style = {"running": "cyan", "completed": "green", "failed": "red",
             "cancelled": "yellow", "budget_exhausted": "yellow", "deadline": "yellow"}
    for row in rows(status):
        table.add_row(row[0], Text(row[1], style=style.get(row[1], "")), *row[2:])
    parts: list[Text | Table] = [Text(header(url, status), style="bold"), table]
    if not status.get("tree"):
        parts.append(Text("(no subagents)", style="dim"))
    parts.append(Text(note, style="dim"))
    return Group(*parts)


def spec_for(url: str, *, bearer: str | None, ca_file: str | None,
             client_cert: str | None, client_key: str | None) -> ServerSpec:
    from agentd.log import register_secret

    headers = {}
    if bearer:
        register_secret(bearer)
        headers["Authorization"] = f"Bearer {bearer}"
    if url.rstrip("/").count("/") == 2:  # http(s)://host:port: the self-MCP is at /mcp too
        url = url.rstrip("/") + "/mcp"
    return ServerSpec(name="agentd", url=url, headers=headers, ca_file=ca_file,
                      client_cert=client_cert, client_key=client_key)


async def fetch(client: Any) -> dict[str, Any]:
    obs = await client.read_resource(STATUS_URI)
    if obs.is_error:
        raise RuntimeError(f"reading {STATUS_URI}: {obs.text[:200]}")
    body = loads_peer(obs.text, lambda text: RuntimeError(f"{STATUS_URI} is not JSON: {text}"))
    if not isinstance(body, dict):
        raise RuntimeError(f"{STATUS_URI} is not a JSON object")
    return body


async def run_top(url: str, *, bearer: str | None = None, ca_file: str | None = None,
                  client_cert: str | None = None, client_key: str | None = None,
                  interval: float = 1.0, once: bool = False, out: Any = None) -> int:
    """Show the view until Ctrl-C (or one frame with `once`); returns the exit code."""
    import sys

    from agentd.mcp.client.facade import MCPClient

    out = out or sys.stdout
    live_ok = True
    if not once:
        try:
            import rich  # noqa: F401
        except ImportError:
            live_ok = False
    spec = spec_for(url, bearer=bearer, ca_file=ca_file, client_cert=client_cert,
                    client_key=client_key)
    try:
        async with MCPClient(spec, ping_interval=None) as client:
            status = await fetch(client)
            if once:
                print(render_text(url, status), file=out, flush=True)
                return int(ExitCode.COMPLETED)
            announced = False
            with contextlib.suppress(Exception):
                announced = await client.subscribe(STATUS_URI)
            note = ("live: redrawn on every spawn and end, and every "
                    f"{interval:g}s; Ctrl-C to quit" if announced else
                    f"polling every {interval:g}s; Ctrl-C to quit")
            if not live_ok:
                return await _plain_loop(client, url, status, interval, out)
            from rich.console import Console
            from rich.live import Live

            console = Console(file=out)
            with Live(_render_rich(url, status, note), console=console,
                      refresh_per_second=4, auto_refresh=False) as live:
                while True:
                    await _next(client, interval)
                    status = await fetch(client)
                    live.update(_render_rich(url, status, note), refresh=True)
    except (KeyboardInterrupt, asyncio.CancelledError):
        return int(ExitCode.COMPLETED)
    except Exception as exc:
        log.error("top.failed", url=url, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return int(ExitCode.MCP_REQUIRED)


async def _next(client: Any, interval: float) -> None:
    """Until the worker announces a change, or `interval` passes; drains the queue."""
    deadline = time.monotonic() + interval
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(asyncio.get_running_loop().time() + interval):
            await client.updates.get()
    while not client.updates.empty():
        client.updates.get_nowait()
    rest = deadline - time.monotonic()
    if rest > interval:  # clock oddities: never spin
        await asyncio.sleep(interval)


async def _plain_loop(client: Any, url: str, status: dict[str, Any], interval: float,
                      out: Any) -> int:
    """Without rich: redraw the plain frame (clear screen, home) each time."""
    while True:
        out.write("\x1b[2J\x1b[H" + render_text(url, status) + "\n")
        out.flush()
        await _next(client, interval)
        status = await fetch(client)
