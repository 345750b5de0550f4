"""The demo's second act: agents driving agents, and a reactive wake.

* A **worker** agentd runs in reactive mode (`--mode reactive --subscribe
  notes://note/inbox`) and serves its self-MCP on loopback (`--serve-mcp`).
* The demo changes the inbox note: the notes server sends
  `notifications/resources/updated`, the worker wakes, reads the inbox fresh
  (notify-then-read) and triages it with a tool call.
* A **parent** agentd declares the worker as just another MCP server
  (`--mcp worker=…`) and drives it: a sync `subagent.spawn` (the worker's
  subagent is a real child process) and a spawn outside the worker's scope,
  refused as an `isError` result.
* agentd's MCP client then does the subscribe pattern against the worker: an
  async spawn, `resources/subscribe` to `agent://subagent/{handle}`, the
  `updated` notification, and a fresh read of the distillate.
* The worker is stopped like a daemon (drained: status `interrupted`).

Both agents are real runs (`agentd.app.run.execute`) on the demo's playback
script; the worker's child and the parent share the same file.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from agentd.config.model import Config, ServerSpec, ServeSpec
from agentd.demo import DemoContext, Trace, register_act

INBOX = "notes://note/inbox"
WORKER_INSTRUCTION = "[demo worker] Triage the inbox note whenever it changes."
PARENT_INSTRUCTION = "[demo parent] Have the worker agent review the shopping list."


class _Prefixed(Trace):
    """The trace of one of several agents: every line prefixed with its name."""

    def __init__(self, parent: Trace, name: str) -> None:
        super().__init__(parent.out)
        self.name = name
        self.answered = asyncio.Event()

    def line(self, text: str = "") -> None:
        for part in text.strip("\n").split("\n"):
            super().line(f"  [{self.name}] {part}")

    def turn(self, step: int, completion: Any) -> None:
        super().turn(step, completion)
        if not completion.tool_calls:
            self.answered.set()


async def _until(predicate: Any, limit: float = 20.0) -> None:
    """Readiness wait (bounded) for something the demo cannot be told about."""
    async with asyncio.timeout(limit):
        while not predicate():  # noqa: ASYNC110 - polls state owned by other components
            await asyncio.sleep(0.02)


async def composition(ctx: DemoContext) -> None:
    from agentd.app.run import RunContext, execute, new_run_id
    from agentd.mcp.client.toolbox import Toolbox

    notes = ctx.servers["notes"].handler
    worker_cfg = ctx.config(WORKER_INSTRUCTION, "notes", mode="reactive",
                            subscribe=(INBOX,), debounce=0.0,
                            serve=ServeSpec(url="http://127.0.0.1:0", scheme="http",
                                            host="127.0.0.1", port=0))
    worker_trace = _Prefixed(ctx.trace, "worker")
    worker: dict[str, RunContext] = {}

    async def grab(stack: Any, run: RunContext) -> None:
        worker["ctx"] = run

    async with asyncio.TaskGroup() as tg:
        running = tg.create_task(execute(worker_cfg, run_id=new_run_id(), signals=False,
                                         tracer=worker_trace, extra=grab))
        try:
            await _until(lambda: ("ctx" in worker and notes.hub.subscribers(INBOX) > 0)
                         or running.done())
            if running.done():
                return
            url = worker["ctx"].served.url  # the self-MCP's /mcp endpoint, on a free port
            ctx.trace.line(f"  a worker agentd: reactive on {INBOX}, serving its self-MCP "
                           f"at {url}")
            # 1. a reactive wake
            ctx.trace.line("  the inbox note changes → notifications/resources/updated")
            notes.store["inbox"] = "urgent: the plumber called back"
            notes.notify_updated(INBOX)
            await asyncio.wait_for(worker_trace.answered.wait(), 30)
            # 2. a parent agentd drives the worker over its self-MCP
            ctx.trace.line(f"  a parent agentd with --mcp worker={url}")
            parent_cfg = Config(instruction=PARENT_INSTRUCTION,
                                intelligence=f"playback:{ctx.script}",
                                mcp=(ServerSpec(name="worker", url=url),),
                                max_steps=10, deadline=60.0, drain_timeout=10.0,
                                log_format="text", log_level=ctx.log_level)
            parent_trace = _Prefixed(ctx.trace, "parent")
            result, code, _ = await execute(parent_cfg, run_id=new_run_id(), signals=False,
                                            tracer=parent_trace)
            parent_trace.line(f"result: status={result.status} exit={int(code)} "
                              f"{orjson.dumps(result.result).decode()}")
            if code:
                raise RuntimeError(f"the parent agentd ended {result.status} (exit {int(code)})")
            # 3. the subscribe pattern, with agentd's MCP client
            ctx.trace.line("  agentd's MCP client: async spawn on the worker, subscribe to its "
                           "handle, wait for updated, read")
            async with Toolbox([ServerSpec(name="worker", url=url)],
                               ping_interval=None) as tb:
                ack = await tb.call("worker__subagent_spawn", {
                    "instruction": "[demo review] Review the shopping list.",
                    "tool_scope": ["notes"], "async": True})
                handle = ack.structured["handle"]
                ctx.trace.line(f"    ack: {ack.text}")
                uri = f"agent://subagent/{handle}"
                await tb.subscribe(uri)
                _server, woke, obs = await asyncio.wait_for(tb.next_update(), 30)
                ctx.trace.line(f"    notifications/resources/updated {woke} → read: {obs.text}")
        finally:
            if "ctx" in worker:
                worker["ctx"].stop.set()  # stop the daemon: it drains like on SIGTERM
        wres, wcode, _ = await running
    worker_trace.line(f"stopped: status={wres.status} exit={int(wcode)} (a daemon ends "
                      "interrupted, drained)")


register_act("agents driving agents: a reactive worker, its self-MCP, a parent agentd",
             composition)
