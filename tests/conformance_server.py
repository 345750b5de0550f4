"""Serve agentd's self-MCP on loopback http for peers that need a process.

``python tests/conformance_server.py PORT`` -- the `Unavailable` backend (no
subagents), no auth (loopback development listener).  Used by the conformance
suite tests; stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import signal
import sys


async def main(port: int) -> None:
    from agentd.config import parse_serve
    from agentd.log import configure
    from agentd.tree.selfmcp import serve_self_mcp

    configure(level="warning")
    spec = parse_serve(f"http://127.0.0.1:{port}", None, None, None, None)
    runner = await serve_self_mcp(spec, run_id="conformance", mode="task")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.stop()


if __name__ == "__main__":
    from agentd import runtime

    runtime.run(main(int(sys.argv[1])))
