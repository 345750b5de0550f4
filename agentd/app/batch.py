"""`agentd batch`: many samples, one process, one tree (docs/batch.md).

The batch root is a root run without a loop of its own: one intelligence
provider and one `Toolbox` (connected, handshaken and listed once), one
`Ledger` and one `FlowGate` for the whole batch (`--batch-token-ceiling`,
`--max-inflight-intelligence`, a 429's `Retry-After` pausing every sample),
and one `Supervisor`. Each sample is a child of the root (`0.k`), spawned
through the supervisor's one chokepoint: a fresh agent with its own
conversation, budgets (`--max-steps`, `--token-ceiling`, `--deadline` are
per sample) and subtree, whose model and MCP I/O the root brokers
(`SampleBroker` counts it per sample).

`parallel` workers take the next task in file order, so at most `--parallel`
samples are in flight; a sample's failure is its result line, never the
batch's. Each result line is appended and flushed as its sample ends.

Signals: the first SIGINT/SIGTERM starts no new sample and gives those in
flight `DRAIN_SHARE` of `--drain-timeout` to end (their lines are written);
then the rest are cancelled through the kill ladder (within the remainder)
and are not written, so `--resume` runs them again. A second signal cancels
at once. The exit code is 130.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from agentd.agent.subagents import HandleState, Refusal, SpawnRequest
from agentd.app.batch_broker import SampleBroker
from agentd.app.batch_files import ResultLine, ResultsFile, TaskLine
from agentd.app.batch_progress import progress
from agentd.app.cassette import AnswerBounds
from agentd.app.compose import metered_provider, open_toolbox
from agentd.app.run import new_run_id
from agentd.config import Config
from agentd.errors import classify
from agentd.exitcodes import ExitCode
from agentd.intelligence import for_config
from agentd.intelligence.base import (
    Completion,
    IntelligenceUnavailable,
    Message,
    ToolDef,
)
from agentd.intelligence.flow import FlowGate
from agentd.log import configure, log
from agentd.output import Usage
from agentd.tree.supervisor import ROOT, Supervisor

DRAIN_SHARE = 0.5  # of --drain-timeout, for the samples in flight at a signal to end


class BatchOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Where one `agentd batch` writes and what it replays (its limits are
    `Config`'s: `parallel`, `batch_token_ceiling`, `progress_interval`, ...; the
    tasks are read, the results file opened, locked and `--resume` applied before
    it runs, by the CLI)."""

    out: str
    record: str | None = None  # a directory: one cassette per sample (agentd.app.cassette)
    replay: str | None = None  # a directory of cassettes: no network at all


class Stats:
    """The batch's counts so far: the progress line and the summary."""

    def __init__(self, total: int, skipped: int) -> None:
        self.total = total
        self.skipped = skipped
        self.by_status: dict[str, int] = {}
        self.running = 0
        self.max_running = 0
        self.tokens = 0
        self.durations: list[float] = []
        self.started = time.monotonic()

    @property
    def done(self) -> int:
        return sum(self.by_status.values())

    def ended(self, status: str, seconds: float, tokens: int) -> None:
        self.by_status[status] = self.by_status.get(status, 0) + 1
        self.durations.append(seconds)
        self.tokens += tokens

    def summary(self) -> dict[str, Any]:
        d = sorted(self.durations)

        def pct(p: float) -> float | None:
            return round(d[min(int(p * len(d)), len(d) - 1)], 3) if d else None

        return {"tasks": self.total, "skipped": self.skipped, "by_status": self.by_status,
                "tokens": self.tokens, "wall_s": round(time.monotonic() - self.started, 3),
                "sample_p50_s": pct(0.50), "sample_p95_s": pct(0.95),
                "max_in_flight": self.max_running}


class Batch:
    """One batch run over an open Supervisor (see the module doc)."""

    def __init__(self, config: Config, *, run_id: str, sup: Supervisor,
                 broker: SampleBroker, results: ResultsFile, stats: Stats) -> None:
        self.config = config
        self.run_id = run_id
        self.sup = sup
        self.broker = broker
        self.results = results
        self.stats = stats
        self.stopping = False  # a signal: no new sample starts
        self.interrupted = False
        self._cancel_now = asyncio.Event()  # the drain's grace is over: cancel in flight
        self._waiting: dict[str, asyncio.Future[HandleState]] = {}
        self.servers = frozenset(s.name for s in (*config.mcp, *config.a2a_peers))
        sup.on_terminal(self._terminal)

    def _terminal(self, state: HandleState) -> None:
        fut = self._waiting.pop(state.handle, None)
        if fut is not None and not fut.done():
            fut.set_result(state)

    async def run(self, todo: list[TaskLine]) -> None:
        tasks = iter(todo)
        async with asyncio.TaskGroup() as tg:
            for n in range(min(self.config.parallel, len(todo))):
                tg.create_task(self._worker(tasks), name=f"batch-worker-{n}")

    async def _worker(self, tasks: Iterator[TaskLine]) -> None:
        while not self.stopping and (task := next(tasks, None)) is not None:
            await self._sample(task)

    async def _sample(self, task: TaskLine) -> None:
        scope = tuple(task.tool_scope) if task.tool_scope is not None else None
        req = SpawnRequest(instruction=task.instruction, output_contract=task.output_contract,
                           tool_scope=scope, mode="async")
        began = time.monotonic()
        # the cassette is read before the child exists (its first request finds it),
        # off the loop: a slow disk never holds the batch's signals or other samples
        loaded = None if self.broker.replay_dir is None else \
            await asyncio.to_thread(self.broker.load, task.id)
        state = await self.sup.spawn(ROOT, req)
        if isinstance(state, Refusal):  # past the batch's ceiling: budget_exhausted, not failed
            ledger = self.sup.ledger
            spent = ledger.ceiling is not None and ledger.spent >= ledger.ceiling
            self._write(task, "budget_exhausted" if spent else "failed", spent, None, 0,
                        Usage(), f"{self.run_id}/-", state.text, began)
            return
        handle = state.handle
        self.broker.begin(handle, task.id, frozenset(scope) if scope is not None
                          else self.servers, loaded)
        stats = self.stats
        stats.running += 1
        stats.max_running = max(stats.max_running, stats.running)
        log.info("batch.sample.start", id=task.id, handle=handle)
        try:
            if not state.done:
                fut = asyncio.get_running_loop().create_future()
                self._waiting[handle] = fut
                state = await self._until_ended(handle, fut)
        finally:
            stats.running -= 1
            tally = self.broker.end(handle)
        if self.interrupted and state.status == "cancelled":
            log.info("batch.sample.dropped", id=task.id, handle=handle,
                     reason="interrupted: --resume runs it again")
            return
        error = None
        status = state.status
        if tally.failure is not None:  # a replay that diverged, or a bad cassette
            status, error = "failed", tally.failure
        elif status != "completed":
            res = state.result
            error = str(res["error"]) if isinstance(res, dict) and "error" in res else status
        self._write(task, status, state.partial, state.result, tally.steps,
                    tally.usage, f"{self.run_id}/{handle}", error, began)

    async def _until_ended(self, handle: str, fut: asyncio.Future[HandleState]
                           ) -> HandleState:
        """The sample's terminal state; cancelled through the kill ladder first if
        the drain's grace ends while it runs."""
        cancel: asyncio.Future[Any] = asyncio.ensure_future(self._cancel_now.wait())
        try:
            await asyncio.wait((fut, cancel), return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancel.cancel()
        if not fut.done():
            await self.sup.cancel(handle)
        return await fut

    def _write(self, task: TaskLine, status: str, partial: bool, result: Any, steps: int,
               usage: Usage, run_id: str, error: str | None, began: float) -> None:
        self.results.write(ResultLine(id=task.id, status=status, partial=partial,
                                      result=result, steps=steps, usage=usage,
                                      run_id=run_id, error=error))
        seconds = time.monotonic() - began
        self.stats.ended(status, seconds, usage.total_tokens)
        log.info("batch.sample.end", id=task.id, status=status, steps=steps,
                 tokens=usage.total_tokens, seconds=round(seconds, 3))

    def interrupt(self, *, now: bool) -> None:
        """Start no new sample; with `now`, cancel those in flight (not written)."""
        self.stopping = True
        if now:
            self.interrupted = True
            self._cancel_now.set()


class Offline:
    """`--replay`'s intelligence: every answer comes from a cassette, so a call
    that reaches the provider is a bug; it is refused, never sent."""

    name = "replay"
    model: str | None = None  # the gateway chooses

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolDef]
                       ) -> Completion:
        raise IntelligenceUnavailable("--replay: no intelligence call leaves the batch")

    def share_gate(self, gate: FlowGate) -> None:
        """Nothing is sent: nothing to pause."""

    async def aclose(self) -> None:
        return None


def _supervisor_config(config: Config) -> Config:
    """The batch root's limits: room for `parallel` samples under the root, and the
    kill ladder's share of the drain."""
    return msgspec.structs.replace(
        config, max_children=max(config.max_children, config.parallel),
        max_subagents=max(config.max_subagents, config.parallel),
        drain_timeout=config.drain_timeout * (1 - DRAIN_SHARE))


async def run_batch(config: Config, opts: BatchOptions, tasks: list[TaskLine],
                    results: ResultsFile) -> int:
    """The whole batch, appending to `results` (open and locked: its opener closes
    it); returns the exit code (0, 1, 130; 6 before any sample)."""
    run_id = new_run_id()
    configure(fmt=config.log_format, run_id=run_id, level=config.log_level or "info")
    todo = [t for t in tasks if t.id not in results.finished]
    stats = Stats(len(tasks), len(tasks) - len(todo))
    log.info("batch.start", tasks=len(tasks), skipped=stats.skipped, parallel=config.parallel,
             servers=[s.name for s in config.mcp],
             batch_token_ceiling=config.batch_token_ceiling)
    loop = asyncio.get_running_loop()
    signalled: list[str] = []
    holder: list[Batch] = []
    timers: list[asyncio.TimerHandle] = []

    def on_signal(name: str) -> None:
        again = bool(signalled)
        signalled.append(name)
        log.warning("batch.signal", signal=name, drain_timeout_s=config.drain_timeout,
                    action="cancel in-flight samples" if again else "start no new sample")
        if holder:
            batch = holder[0]
            batch.interrupt(now=again)
            if not again:
                timers.append(loop.call_later(config.drain_timeout * DRAIN_SHARE,
                                              lambda: batch.interrupt(now=True)))

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig.name)
            installed.append(sig)
    try:
        async with contextlib.AsyncExitStack() as stack:
            replay = opts.replay is not None
            provider = Offline() if replay else for_config(config)
            metered = metered_provider(config, provider, config.batch_token_ceiling)
            stack.push_async_callback(metered.aclose)
            toolbox = None if replay else await stack.enter_async_context(
                open_toolbox(config, run_id))
            broker = SampleBroker(intelligence=metered, toolbox=toolbox, record=opts.record,
                                  replay=opts.replay, cassette_bytes=config.cassette_bytes,
                                  bounds=AnswerBounds(
                                      completion=config.intelligence_max_bytes,
                                      observation=config.mcp_max_bytes))
            sup = await stack.enter_async_context(Supervisor(
                _supervisor_config(config), run_id=run_id, broker=broker,
                ledger=metered.ledger))
            batch = Batch(config, run_id=run_id, sup=sup, broker=broker,
                          results=results, stats=stats)
            holder.append(batch)
            if signalled:  # a signal during start-up
                batch.interrupt(now=True)
            async with progress(stats, config.progress_interval, log_level=config.log_level):
                await batch.run(todo)
    except Exception as exc:  # nothing ran, or the batch root itself failed
        code, event, message = classify(exc)
        log.error(event, error=message)
        return int(code)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        for t in timers:
            t.cancel()
    summary = stats.summary()
    if signalled:
        summary["by_status"]["interrupted"] = len(todo) - stats.done
        log.info("batch.end", exit_code=int(ExitCode.INTERRUPTED), **summary)
        return int(ExitCode.INTERRUPTED)
    ok = stats.by_status.get("completed", 0) == len(todo)
    code = ExitCode.COMPLETED if ok else ExitCode.FAILED
    log.info("batch.end", exit_code=int(code), **summary)
    return int(code)
