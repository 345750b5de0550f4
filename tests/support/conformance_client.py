"""One-shot adapter the MCP conformance suite runs against its mock servers.

    conformance client --command "python tests/support/conformance_client.py" --scenario S

The suite appends the server URL as the last argument and names the scenario
in env ``MCP_CONFORMANCE_SCENARIO``.  The adapter connects agentd's client,
does what the scenario expects, and exits 0 on success, 1 otherwise:

* ``initialize``: handshake, list tools, close;
* ``tools_call``: handshake, list tools, call ``add_numbers`` (a=2, b=3);
* ``request-metadata`` (2026-07-28): the handshake alone -- the mock refuses the
  first request with -32022, agentd asks ``server/discover`` again at a version
  of ``data.supported``;
* ``sse-retry``: handshake, list tools, call ``test_reconnection`` -- the mock
  cuts the POST's SSE stream after a priming event and answers on the GET
  resumption (``Last-Event-ID``, after the server's ``retry``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agentd import log as _log
from agentd.config.model import ServerSpec
from agentd.mcp import MCPClient


async def run(url: str, scenario: str) -> int:
    spec = ServerSpec(name="conformance", url=url)
    async with MCPClient(spec, run_id="conformance", ping_interval=None) as client:
        if scenario == "initialize":
            if client.capabilities.tools:
                await client.list_tools()
            return 0
        if scenario == "tools_call":
            await client.list_tools()
            obs = await client.call_tool("add_numbers", {"a": 2, "b": 3})
            print(obs.text)
            return 0 if not obs.is_error and "5" in obs.text else 1
        if scenario == "sse-retry":
            await client.list_tools()
            obs = await client.call_tool("test_reconnection", {}, time_limit=20)
            print(obs.text)
            return 0 if not obs.is_error else 1
        # any other scenario: the handshake and the tool list are what we can do
        if client.capabilities.tools:
            await client.list_tools()
        return 0


def main() -> int:
    _log.configure(level=os.environ.get("AGENTD_LOG_LEVEL", "warning"))
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    try:
        return asyncio.run(run(url, scenario))
    except Exception as exc:
        print(f"conformance adapter failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
