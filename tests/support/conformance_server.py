"""Serve agentd's self-MCP on loopback http for peers that need a process.

``python tests/support/conformance_server.py PORT`` -- the `Unavailable` backend (no
subagents), no auth (loopback development listener).  Used by the conformance
suite tests; stops on SIGTERM/SIGINT.

``python tests/support/conformance_server.py PORT engine`` serves the generic engine
instead (a bare ``Handler`` with ``subscribe=True``, which tracks any URI):
the suite's subscribe scenarios use a fixture URI (``test://watched-resource``)
that the self-MCP refuses by design (docs/server.md), so the engine's
``resources/subscribe`` wire behaviour is checked there.
"""

from __future__ import annotations

import asyncio
import signal
import sys


async def main(port: int, engine: bool) -> None:
    from agentd import __version__
    from agentd.app.serving import serve_self_mcp
    from agentd.config.serve import parse_serve
    from agentd.log import configure
    from agentd.mcp.server.handler import Handler
    from agentd.mcp.server.http.server import serve

    configure(level="warning")
    if engine:
        runner = await serve(Handler("agentd-engine", __version__, subscribe=True),
                             host="127.0.0.1", port=port)
    else:
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

    runtime.run(main(int(sys.argv[1]), sys.argv[2:] == ["engine"]))
