"""The subagent's runtime, imported by `agentd.child.entry` after its first answer.

`serve()` drives the child end of the control wire: each `child/run` /
`child/send` is one turn of the real agent loop (`agentd.child.turn.ChildLoop`),
with a `RemoteBackend` (agentd.child.remote) as its subagent backend, so the loop's `agentd__subagent_*`
self-tools and `graph.run` reach the ONE chokepoint: the root's `Supervisor`
(via `tree/spawn` etc.; the parent knows which pipe asked, so a child can
never claim another handle).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from typing import Any

import msgspec

from agentd.child.boot import LINGER
from agentd.child.brokered import BrokeredIntelligence, BrokeredToolbox
from agentd.child.channel import Channel
from agentd.child.control import (
    BUSY,
    ChildConfig,
    ControlSession,
    Incoming,
    RunOutcome,
    SpanBatch,
    answer_limit,
)
from agentd.child.remote import RemoteBackend
from agentd.child.turn import ChildLoop
from agentd.log import log
from agentd.obs import trace

__all__ = ["serve"]

RESULT_FIX = "instruct the subagent to answer with less (a summary, an output_contract)"


def _linger(fifo: str) -> None:
    """Test-only (`linger:PATH`): a child slow to exit after its result; it ignores
    SIGTERM and EOF until someone opens the FIFO `PATH` for writing (or SIGKILL)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(fifo, "rb") as fh:
        fh.read(1)


async def serve(cfg: ChildConfig, wire_in: int, wire_out: int, fault: str = "",
                *, hard_exit: bool = False) -> int:
    """Serve the control wire until shutdown, EOF, or (non-warm) the end of the run.

    `child/run` is the first turn, each `child/send` of a warm session another
    (`ChildLoop.turn(first=False)` continues the conversation); one turn at a time.
    """
    stop = asyncio.Event()
    turn: dict[str, asyncio.Task[None]] = {}
    logger = log.bind(handle=cfg.handle)
    started = time.monotonic()
    channel: Channel

    async def do_turn(ev: Incoming) -> None:
        first = ev.method == "child/run"
        try:
            if fault == "hang":
                await asyncio.Event().wait()
            attrs: dict[str, Any] = {"agentd.handle": cfg.handle, "agentd.depth": cfg.depth,
                                     "agentd.turn": "run" if first else "send"}
            with trace.span("agentd.child.run", parent=ev.params.traceparent, **attrs):
                outcome = await agent.turn(ev.params.message, first=first)
        except asyncio.CancelledError:
            outcome = RunOutcome(status="cancelled", partial=True, reason="cancelled")
        except Exception as exc:  # a bug in the loop must not leave the parent waiting
            logger.error("subagent.run_error", error=f"{type(exc).__name__}: {exc}")
            outcome = RunOutcome(status="failed", reason=f"{type(exc).__name__}: {exc}")
        finish(ev, outcome)

    def finish(ev: Incoming, outcome: RunOutcome) -> None:
        turn.pop("run", None)
        trace.flush()  # this turn's spans reach the parent before its answer
        limit = answer_limit(cfg.max_frame)
        if recorder is not None:  # the trajectory so far goes up with every answer
            recorder.end(outcome.status, reason=outcome.reason)
            outcome.trajectory = recorder.snapshot()
            over = channel.answer(ev.id, outcome, limit)
            if over is None:
                after(outcome)
                return
            # a trajectory never fails a run: the answer goes without it
            logger.warning("trajectory.dropped", bytes=over.size, limit=over.limit)
            outcome.trajectory = msgspec.UNSET
        # within the answer bound: the parent re-wraps the result for its own parent
        over = channel.answer(ev.id, outcome, limit)
        if over is not None:
            logger.error("subagent.result_oversize", bytes=over.size, limit=over.limit)
            outcome = RunOutcome(status="failed", steps=outcome.steps, tokens=outcome.tokens,
                                 reason=over.words("the result", RESULT_FIX))
            channel.respond(ev.id, outcome)
        after(outcome)

    def after(outcome: RunOutcome) -> None:
        if cfg.mode != "warm" or outcome.status != "completed":
            stop.set()

    def never_ran(task: asyncio.Task[None], ev: Incoming) -> None:
        # A task cancelled before its first step never enters do_turn (nor its
        # except CancelledError): child/run and child/cancel read in one chunk.
        if task.cancelled():
            finish(ev, RunOutcome(status="cancelled", partial=True, reason="cancelled"))

    def on_incoming(ev: Incoming) -> None:
        m = ev.method
        if m in ("child/run", "child/send"):
            if "run" in turn:
                channel.error(ev.id, BUSY, "a turn is already running")
                return
            turn["run"] = task = tg.create_task(do_turn(ev))
            task.add_done_callback(lambda t: never_ran(t, ev))
        elif m == "child/cancel":
            running = turn.get("run")
            if running is not None:
                running.cancel()
            else:
                stop.set()
            channel.respond(ev.id, {})
        elif m == "child/shutdown":
            channel.respond(ev.id, {})
            stop.set()
        elif m == "child/terminal":
            backend.terminal(ev.params)
        elif m == "io/updated":
            toolbox.updated(ev.params)
        elif m == "child/configure":
            channel.error(ev.id, -32600, "already configured")

    channel = Channel(ControlSession("child", max_frame=cfg.max_frame), wire_in, wire_out,
                      on_incoming)
    recorder = None
    if cfg.trajectory:  # every turn of this process, in one trajectory (agentd.trajectory)
        from agentd.trajectory.recorder import TrajectoryRecorder

        recorder = TrajectoryRecorder(session_id=cfg.run_id or None)
    backend = RemoteBackend(cfg.handle, channel)
    if cfg.tracing:  # the parent exports: spans go up the wire (agentd.obs.trace)
        trace.setup("agentd", mode="relay",
                    # the relay's 9-tuples encode as the array_like SpanRecords they stand for
                    relay=lambda recs: channel.notify("child/spans",
                                                      SpanBatch(recs)))  # type: ignore[arg-type]
    # intelligence and MCP through the parent (agentd.tree.broker): its ledger has each call
    toolbox = BrokeredToolbox(channel, cfg.catalogue)
    agent = ChildLoop(cfg, BrokeredIntelligence(channel), toolbox, backend, recorder)
    async with asyncio.TaskGroup() as tg:
        await channel.start()
        ended = tg.create_task(channel.closed.wait())
        stopped = tg.create_task(stop.wait())
        await asyncio.wait({ended, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for task in (ended, stopped, *turn.values()):
            task.cancel()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(cfg.drain_timeout / 2):
            await channel.flush_close()
    logger.debug("subagent.child_exit", eof=channel.closed.is_set(),
                 age_ms=int((time.monotonic() - started) * 1000))
    if fault.startswith(LINGER):
        _linger(fault[len(LINGER):])
    if hard_exit:
        # Everything is answered, flushed and every task has ended: skip the
        # interpreter's teardown (tens of ms with aiohttp loaded, per child).
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(0)
    return 0
