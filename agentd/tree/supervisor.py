"""The supervisor: the ONE spawn chokepoint and the owner of every subagent process.

`Supervisor` implements `agentd.agent.subagents.SubagentBackend`.  The in-loop
self-tools of the root agent (caller `"0"`), the self-MCP's `subagent.*` tools
(caller `"served"`), and every subagent's own self-tools (arriving as `tree/*`
requests on that child's control wire, so the caller is the pipe's handle,
never a claim) all call the same `spawn()`, which asks admission
(`agentd.tree.admission`, pure: caps, scope narrowing, minting; its refusals
are returned as a `Refusal`, shown as an `isError` tool result), puts
the new `ChildRun` (`agentd.tree.child_run`) in the tree's registry
(`agentd.tree.registry`, which owns the one terminal retention) and starts its
drive in the supervisor's TaskGroup.  Who may touch a handle is the one rule
of `agentd.tree.ownership`.

Processes are flat: every subagent, at any depth, is a child process of the
root agentd (or of its forkserver), so caps, handles and cancellation live in
one place; a subtree is the set of handles under a prefix.  Everything is
structured: each run is a task in the supervisor's TaskGroup, a node's end
cancels its live non-detached descendants, and `aclose()` walks the kill
ladder over every live child within `--drain-timeout`.

The supervisor composes nothing: its `broker` (the provider, the Toolbox, one
ledger: `agentd.tree.broker`) is built by its owner (`agentd.app.compose`),
and so is its `journaling` (`--journal`: agentd.tree.journaling), with which
every brokered request of a journaled run passes through its journal and the
Supervisor holds a `Durable` (agentd.tree.durable: the resume at start and
the drain that suspends instead of ending).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from agentd.agent.subagents import (
    TERMINAL,
    HandleState,
    Refusal,
    SpawnRequest,
    Unknown,
    top_of,
    within,
)
from agentd.child.channel import Channel, ChannelClosed
from agentd.child.control import (
    CHILD_ERROR,
    IO_FAULT,
    IO_OVERSIZE,
    IO_SCOPE,
    SPAWN_REFUSED,
    UNKNOWN_HANDLE,
    ChildConfig,
    Incoming,
    IoCall,
    IoComplete,
    IoCompletion,
    MessageParams,
    Oversize,
    RunOutcome,
    answer_limit,
)
from agentd.config.model import Config
from agentd.errors import RPCError, TreeError
from agentd.intelligence.base import model_label
from agentd.intelligence.ledger import Ledger
from agentd.log import log
from agentd.obs import health, metrics, trace
from agentd.output import Usage
from agentd.trajectory.atif import Trajectory
from agentd.tree.admission import Admitted, CallerView, TreeView, admit
from agentd.tree.broker import Broker
from agentd.tree.child_run import ChildRun, until_first
from agentd.tree.durable import Durable
from agentd.tree.forkserver import ForkserverSpawner, available
from agentd.tree.io_words import io_attrs, io_event, io_kind, io_what
from agentd.tree.journaling import Journaling
from agentd.tree.ownership import Owners
from agentd.tree.procs import ChildProcess, ExecSpawner, raise_fd_limit
from agentd.tree.registry import DEFAULT_KEEP_TERMINAL, DEFAULT_TERMINAL_TTL, Registry, Retention
from agentd.wire.jsonrpc import ErrorObject

__all__ = ["ROOT", "SERVED", "Supervisor"]

ROOT = "0"
SERVED = "served"
CONFIGURE_TIMEOUT = 60.0  # the least time a child gets to answer child/configure


class Supervisor:
    """The subagent backend of one agentd process (see module doc).

    Use as `async with Supervisor(config, broker=...) as sup:`; hand `sup` to the
    self-MCP (caller "served") and to the root loop's self-tools (caller "0").
    `spawn` is `config.spawn` unless given ("exec" or "forkserver").  The
    ledger is the broker's provider's unless given.
    """

    def __init__(self, config: Config, *, broker: Broker, ledger: Ledger | None = None,
                 scope: Iterable[str] | None = None, spawn: str | None = None,
                 run_id: str = "", terminal_ttl: float = DEFAULT_TERMINAL_TTL,
                 keep_terminal: int = DEFAULT_KEEP_TERMINAL,
                 max_frame: int | None = None, journaling: Journaling | None = None) -> None:
        from agentd_native import MAX_FRAME

        self.config = config
        self.run_id = run_id
        self.max_frame = max_frame or MAX_FRAME
        root_scope = frozenset(scope if scope is not None else (
            s.name for s in (*config.mcp, *config.a2a_peers)))  # A2A peers: docs/a2a.md
        self.registry = Registry((ChildRun(ROOT, "", root_scope, "root", None),
                                  ChildRun(SERVED, "", root_scope, "root", None)),
                                 Retention(terminal_ttl, keep_terminal))
        mode = spawn or config.spawn
        self._spawner: ExecSpawner | ForkserverSpawner = ExecSpawner()
        if mode == "forkserver":
            if available():
                self._spawner = ForkserverSpawner()
            else:
                log.warning("subagent.forkserver_unavailable", fallback="exec",
                            reason=f"not supported on {sys.platform}")
        # Brokered I/O (agentd.tree.broker): children's intelligence and MCP calls are
        # made here, on the run's pooled provider and Toolbox, charged to one ledger.
        self.broker = broker
        self.ledger: Ledger = ledger if ledger is not None else broker.intelligence.ledger
        self.fallbacks = 0  # forkserver -> exec (at most once)
        # Set (to a dict) by whoever writes trajectories: every child then records
        # its run and its answer carries it here (agentd.trajectory).
        self.trajectories: dict[str, Trajectory] | None = None
        # A started child answers its first frame before its heavy imports, but under
        # a burst of exec spawns it may wait for a CPU: be patient, yet bounded.
        self.configure_within = max(config.init_timeout, CONFIGURE_TIMEOUT)
        self._tg: asyncio.TaskGroup | None = None
        self._closing = False
        self._model: str | None = None  # the metrics' model label, at the first brokered step
        self._unobserve: list[Callable[[], None]] = []
        self.log = log.bind(component="supervisor")
        # served.N -> the principal that spawned it (its whole subtree is theirs),
        # forgotten with the run's eviction: the one rule's claims
        self.owners = Owners()
        self.registry.on_evicted(self._forget_owner)
        # a serving worker's own --instruction: it frames every run of the served
        # subtree (docs/server.md); set by its owner (agentd.app.compose)
        self.framing: str | None = None
        # --journal: the top runs under `journaling.under` are journaled and resumed
        # (agentd.tree.journaling); built and closed by the owner
        self.journaling = journaling
        self.durable: Durable | None = None  # its resume and drain, with a journal
        if journaling is not None:
            self.registry.on_evicted(self._journal_forget)
            self.durable = Durable(journaling, self.registry, self.owners, self.log, host=self,
                                   tasks=self._task, close=self.close_spawns, turn=self._turn)

    # ------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Supervisor:
        raise_fd_limit(4 * self.config.max_subagents + 256)
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        try:
            await self._spawner.start()
        except BaseException:
            await self._tg.__aexit__(None, None, None)
            raise
        self.broker.notify = self._notify_update
        self._unobserve = [
            metrics.SUBAGENTS_LIVE.source(lambda: {(): self.registry.live}),
            health.add_check("forkserver", self._spawner.down)]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.aclose()
        finally:
            for run in self.registry.runs.values():  # brokered calls nobody will read any more
                for task in list(run.io):
                    task.cancel()
            for remove in self._unobserve:
                remove()
            tg, self._tg = self._tg, None
            if tg is not None:
                await tg.__aexit__(*exc)
            await self._spawner.aclose()

    async def aclose(self) -> None:
        """Drain: the kill ladder over every live subagent, within --drain-timeout."""
        self._closing = True
        live = [r for r in self.registry.runs.values() if r.live and r.request is not None]
        for run in live:
            run.request_stop("cancelled")
        if live:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.drain_timeout + 5.0):
                    await asyncio.gather(*(r.done.wait() for r in live))

    def _task(self, work: Any, name: str) -> None:
        assert self._tg is not None, "use the Supervisor as an async context manager"
        self._tg.create_task(work, name=name)

    def close_spawns(self) -> None:
        """Refuse every spawn from now on (`spawn refused: shutting down`): a drain."""
        self._closing = True

    # ------------------------------------------------------------- backend
    async def spawn(self, caller: str, request: SpawnRequest, *,
                    principal: str | None = None,
                    admitted: Callable[[str], None] | None = None,
                    name: str | None = None) -> HandleState | Refusal:
        """``admitted`` is told the handle before the child exists: an owner that keeps
        per-run state for the child's I/O (the batch's broker) has it in place before
        the child's first request, which can come before this returns. ``name`` is
        a journaled run's name in the journal (default: its handle); a run of that
        name an earlier process left running is resumed (a batch's sample)."""
        run = self._admit(caller, request, principal)
        if isinstance(run, Refusal):
            return run
        j = self.journaling
        if j is not None and j.journals(caller):
            # durably created before the spawn is answered (docs/operations.md)
            try:
                await j.begin(run.handle, name or run.handle, request, principal)
            except TreeError as exc:  # a run that cannot be journaled is not started
                self.refuse(run, "journal", str(exc))
                return Refusal(run.refusal or str(exc))
        if admitted is not None:
            admitted(run.handle)
        assert self._tg is not None, "use the Supervisor as an async context manager"
        # the spawn's span lives until the subagent ends; its child runs under it
        attrs: dict[str, Any] = {"agentd.handle": run.handle, "agentd.depth": run.depth,
                                 "agentd.mode": run.mode, "agentd.caller": caller}
        run.span = trace.start("agentd.spawn", **attrs)
        self._tg.create_task(run.drive(self), name=f"subagent {run.handle}")
        try:
            # its process started (or refused for a machine limit: refuse)
            await until_first(run.started, run.done)
            if request.mode == "sync" and run.refusal is None:
                await run.done.wait()
        except asyncio.CancelledError:  # the caller gave up: so does its child
            run.request_stop("cancelled")
            raise
        return Refusal(run.refusal) if run.refusal is not None else run.state

    async def send(self, caller: str, handle: str, message: str, *,
                   principal: str | None = None) -> HandleState | Unknown:
        run = self._owned(caller, handle, principal)
        if run is None:
            return Unknown(handle)
        if run.mode != "warm":
            return Unknown(handle, "is not a warm session")
        if self.journaling is not None and run.live:  # a resumed session is sent it again
            await self.journaling.message(handle, message)
        return await self._turn(run, message)

    async def _turn(self, run: ChildRun, message: str, *, locked: bool = False) -> HandleState:
        """One turn of the warm session `run`: its state after it (`locked`: the
        caller holds the session's turn lock already)."""
        async with contextlib.nullcontext() if locked else run.turn_lock:
            await run.idle.wait()
            if not run.live or run.proc is None:
                return run.state
            run.idle.clear()
            try:
                outcome = await run.until_stopped(
                    run.proc.channel.call("child/send", MessageParams(
                        message, trace.current_traceparent())))
            except ChannelClosed as exc:
                outcome = RunOutcome(status="failed", reason=str(exc))
            except RPCError as exc:  # the child's answer: its text, as before the one type
                outcome = RunOutcome(status="failed", reason=exc.message)
            finally:
                run.idle.set()
        if outcome is None:
            return run.state
        if outcome.status != "completed":
            run.request_stop(outcome.status)
        self.charge(run, outcome.tokens)
        self.keep_trajectory(run, outcome)
        run.state.result = outcome.result
        run.state.partial = outcome.partial
        turn = HandleState(handle=run.handle, status=run.state.status,
                           partial=outcome.partial, result=outcome.result)
        turn.started, turn.turn = run.state.started, True
        return turn

    def status(self, caller: str, handle: str, *,
               principal: str | None = None) -> HandleState | Unknown:
        self.registry.evict()
        run = self._owned(caller, handle, principal)
        return Unknown(handle) if run is None else run.state

    async def cancel(self, caller: str, handle: str, *,
                     principal: str | None = None) -> HandleState | Unknown:
        run = self._owned(caller, handle, principal)
        if run is None:
            return Unknown(handle)
        subtree = self.registry.subtree(handle)
        for r in subtree:
            r.request_stop("cancelled")
        if subtree:
            await asyncio.gather(*(r.done.wait() for r in subtree))
        return run.state

    def _owned(self, caller: str, handle: str, principal: str | None) -> ChildRun | None:
        """The run of `handle` if the one ownership rule lets `caller` touch it."""
        if not self.owners.allows(caller, handle, principal):
            return None
        return self.registry.run(handle)

    def _forget_owner(self, handle: str) -> None:
        if handle == top_of(handle):  # a served run's claim goes with the run itself
            self.owners.forget(handle)

    def on_terminal(self, callback: Callable[[HandleState], None]) -> None:
        self.registry.on_terminal(callback)

    def on_evicted(self, callback: Callable[[str], None]) -> None:
        self.registry.on_evicted(callback)

    def retained(self, handle: str) -> float | None:
        return self.registry.retained(handle)

    def counts(self) -> dict[str, int]:
        return self.registry.counts()

    # ------------------------------------------------------------ extras
    @property
    def tree_tokens(self) -> int:
        """The tree's tokens: the ledger's, charged as each intelligence call is made."""
        return self.ledger.total

    def served_usage(self) -> tuple[int, Usage]:
        """The served subtree's steps and usage, by the ledger (kept past eviction)."""
        tally = self.ledger.tally(SERVED)
        return tally.steps, tally.usage

    def snapshot(self, principal: str | None = None) -> list[dict[str, Any]]:
        """Every known handle (live, or terminal and not yet evicted), for the live
        view (`agent://status` `tree`, `agentd top`): names and numbers only; with
        `principal`, of the served runs only that principal's."""
        rows = self.registry.snapshot()
        if principal is None:
            return rows
        return [r for r in rows if not within(r["handle"], SERVED)
                or self.owners.allows(SERVED, r["handle"], principal)]

    @property
    def spawner(self) -> ExecSpawner | ForkserverSpawner:
        """The spawner in use (forkserver, or exec after a fallback): diagnostics, tests."""
        return self._spawner

    def live_pids(self) -> list[int]:
        return [r.proc.pid for r in self.registry.runs.values()
                if r.proc is not None and r.proc.returncode is None]

    def process(self, handle: str) -> ChildProcess | None:
        """The live or last process of a handle (tests, benchmarks, diagnostics)."""
        run = self.registry.get(handle)
        return run.proc if run is not None else None

    def timing(self, handle: str) -> tuple[float, float | None]:
        """(spawned_at, first_frame) monotonic times of a handle (benchmarks)."""
        run = self.registry.run(handle)
        assert run is not None, f"no subagent {handle}"
        return run.spawned_at, run.first_frame

    # ----------------------------------------------------------- chokepoint
    def _admit(self, caller: str, request: SpawnRequest,
               principal: str | None) -> ChildRun | Refusal:
        cfg = self.config
        reg = self.registry
        parent = reg.get(caller)
        view = None if parent is None else CallerView(
            handle=caller, running=parent.request is None or parent.live, scope=parent.scope,
            live_children=len(parent.live_children), minted=parent.minted)
        verdict = admit(TreeView(max_depth=cfg.max_depth, max_children=cfg.max_children,
                                 max_subagents=cfg.max_subagents, live=reg.live,
                                 tokens=self.tree_tokens, ceiling=self.ledger.ceiling,
                                 closing=self._closing), caller, view, request)
        if not isinstance(verdict, Admitted):
            reg.refused()
            metrics.REFUSALS.inc(verdict.cap)
            self.log.warning("subagent.refused", caller=caller, reason=verdict.text)
            return Refusal(verdict.text)
        reg.evict()
        run = ChildRun(verdict.handle, caller, verdict.scope, request.mode, request)
        reg.add(run)
        if principal is not None:  # a peer's run: theirs from its admission on
            self.owners.claim(run.handle, principal)
        metrics.SUBAGENTS.inc("spawned")
        return run

    def child_config(self, run: ChildRun) -> ChildConfig:
        """The child's first frame (agentd.tree.child_run.RunHost)."""
        cfg = self.config
        req = run.request
        assert req is not None
        # the tree's ceiling is the ledger's; a batch's samples also have their own
        budget = cfg.token_ceiling if (tree := self.ledger.ceiling) is None else min(
            max(tree - self.tree_tokens, 0), cfg.token_ceiling or tree)
        # Brokered: no server spec, no gateway URL, no model name, no secret goes down;
        # only the catalogue of the servers in scope (the parent enforces the scope).
        limits = msgspec.structs.asdict(cfg.limits) | {"token_ceiling": budget}
        return ChildConfig(
            **limits,
            handle=run.handle, depth=run.depth, output_contract=req.output_contract,
            mode=run.mode, catalogue=self.broker.catalogue(run.scope),
            max_frame=self.max_frame, log_format="json",
            log_level=cfg.log_level or "info",
            run_id=self.run_id, tracing=trace.exporting,
            trajectory=self.trajectories is not None,
            framing=self.framing if run.handle.startswith(SERVED + ".") else None)

    # ------------------------------------------------------------- one run
    async def start(self, run: ChildRun, env: dict[str, str] | None,
                    hello: Callable[[Channel], None]) -> ChildProcess:
        """Start the child (agentd.tree.child_run.RunHost); a forkserver that cannot
        start (its spawner's TreeError; any other failure fails this run only) means
        exec from then on."""
        spawner = self._spawner
        try:
            proc = await spawner.spawn(run.handle, lambda ev: self._incoming(run, ev),
                                       max_frame=self.max_frame, env=env, hello=hello)
        except TreeError as exc:
            if self._spawner is spawner:  # once, however many spawns were waiting on it
                self.fallbacks += 1
                self.log.warning("subagent.forkserver_unavailable", fallback="exec",
                                 reason=str(exc)[:300])
                self._spawner = ExecSpawner()
                with contextlib.suppress(Exception):
                    await spawner.aclose()
            proc = await self._spawner.spawn(run.handle, lambda ev: self._incoming(run, ev),
                                             max_frame=self.max_frame, env=env, hello=hello)
        self.log.info("subagent.spawn", handle=run.handle, pid=proc.pid, depth=run.depth,
                      mode=run.mode, scope=sorted(run.scope), spawn=self._spawner.name)
        return proc

    def charge(self, run: ChildRun, tokens: int) -> None:
        """A child's own count (progress, result): the ledger has it already when its
        calls were brokered; `report` never counts the same tokens twice."""
        run.tokens = max(run.tokens, tokens)
        self.ledger.report(run.handle, tokens)

    def keep_trajectory(self, run: ChildRun, outcome: RunOutcome) -> None:
        """A child's trajectory (agentd.trajectory), by handle, when `trajectories`
        is set: whoever set it (a CLI run's recorder, a batch) nests and writes them.
        A warm session's later turn replaces its earlier one (it holds them all)."""
        if self.trajectories is not None and outcome.trajectory is not msgspec.UNSET:
            self.trajectories[run.handle] = outcome.trajectory

    def refuse(self, run: ChildRun, cap: str, words: str) -> None:
        """`run` could not start: the machine ran out (agentd.tree.procs.LIMITS), or
        its journal could not be made (`--journal`). Its spawn is refused and it is withdrawn: it is reported neither completed nor
        failed, and the runs alive go on."""
        run.refusal = f"spawn refused: {words}; handle {run.handle} not started"
        self.registry.withdraw(run)
        self.registry.refused()
        metrics.REFUSALS.inc(cap)
        self.log.warning("subagent.refused", caller=run.parent, reason=run.refusal)
        run.span.set(**{"agentd.status": "refused"})
        run.span.end()
        run.done.set()

    def finish(self, run: ChildRun, status: str, *, partial: bool = False,
               result: Any = None, reason: str | None = None) -> None:
        """Make `run` terminal: once, as soon as its end is known (the process may
        still be tearing down; agentd.tree.child_run)."""
        if not run.live:
            return
        if self.journaling is not None and self.journaling.suspends(run.handle):
            self._suspended(run)
            return
        state = run.state
        state.status = status if status in TERMINAL else "failed"
        state.partial = partial
        state.result = result
        run.reason = reason
        if state.status == "failed" and result is None and reason:
            state.result = {"error": reason}
        run.finished_at = time.monotonic()
        run.idle.set()  # a send waiting for the session sees it ended
        self.registry.ended(run)
        metrics.SUBAGENTS.inc(state.status)
        run.last = state.status if not reason or state.status == "completed" \
            else f"{state.status}: {reason}"[:120]
        run.span.set(**{"agentd.status": state.status})
        run.span.end()
        parent = self.registry.get(run.parent)
        if parent is not None and parent.proc is not None and parent.live:
            parent.proc.channel.notify("child/terminal", state.on_wire())
        run.done.set()
        for task in list(run.io):  # its model/tool calls in flight: nobody will read them
            task.cancel()
        if self.broker.holds(run.handle) and self._tg is not None:
            self._tg.create_task(self.broker.drop(run.handle))
        if self.journaling is not None and self._tg is not None \
                and self.journaling.journals(run.parent):
            self._tg.create_task(self.journaling.ended(run.handle, state.status, state.result,
                                                       state.partial, reason))
        # structured: nothing outlives its run (detached subagents excepted); a run
        # that never spawned has no descendants (spares a scan of every run per exit)
        if run.minted:
            for h, r in list(self.registry.runs.items()):
                if within(h, run.handle) and r.live and r.mode != "detach":
                    r.request_stop("cancelled")
        self.registry.announce(state)

    def _suspended(self, run: ChildRun) -> None:
        """A journaled run stopped by the drain: its process goes, its journal stays
        running (the next process on the journal resumes it); nothing is announced."""
        run.last = "suspended"
        run.span.end()
        run.done.set()
        for task in list(run.io):
            task.cancel()

    def _journal_forget(self, handle: str) -> None:
        if self.journaling is not None and self._tg is not None \
                and self.journaling.top_of(handle) == handle:
            self._tg.create_task(self.journaling.forget(handle))

    # -------------------------------------------------- requests from children
    def _incoming(self, run: ChildRun, ev: Incoming) -> None:
        if ev.method == "child/progress":
            self.charge(run, ev.params.tokens)
            return
        if ev.method == "child/spans":
            trace.relay_in(ev.params.spans, **{"agentd.handle": run.handle})
            return
        if ev.method == "io/request":
            if self._tg is not None and run.live:
                task = self._tg.create_task(self._serve_io(run, ev))
                run.io.add(task)
                task.add_done_callback(run.io.discard)
            elif run.proc is not None:
                run.proc.channel.error(ev.id, IO_SCOPE, "the subagent is not running")
            return
        if self._tg is None or not run.live:
            if run.proc is not None:
                run.proc.channel.error(ev.id, SPAWN_REFUSED, "spawn refused: shutting down")
            return
        self._tg.create_task(self._serve_request(run, ev))

    async def _serve_io(self, run: ChildRun, ev: Incoming) -> None:
        """One brokered request of `run` (the pipe that asked), with its own scope."""
        if run.proc is None:  # it asked before its spawn call returned
            await run.started.wait()
        assert run.proc is not None
        ch = run.proc.channel

        p = ev.params
        traceparent = p.traceparent if isinstance(p, IoComplete | IoCall) else None
        try:
            with trace.span("agentd.io", parent=traceparent, kind="server",
                            **io_attrs(run.handle, p)) if trace.enabled else trace.NOSPAN:
                t0 = time.perf_counter()
                run.last = io_event(p, run.steps)
                result = await self._answer(run, p)
            if isinstance(result, IoCompletion):  # a subagent's loop step
                run.steps += 1
                calls = len(result.completion.tool_calls)
                run.last = f"step {run.steps}: " + (f"{calls} tool call(s)" if calls
                                                    else "answered")
                if self._model is None:  # the provider exists now: it just answered
                    self._model = model_label(self.broker.intelligence)
                metrics.turn(self._model, result.completion.usage, time.perf_counter() - t0)
            if isinstance(result, ErrorObject):  # a refusal, or a fault of the call
                ch.error(ev.id, result.code, result.message, result.data)
            elif (over := ch.answer(ev.id, result, answer_limit(self.max_frame))) is not None:
                self._oversize(run, ch, ev.id, p, over)
        except Exception as exc:  # a fault of ours or of a peer: the child gets an error
            self.log.error("subagent.io_error", handle=run.handle, error=repr(exc)[:300])
            ch.error(ev.id, IO_FAULT, f"{type(exc).__name__}: {exc}")

    async def _answer(self, run: ChildRun, req: Any) -> Any:
        """The broker's answer, through the run's journal when it has one."""
        if self.journaling is None:
            return await self.broker.serve(run.handle, run.scope, req)
        return await self.journaling.serve(
            run.handle, req, lambda: self.broker.serve(run.handle, run.scope, req))

    def _oversize(self, run: ChildRun, ch: Channel, rid: int | str | None,
                  req: msgspec.Struct, over: Oversize) -> None:
        """An answer too large for `run`'s wire is that run's fault: it is told so
        (IO_OVERSIZE) and fails with the bound named; nobody else is touched."""
        reason = over.words(io_what(req))
        self.log.warning("subagent.io_oversize", handle=run.handle, io=io_kind(req),
                         bytes=over.size, limit=over.limit)
        ch.error(rid, IO_OVERSIZE, reason)
        run.request_stop("failed", why=reason)

    def _notify_update(self, handle: str, update: Any) -> None:
        run = self.registry.get(handle)
        if run is not None and run.live and run.proc is not None:
            run.proc.channel.notify("io/updated", update)

    async def _serve_request(self, run: ChildRun, ev: Incoming) -> None:
        if run.proc is None:  # it asked before its spawn call returned
            await run.started.wait()
        proc = run.proc
        assert proc is not None
        ch = proc.channel
        p = ev.params
        try:
            state: HandleState | Refusal | Unknown
            if ev.method == "tree/spawn":
                with trace.span("agentd.tree.spawn", parent=p.traceparent, kind="server"):
                    state = await self.spawn(run.handle, SpawnRequest(
                        instruction=p.instruction, output_contract=p.output_contract,
                        tool_scope=p.tool_scope, mode=p.mode))
            elif ev.method == "tree/send":  # the pipe is the caller: its own subtree only
                state = await self.send(run.handle, p.handle, p.message)
            elif ev.method == "tree/status":
                state = self.status(run.handle, p.handle)
            else:
                state = await self.cancel(run.handle, p.handle)
            if isinstance(state, Refusal):
                ch.error(ev.id, SPAWN_REFUSED, state.text)
            elif isinstance(state, Unknown):
                ch.error(ev.id, UNKNOWN_HANDLE, state.words())
            else:
                ch.respond(ev.id, state.on_wire())
        except Exception as exc:
            self.log.error("subagent.request_error", handle=run.handle, method=ev.method,
                           error=repr(exc))
            ch.error(ev.id, CHILD_ERROR, f"{type(exc).__name__}: {exc}")
