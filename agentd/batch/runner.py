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

`parallel` workers take the next (task, epoch) -- epoch by epoch, each in
file order -- so at most `--parallel` samples are in flight; a sample's
failure is its result line, never the batch's. A sample that failed of an
infrastructure fault (a request of its subtree met the gateway failing past
its retries or an MCP server given up, or its child died without its result)
is `error`, not `failed`: run again up to `--retry-errors` times at once, and
by `--resume`. Each result line is scored (agentd.batch.score), appended
and flushed as its sample ends; the exit code is the results' final state.

Signals: the first SIGINT/SIGTERM starts no new sample and gives those in
flight `DRAIN_SHARE` of `--drain-timeout` to end (their lines are written);
then the rest are cancelled through the kill ladder (within the remainder)
and are not written, so `--resume` runs them again. A second signal cancels
at once. The exit code is 130.

`--journal DIR`: each sample (each epoch, each attempt) is a journaled run
named by `Unit.cassette`, the same in every invocation (agentd.tree.journaling,
under the root `0`). `--resume` hands the journal of each sample it runs again
to the tree, so that sample's spawn resumes it: its recorded steps are
answered from the journal (told to the broker, `SampleBroker.replayed`) and
it goes on live from the exchange in flight. A sample's journal is deleted
once its line is written (docs/batch.md, "Journal and resume").
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import msgspec

from agentd.agent.subagents import HandleState, Refusal, SpawnRequest
from agentd.app.compose import metered_provider, open_journaling, open_toolbox
from agentd.app.run import new_run_id
from agentd.batch.broker import SampleBroker
from agentd.batch.files import ResultLine, ResultsFile, TaskLine
from agentd.batch.progress import progress
from agentd.batch.score import (
    Scorer,
    contract_met,
    score_line,
    summarize,
)
from agentd.batch.trajectories import SampleTrajectories
from agentd.config.model import DEFAULT_SCORER_TIMEOUT, Config
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
from agentd.journal.exchange import AnswerBounds
from agentd.journal.store import Broken, Loaded, run_path
from agentd.log import configure, log
from agentd.output import Usage
from agentd.tree.journaling import Journaling
from agentd.tree.supervisor import ROOT, Supervisor

DRAIN_SHARE = 0.5  # of --drain-timeout, for the samples in flight at a signal to end


class BatchOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Where one `agentd batch` writes, what it replays and how it scores (its
    limits are `Config`'s: `parallel`, `batch_token_ceiling`, `progress_interval`,
    ...; the tasks are read and selected, the results file opened, locked and
    read for `--resume` before it runs, by the CLI)."""

    out: str
    record: str | None = None  # a directory: one cassette per sample (agentd.batch.cassette)
    replay: str | None = None  # a directory of cassettes: no network at all
    trajectories: str | None = None  # a directory: one ATIF trajectory per sample
    log_file: str | None = None  # where the CLI sent the log (None: stderr)
    epochs: int = 1
    scorers: tuple[Scorer, ...] = ()
    scorer_timeout: float = DEFAULT_SCORER_TIMEOUT
    retry_errors: int = 0  # re-runs of a sample that ended in `error`, within the run
    retry_failed: bool = False  # with --resume: re-run `failed` lines too
    resume: bool = False  # --resume: with --journal, interrupted samples resume from it


class Unit(NamedTuple):
    """One run to make: a task in one epoch (1-based)."""

    task: TaskLine
    epoch: int

    @property
    def cassette(self) -> str:
        """Its cassette's name (and its journal's): the id, and `#N` for an epoch
        past the first. The same in every invocation of the batch."""
        return unit_name(self.task.id, self.epoch)


def unit_name(sample_id: str, epoch: int) -> str:
    """A (task, epoch)'s cassette and journal name (`Unit.cassette`)."""
    return sample_id if epoch == 1 else f"{sample_id}#{epoch}"


def plan(tasks: list[TaskLine], opts: BatchOptions,
         finished: dict[tuple[str, int], ResultLine]) -> list[Unit]:
    """Every (task, epoch) to run, epoch by epoch: all but those the results file
    already ended (an `error` is run again; a `failed` one with --retry-failed)."""
    again = {"error", "failed"} if opts.retry_failed else {"error"}
    return [Unit(t, e) for e in range(1, opts.epochs + 1) for t in tasks
            if (line := finished.get((t.id, e))) is None or line.status in again]


def exit_code(lines: Iterable[ResultLine]) -> ExitCode:
    """The batch's code from the final line of every selected run: 5 if any ended
    in `error` (an infrastructure fault: `--resume` runs it again), 1 if any other
    did not complete or broke its output_contract, else 0."""
    code = ExitCode.COMPLETED
    for line in lines:
        if line.status == "error":
            return ExitCode.INTELLIGENCE
        if line.status != "completed" or line.contract_met is False:
            code = ExitCode.FAILED
    return code


# why() of agentd.tree.child_run and the spawn's own words: a child that died (or
# never started) without its result -- an infrastructure fault, not the agent's
_DIED = ("protocol error:", "killed by signal", "exited with code", "spawn failed:",
         "no answer to child/configure")


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
        self.scores: list[float] = []  # the samples' scores so far, for the live mean
        self.interrupted: int | None = None  # set at a signal: the samples not run
        self.started = time.monotonic()

    @property
    def done(self) -> int:
        return sum(self.by_status.values())

    @property
    def mean_score(self) -> float | None:
        return sum(self.scores) / len(self.scores) if self.scores else None

    def ended(self, status: str, seconds: float, tokens: int) -> None:
        self.by_status[status] = self.by_status.get(status, 0) + 1
        self.durations.append(seconds)
        self.tokens += tokens

    def summary(self) -> dict[str, Any]:
        d = sorted(self.durations)

        def pct(p: float) -> float | None:
            return round(d[min(int(p * len(d)), len(d) - 1)], 3) if d else None

        by_status = dict(self.by_status)
        if self.interrupted is not None:
            by_status["interrupted"] = self.interrupted
        return {"tasks": self.total, "skipped": self.skipped, "by_status": by_status,
                "tokens": self.tokens, "wall_s": round(time.monotonic() - self.started, 3),
                "sample_p50_s": pct(0.50), "sample_p95_s": pct(0.95),
                "max_in_flight": self.max_running}


class Batch:
    """One batch run over an open Supervisor (see the module doc)."""

    def __init__(self, config: Config, opts: BatchOptions, *, run_id: str, sup: Supervisor,
                 broker: SampleBroker, results: ResultsFile, stats: Stats) -> None:
        self.config = config
        self.opts = opts
        self.run_id = run_id
        self.sup = sup
        self.broker = broker
        self.results = results
        self.stats = stats
        self.final = dict(results.finished)  # (id, epoch) -> its last line so far
        self.stopping = False  # a signal: no new sample starts
        self.interrupted = False
        self._cancel_now = asyncio.Event()  # the drain's grace is over: cancel in flight
        self._waiting: dict[str, asyncio.Future[HandleState]] = {}
        self.servers = frozenset(s.name for s in (*config.mcp, *config.a2a_peers))
        settings = {"max_steps": config.max_steps, "token_ceiling": config.token_ceiling,
                    "deadline": config.deadline, "stream": config.intelligence_stream}
        self.settings = {k: v for k, v in settings.items() if v is not None}
        sup.on_terminal(self._terminal)
        self.trajectories: SampleTrajectories | None = None  # --trajectories
        self.journaling: Journaling | None = sup.journaling  # --journal
        self._broken: dict[str, Broken] = {}  # a sample's journal that cannot be resumed

    async def resume_journals(self, todo: list[Unit]) -> None:
        """`--journal --resume`: what the last invocation left. A planned sample's
        journal is resumed by its spawn (its recorded steps answered from it, even
        when it ended without its line written: then it replays whole); a broken one
        is that sample's `failed` line; the journal of a sample whose line is written
        (the batch stopped between the line and the delete) is deleted. Nothing is
        restored into the tree: a handle `0.k` of another process means nothing."""
        j = self.journaling
        assert j is not None
        planned = {u.cassette for u in todo}
        done = {unit_name(i, e) for (i, e) in self.results.finished} - planned
        by_path = {run_path(j.journal.runs_dir, name): name for name in planned | done}
        for item in await j.journal.load(ended_steps=True):
            name = item.record.name if item.record is not None else by_path.get(item.path)
            if name in done:
                await j.journal.discard(item.path)
            elif name in planned and isinstance(item, Broken):
                self._broken[name] = item
            elif name in planned and isinstance(item, Loaded):
                j.expect(item)
                log.info("batch.sample.resumable", sample=name, steps=len(item.steps),
                         ended=item.record.status if item.record.terminal else None)

    def _terminal(self, state: HandleState) -> None:
        fut = self._waiting.pop(state.handle, None)
        if fut is not None and not fut.done():
            fut.set_result(state)

    async def run(self, todo: list[Unit]) -> None:
        units = iter(todo)
        async with asyncio.TaskGroup() as tg:
            for n in range(min(self.config.parallel, len(todo))):
                tg.create_task(self._worker(units), name=f"batch-worker-{n}")

    async def _worker(self, units: Iterator[Unit]) -> None:
        while not self.stopping and (unit := next(units, None)) is not None:
            retries = 0
            while (ran := await self._sample(unit, retries)) is not None:
                line, handle = ran
                if line.status != "error" or retries >= self.opts.retry_errors \
                        or self.stopping:
                    await self._write(unit, line, handle)
                    break
                if self.trajectories is not None and handle is not None:
                    self.trajectories.drop(handle)  # only the last attempt's is written
                retries += 1
                log.warning("batch.sample.retry", id=unit.task.id, epoch=unit.epoch,
                            retry=retries, error=line.error)

    async def _sample(self, unit: Unit, retries: int) -> tuple[ResultLine, str | None] | None:
        """One run of `unit`: its result line (unscored) and its handle (None when it
        was refused), or None if it was cancelled by an interruption (not written:
        `--resume` runs it again)."""
        task = unit.task
        scope = tuple(task.tool_scope) if task.tool_scope is not None else None
        req = SpawnRequest(instruction=task.instruction, output_contract=task.output_contract,
                           tool_scope=scope, mode="async")
        began = time.monotonic()
        broken = self._broken.get(unit.cassette)
        if broken is not None:  # its journal cannot be trusted: not run, the line says why
            return self._line(unit, "failed", False, None, 0, Usage(), f"{self.run_id}/-",
                              f"--journal {self.config.journal}: the journal of sample "
                              f"{unit.cassette!r} cannot be resumed: {broken.reason} "
                              "(set aside as *.broken; --resume --retry-failed runs it "
                              "again from its start)", began, retries), None
        # the cassette is read before the child exists (its first request finds it),
        # off the loop: a slow disk never holds the batch's signals or other samples
        loaded = None if self.broker.replay_dir is None else \
            await asyncio.to_thread(self.broker.load, unit.cassette)
        servers = frozenset(scope) if scope is not None else self.servers
        begun: list[str] = []

        def admitted(handle: str) -> None:  # the tally is there for the child's first request
            begun.append(handle)
            self.broker.begin(handle, unit.cassette, servers, loaded)

        state = await self.sup.spawn(ROOT, req, admitted=admitted, name=unit.cassette)
        if isinstance(state, Refusal):  # past the batch's ceiling: budget_exhausted, not failed
            for handle in begun:  # admitted, then refused at start (a machine limit)
                self.broker.end(handle)
                if self.journaling is not None:
                    await self.journaling.forget(handle)
            ledger = self.sup.ledger
            spent = ledger.ceiling is not None and ledger.spent >= ledger.ceiling
            return self._line(unit, "budget_exhausted" if spent else "failed", spent, None, 0,
                              Usage(), f"{self.run_id}/-", state.text, began, retries), None
        handle = state.handle
        stats = self.stats
        stats.running += 1
        stats.max_running = max(stats.max_running, stats.running)
        log.info("batch.sample.start", id=task.id, epoch=unit.epoch, handle=handle)
        try:
            if not state.done:
                fut = asyncio.get_running_loop().create_future()
                self._waiting[handle] = fut
                state = await self._until_ended(handle, fut)
        finally:
            stats.running -= 1
            tally = self.broker.end(handle)
        if self.interrupted and state.status == "cancelled":
            log.info("batch.sample.dropped", id=task.id, epoch=unit.epoch, handle=handle,
                     reason="interrupted: --resume runs it again")
            if self.trajectories is not None:
                self.trajectories.drop(handle)
            return None
        error = None
        status = state.status
        run = self.sup.registry.get(handle)
        reason = run.reason if run is not None else None
        if tally.failure is not None:  # a replay that diverged, or a bad cassette
            status, error = "failed", tally.failure
        elif status == "failed" and (tally.fault is not None
                                     or (reason or "").startswith(_DIED)):
            status, error = "error", tally.fault or reason
        elif status != "completed":
            res = state.result
            error = str(res["error"]) if isinstance(res, dict) and "error" in res else status
        return self._line(unit, status, state.partial, state.result, tally.steps,
                          tally.usage, f"{self.run_id}/{handle}", error, began, retries), handle

    def _line(self, unit: Unit, status: str, partial: bool, result: Any, steps: int,
              usage: Usage, run_id: str, error: str | None, began: float,
              retries: int) -> ResultLine:
        task = unit.task
        return ResultLine(
            id=task.id, status=status, partial=partial, result=result, steps=steps,
            usage=usage, run_id=run_id, error=error, epoch=unit.epoch,
            wall_ms=round((time.monotonic() - began) * 1000), model=self.config.model,
            settings=self.settings or None,
            contract_met=contract_met(task.output_contract, status, result),
            retries=retries, metadata=task.metadata)

    async def _write(self, unit: Unit, line: ResultLine, handle: str | None) -> None:
        if self.opts.scorers and line.status != "error":
            line = await score_line(line, unit.task, self.opts.scorers,
                                    self.opts.scorer_timeout)
        self.results.write(line)
        self.final[line.key] = line
        await self._journal_done(unit, handle)
        self.stats.ended(line.status, (line.wall_ms or 0) / 1000, line.usage.total_tokens)
        if line.scores:  # the live display's mean: a sample's scorers averaged
            self.stats.scores.append(sum(line.scores.values()) / len(line.scores))
        log.info("batch.sample.end", id=line.id, epoch=line.epoch, status=line.status,
                 steps=line.steps, tokens=line.usage.total_tokens,
                 seconds=round((line.wall_ms or 0) / 1000, 3),
                 scores=line.scores, contract_met=line.contract_met)
        if self.trajectories is not None:
            self.trajectories.write(unit.cassette, unit.task.instruction, handle,
                                    session_id=f"{self.run_id}/{handle or '-'}",
                                    status=line.status, error=line.error)

    async def _journal_done(self, unit: Unit, handle: str | None) -> None:
        """The line is written: the sample's journal is over (deleted; a broken one
        set aside as `*.broken` for the operator, never read again)."""
        j = self.journaling
        if j is None:
            return
        broken = self._broken.pop(unit.cassette, None)
        if broken is not None:
            await j.journal.set_aside(broken.path)
        elif handle is not None:
            await j.forget(handle)

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
            await self.sup.cancel(ROOT, handle)
        return await fut

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
    it); returns the exit code (0, 1, 5, 130 by the results' final state, see
    `exit_code`; 5 or 6 before any sample)."""
    run_id = new_run_id()
    configure(fmt=config.log_format, run_id=run_id, level=config.log_level or "info")
    todo = plan(tasks, opts, results.finished)
    runs = len(tasks) * opts.epochs
    stats = Stats(runs, runs - len(todo))
    log.info("batch.start", tasks=len(tasks), epochs=opts.epochs, skipped=stats.skipped,
             parallel=config.parallel, servers=[s.name for s in config.mcp],
             batch_token_ceiling=config.batch_token_ceiling,
             scorers=[s.name for s in opts.scorers])
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
                                      observation=config.mcp_max_bytes),
                                  model=config.model, sampling=config.sampling.fields())
            journaling = None
            if config.journal is not None:  # each sample journaled (docs/batch.md)
                journaling = open_journaling(config, ROOT, toolbox)
                journaling.replayed = broker.replayed
                stack.push_async_callback(journaling.aclose)  # after the Supervisor
            sup = await stack.enter_async_context(Supervisor(
                _supervisor_config(config), run_id=run_id, broker=broker,
                ledger=metered.ledger, journaling=journaling))
            batch = Batch(config, opts, run_id=run_id, sup=sup, broker=broker,
                          results=results, stats=stats)
            if journaling is not None and opts.resume:
                await batch.resume_journals(todo)
            if opts.trajectories is not None:  # every sample's subtree records its runs
                sup.trajectories = {}
                batch.trajectories = SampleTrajectories(opts.trajectories, sup.trajectories,
                                                        model=config.model)
            holder.append(batch)
            if signalled:  # a signal during start-up
                batch.interrupt(now=True)
            async with progress(stats, config.progress_interval, out=opts.out,
                                log_file=opts.log_file):
                await batch.run(todo)
                if signalled:
                    stats.interrupted = len(todo) - stats.done
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
    final = [line for t in tasks for e in range(1, opts.epochs + 1)
             if (line := batch.final.get((t.id, e))) is not None]
    summary["contract_broken"] = sum(line.contract_met is False for line in final)
    if opts.scorers:
        summary["scores"] = summarize(msgspec.to_builtins(line) for line in final)
    if signalled:
        log.info("batch.end", exit_code=int(ExitCode.INTERRUPTED), **summary)
        return int(ExitCode.INTERRUPTED)
    code = exit_code(final)
    log.info("batch.end", exit_code=int(code), **summary)
    return int(code)
