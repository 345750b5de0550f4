"""Reactive mode: resource updates -> debounced, coalesced wakes of the loop.

* `router` — `Coalescer` (sans-IO) and `Router` (asyncio driver), `Wake`;
* `daemon` — `ReactiveDaemon`, `run_reactive`, `loop_runner`, `resolve_owner`;
* `awaiting` — `Waiters` and `await_resource` (the `agentd__await_resource`
  self-tool), `await_resource_tool`.

See docs/reactive.md.
"""

from agentd.reactive.awaiting import Waiters, await_resource, await_resource_tool
from agentd.reactive.daemon import (
    ReactiveDaemon,
    Read,
    WakeRun,
    loop_runner,
    resolve_owner,
    run_reactive,
)
from agentd.reactive.router import Coalescer, Router, RouterClosed, Wake

__all__ = [
    "Coalescer",
    "ReactiveDaemon",
    "Read",
    "Router",
    "RouterClosed",
    "Waiters",
    "Wake",
    "WakeRun",
    "await_resource",
    "await_resource_tool",
    "loop_runner",
    "resolve_owner",
    "run_reactive",
]
