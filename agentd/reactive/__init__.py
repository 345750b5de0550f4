"""Reactive mode: resource updates -> debounced, coalesced wakes of the loop.

* `router` — `Coalescer` (sans-IO) and `Router` (asyncio driver), `Wake`;
* `daemon` — `ReactiveDaemon`, `run_reactive`, `loop_runner` (which server owns
  a URI is the toolbox's one rule, `agentd.mcp.client.toolbox.owner_of`);
* `waiters` — `Waiters`, the rendezvous of updates and runs that wait;
* `awaiting` — `await_resource` (the `agentd__await_resource` self-tool),
  `await_resource_tool`.

See docs/reactive.md.
"""

from agentd.reactive.awaiting import await_resource, await_resource_tool
from agentd.reactive.daemon import (
    ReactiveDaemon,
    Read,
    WakeRun,
    loop_runner,
    run_reactive,
)
from agentd.reactive.router import Coalescer, Router, Wake
from agentd.reactive.waiters import Waiters

__all__ = [
    "Coalescer",
    "ReactiveDaemon",
    "Read",
    "Router",
    "Waiters",
    "Wake",
    "WakeRun",
    "await_resource",
    "await_resource_tool",
    "loop_runner",
    "run_reactive",
]
