"""One subagent run: its state, its process, and its life from spawn to reaped.

A `ChildRun` is made by the Supervisor when admission lets a spawn through
(`agentd.tree.admission`), is kept by the tree's registry
(`agentd.tree.registry`) under its handle, and is driven by `drive(host)`, a
task in the Supervisor's TaskGroup:

1. the child process is started (`host.start`) with its first frames pipelined
   (`child/configure`, then `child/run`);
2. the run waits for the answer of `child/run` -- or a stop (cancel, drain,
   its parent's end), then it asks the child to cancel and walks the kill
   ladder (`agentd.tree.procs.ChildProcess.ladder`) before it is terminal;
3. **the terminal status is set as soon as the result is known** (the sync
   spawn's answer, the `on_terminal` callbacks, so the self-MCP's `updated`);
   the process teardown (the child's own exit, or the ladder for a child that
   lingers) continues after, and the drive task ends once it is reaped.

A warm session stays between 2 and 3 until its channel closes or it is
stopped; each `send` is one more turn on its wire (the Supervisor's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from agentd.agent.subagents import HandleState, SpawnRequest, depth_of
from agentd.child.boot import FAULT_ENV
from agentd.child.channel import Channel, ChannelClosed
from agentd.child.control import ChildConfig, MessageParams, RunOutcome
from agentd.config.model import Config
from agentd.errors import RPCError
from agentd.log import Logger
from agentd.obs import trace
from agentd.tree.procs import ChildProcess, exhausted

__all__ = ["ChildRun", "RunHost", "until_first"]


class RunHost(Protocol):
    """What a run needs of its Supervisor."""

    config: Config
    log: Logger
    configure_within: float  # the time a child gets to answer child/configure

    async def start(self, run: ChildRun, env: dict[str, str] | None,
                    hello: Callable[[Channel], None]) -> ChildProcess:
        """Start the child's process (its wire up, `hello` called on it)."""
        ...

    def child_config(self, run: ChildRun) -> ChildConfig: ...

    def finish(self, run: ChildRun, status: str, *, partial: bool = False,
               result: Any = None, reason: str | None = None) -> None:
        """Make `run` terminal (once; later calls do nothing)."""
        ...

    def charge(self, run: ChildRun, tokens: int) -> None: ...

    def keep_trajectory(self, run: ChildRun, outcome: RunOutcome) -> None:
        """The trajectory an answer carries, kept when the tree records them."""
        ...

    def refuse(self, run: ChildRun, cap: str, words: str) -> None:
        """`run` could not start (a machine limit): withdrawn, its spawn refused."""
        ...


async def until_first(*events: asyncio.Event) -> None:
    """Until one of `events` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _settle(fut: asyncio.Future[Any]) -> None:
    """Give up on a request's answer; if it already failed, mark its error seen."""
    if not fut.cancel() and not fut.cancelled():
        fut.exception()


class ChildRun:
    """One handle of the tree: a subagent run, or one of the roots (`request` None)."""

    def __init__(self, handle: str, parent: str, scope: frozenset[str], mode: str,
                 request: SpawnRequest | None) -> None:
        self.handle = handle
        self.parent = parent
        self.depth = depth_of(handle)
        self.scope = scope
        self.mode = mode
        self.request = request
        self.state = HandleState(handle=handle)
        self.proc: ChildProcess | None = None
        # set once `proc` is: a forked child may ask before its spawn call returned
        self.started = asyncio.Event()
        self.io: set[asyncio.Task[None]] = set()  # its brokered requests in flight
        self.minted = 0  # handles ever minted under this one
        self.live_children: set[str] = set()
        self.done = asyncio.Event()
        self.stop = asyncio.Event()
        self.stop_reason = "cancelled"
        self.stop_why: str | None = None
        self.idle = asyncio.Event()  # warm: a turn is not running
        if mode != "warm":
            self.idle.set()
        self.turn_lock = asyncio.Lock()
        self.tokens = 0
        self.spawned_at = time.monotonic()
        self.first_frame: float | None = None
        self.finished_at: float | None = None
        self.reason: str | None = None
        self.refusal: str | None = None  # set when its start was refused (no process)
        self.fault = os.environ.get(FAULT_ENV)
        self.span: Any = trace.NOSPAN  # agentd.spawn, from spawn to the end (agentd.obs)
        self.steps = 0  # answers of the intelligence brokered for it
        self.last = "spawned"  # its last event, for `agentd top` (names, never content)

    @property
    def live(self) -> bool:
        return not self.state.done

    def row(self, now: float) -> dict[str, Any]:
        """Its line in the live view: names and numbers, never content; `age_ms`
        since its spawn, and once it finished `ran_ms`, how long it ran."""
        row = {"handle": self.handle, "parent": self.parent, "status": self.state.status,
               "depth": self.depth, "mode": self.mode, "steps": self.steps,
               "tokens": self.tokens, "age_ms": int((now - self.spawned_at) * 1000),
               "last": self.last}
        if self.finished_at is not None:
            row["ran_ms"] = int((self.finished_at - self.spawned_at) * 1000)
        return row

    def request_stop(self, reason: str, *, why: str | None = None) -> None:
        """Stop the run; it ends with status `reason` (`cancelled`, or `failed` with
        `why`, the words of its result and log)."""
        if self.live and not self.stop.is_set():
            self.stop_reason = reason
            self.stop_why = why
            self.stop.set()

    async def until_stopped(self, call: Any) -> Any:
        """Await a control call unless the run is asked to stop first (then None)."""
        task = asyncio.ensure_future(call)
        stop = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, ChannelClosed, RPCError):
                    await task
        return task.result() if task.done() and not task.cancelled() else None

    # ------------------------------------------------------------- its life
    async def drive(self, host: RunHost) -> None:
        budget = host.config.drain_timeout
        proc: ChildProcess | None = None
        first: list[asyncio.Future[Any]] = []
        request = self.request
        assert request is not None, "a root is not driven"

        def hello(channel: Channel) -> None:
            """The first frames: child/run pipelined right behind child/configure."""
            first.append(channel.request("child/configure", host.child_config(self)))
            first.append(channel.request("child/run", MessageParams(
                request.instruction, self.span.traceparent)))

        try:
            env = None
            if self.fault is not None:  # test-only fault injection, as set at spawn time
                env = {**os.environ, FAULT_ENV: self.fault}
            try:
                proc = await host.start(self, env, hello)
            except Exception as exc:
                limit = exhausted(exc)
                if limit is not None:  # the machine ran out: a refusal, never a run
                    host.refuse(self, *limit)
                else:  # the forkserver gone, ...: this run fails
                    host.finish(self, "failed", reason=f"spawn failed: {exc}")
                return
            self.proc = proc
            self.started.set()
            await self._run(host, proc, budget, *first)
        finally:
            for fut in first:  # an answer nobody awaited any more (stopped, failed)
                _settle(fut)
            if proc is not None:
                if proc.returncode is None:
                    await asyncio.shield(proc.ladder(budget, ask=None, reason="cleanup"))
                await proc.close()
                if self.live:
                    host.finish(self, "failed", reason=why(proc))
                emit = host.log.warning if self.state.status == "failed" else host.log.info
                emit("subagent.exit", handle=self.handle, pid=proc.pid,
                     returncode=proc.returncode, status=self.state.status, reason=self.reason)
            elif self.live and self.refusal is None:
                host.finish(self, "cancelled", reason="cancelled before start")

    async def _run(self, host: RunHost, proc: ChildProcess, budget: float,
                   configured: asyncio.Future[Any], ran: asyncio.Future[Any]) -> None:
        """From the first frames (sent by `hello` when the wire opened) to the end.

        child/run goes out right behind child/configure: the child finds it waiting
        when its runtime starts instead of idling for a round trip through this loop.
        """
        try:
            await self.until_stopped(asyncio.wait_for(configured, host.configure_within))
            self.first_frame = time.monotonic()
            outcome: RunOutcome | None = None
            if not self.stop.is_set():
                outcome = await self.until_stopped(ran)
        except TimeoutError:
            proc.channel.failure = proc.channel.failure or "no answer to child/configure"
            await proc.ladder(budget, ask=None, reason="configure timeout")
            host.finish(self, "failed", reason="no answer to child/configure within "
                                               f"{host.configure_within}s")
            return
        except (ChannelClosed, RPCError):
            outcome = None
        if self.stop.is_set():  # cancel / drain / parent ended: ask the child to cancel
            ask = "child/cancel" if not proc.channel.closed.is_set() else None
            await proc.ladder(budget, ask=ask, reason=self.stop_reason)
            host.finish(self, self.stop_reason, partial=self.stop_why is None,
                        result=self.state.result if self.stop_why is None else None,
                        reason=self.stop_why or self.stop_reason)
            return
        if outcome is None:  # the wire broke or the child died
            if proc.channel.failure:  # protocol error: end it through the ladder
                await proc.ladder(budget, ask=None, reason="protocol error")
            else:
                await proc.wait(budget)
            host.finish(self, "failed", reason=why(proc))
            return
        host.charge(self, outcome.tokens)
        host.keep_trajectory(self, outcome)
        if self.mode == "warm" and outcome.status == "completed":
            await self._warm(host, proc, budget, outcome)
            return
        # the result is known: terminal now; the child exits on its own after it,
        # and the teardown (making sure it does) goes on after the answer
        host.finish(self, outcome.status, partial=outcome.partial, result=outcome.result,
                    reason=outcome.reason)
        if not await proc.wait(budget * 0.4):
            await proc.ladder(budget * 0.6, ask="child/shutdown", reason="lingering")

    async def _warm(self, host: RunHost, proc: ChildProcess, budget: float,
                    outcome: RunOutcome) -> None:
        """A warm session between turns: until its wire closes or it is stopped."""
        self.state.result = outcome.result
        self.state.partial = outcome.partial
        self.idle.set()
        closed = asyncio.ensure_future(proc.channel.closed.wait())
        stop = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({closed, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            stop.cancel()
        async with self.turn_lock:
            pass  # let a send in flight see the stop
        if self.stop.is_set():
            await proc.ladder(budget, ask="child/shutdown", reason=self.stop_reason)
            host.finish(self, self.stop_reason, partial=self.state.partial,
                        result=self.state.result if self.stop_why is None else None,
                        reason=self.stop_why or self.stop_reason)
        else:
            await proc.ladder(budget, ask=None, reason="wire closed")
            host.finish(self, "failed", reason=why(proc))


def why(proc: ChildProcess) -> str:
    """Why a child ended without its result (a failed run's reason)."""
    if proc.channel.failure:
        return f"protocol error: {proc.channel.failure}"
    rc = proc.returncode
    if rc is not None and rc < 0:
        return f"killed by signal {-rc}"
    return f"exited with code {rc} before its result"
