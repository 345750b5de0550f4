"""A whole run: connect, serve, loop, print one result, exit with the right code.

`run(config)` is what `agentd --instruction ...` executes (the CLI has already
installed uvloop and validated the config). Order of events:

1. logging configured; the intelligence provider built (a bad `--intelligence`
   or playback file is exit 2, before any side effect);
2. the Toolbox connects every declared MCP server — a required server failing
   its handshake is exit 6, before the intelligence is called;
3. the subagent backend and, with `--serve-mcp`, the self-MCP are started;
4. the loop runs (task mode; reactive mode is the reactive daemon's, through the
   same `RunContext`), under `--deadline` (exit 4, in-flight calls cancelled so
   the client sends `notifications/cancelled`) and the step/token budgets
   (exit 3, partial result);
5. exactly one JSON object goes to stdout; the exit code is returned.

SIGINT/SIGTERM cancel the run and drain it (close MCP sessions, stop the
self-MCP and the tree) within `--drain-timeout`; the result says
`interrupted`, exit 130. A second signal stops waiting for the drain.

A subagent process composes its own turns (agentd.child.turn): it is always
brokered, so none of this composition is a child's.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from agentd.agent.loop import Actions, Loop, LoopState, Outcome, Tracer, run_task
from agentd.agent.selftools import SelfTools
from agentd.agent.subagents import SubagentBackend, Unavailable
from agentd.config.model import Config
from agentd.errors import ConfigError, classify, leaf_error
from agentd.exitcodes import EXIT_BY_STATUS, ExitCode
from agentd.intelligence import for_config
from agentd.intelligence.base import Intelligence, Message, user
from agentd.log import configure, log
from agentd.mcp.client.rules.faults import RequiredServerLost
from agentd.mcp.client.seams import AgentToolbox
from agentd.obs import health, metrics, trace
from agentd.output import RunResult, Usage, WakeLine, print_result
from agentd.trajectory.files import write_document
from agentd.trajectory.recorder import TrajectoryRecorder

if TYPE_CHECKING:  # imported where they are used: a child loads neither
    from agentd.a2a.peers import A2APeers
    from agentd.mcp.client.toolbox import Toolbox

# The share of --drain-timeout a reactive wake in flight at a signal may use to
# finish; the rest is for the kill ladder and closing connections.
REACTIVE_WAKE_SHARE = 0.5

def new_run_id() -> str:
    return uuid.uuid4().hex


class RunContext:
    """Everything one run holds; the hook for the reactive daemon and the tree.

    `task(instruction, history=...)` runs the loop once on a fresh conversation
    (a reactive wake passes what it read as extra `history` messages);
    `resume(message)` continues the last conversation (warm subagents).
    """

    def __init__(self, config: Config, *, run_id: str, handle: str,
                 intelligence: Intelligence, state: LoopState,
                 tracer: Tracer | None) -> None:
        self.config = config
        self.run_id = run_id
        self.handle = handle
        self.intelligence = intelligence
        self.state = state
        self.tracer = tracer
        self.toolbox: AgentToolbox | None = None
        self.backend: SubagentBackend = Unavailable()
        self.selftools: SelfTools | None = None
        self.budgets = config.limits
        self.on_step: Callable[[LoopState], None] | None = None
        self.spent: Callable[[], int] | None = None
        self.prior: list[Message] | None = None  # a warm session's conversation so far
        self.stop = asyncio.Event()  # set on SIGINT/SIGTERM: reactive mode drains itself
        self.stopped_at: float | None = None  # the loop's time of that signal
        self.on_stop: list[Callable[[], None]] = []  # told at that signal, at once
        self.interrupted = False
        self.scope: asyncio.Timeout | None = None
        self.served: Any = None  # the self-MCP's runner (`.url`) with --serve-mcp
        self.peers: A2APeers | None = None  # --a2a-peer: the A2A peers (a2a.delegate)
        self.stdout: Any = None  # where a reactive daemon writes its wake lines (run())

    def interrupt(self) -> None:
        """Cancel the run's work now (signals); the drain then runs normally."""
        self.interrupted = True
        scope = self.scope
        if scope is not None and not scope.expired():
            scope.reschedule(asyncio.get_running_loop().time())

    async def task(self, instruction: str, *, history: list[Message] | None = None
                   ) -> Outcome:
        """Run the loop once on a fresh conversation."""
        assert self.selftools is not None
        return await run_task(self.intelligence, self.toolbox, self.selftools,
                              instruction=instruction,
                              output_contract=self.config.output_contract,
                              budgets=self.budgets, state=self.state, tracer=self.tracer,
                              history=history or (), on_step=self.on_step, spent=self.spent,
                              tool_images=self.config.tool_images)

    async def resume(self, messages: list[Message], message: str) -> Outcome:
        """Continue a conversation with another user message (warm sessions)."""
        assert self.selftools is not None
        messages.append(user(message))
        if self.tracer is not None:
            self.tracer.prompt(message)
        loop = Loop(self.intelligence, Actions(self.toolbox, self.selftools),
                    budgets=self.budgets, state=self.state, tracer=self.tracer,
                    on_step=self.on_step, spent=self.spent,
                    tool_images=self.config.tool_images)
        return await loop.run(messages, output_contract=self.config.output_contract)


# --- the integration points (one call site each) ----------------------------------

async def _start_backend(stack: contextlib.AsyncExitStack, ctx: RunContext) -> SubagentBackend:
    """The root's subagent backend: the tree's Supervisor (the one chokepoint), on
    the run's own provider (metered here: one ledger for the tree) and Toolbox."""
    from agentd.app.compose import metered_provider, start_supervisor

    metered = metered_provider(ctx.config, ctx.intelligence, ctx.config.token_ceiling)
    ctx.intelligence = metered
    sup = await start_supervisor(stack, ctx.config, run_id=ctx.run_id, provider=metered,
                                 toolbox=ctx.toolbox)
    state = ctx.state
    ctx.spent = lambda: max(state.usage.total_tokens, sup.tree_tokens)
    if isinstance(ctx.tracer, TrajectoryRecorder):  # --trajectory: children record too
        sup.trajectories = ctx.tracer.subagents
    return sup


async def _open_a2a(stack: contextlib.AsyncExitStack, ctx: RunContext) -> None:
    """`--a2a-peer`s: every Agent Card fetched and checked (a required peer failing
    is exit 6); the toolbox then also serves `a2a://` task resources."""
    from agentd.a2a.peers import A2APeers, WithPeers

    config, toolbox = ctx.config, ctx.toolbox
    assert toolbox is not None, "the toolbox is opened before the A2A peers"
    peers = ctx.peers = await stack.enter_async_context(A2APeers(
        config.a2a_peers, secrets_dir=config.secrets_dir, init_timeout=config.init_timeout,
        updates=toolbox.updates))
    ctx.toolbox = WithPeers(toolbox, peers)


def make_selftools(ctx: RunContext) -> SelfTools:
    """The run's `agentd__*` self-tools: the built-in ones plus `graph.run` (the tree)."""
    tools = SelfTools(resources=ctx.toolbox, backend=ctx.backend, caller=ctx.handle,
                      max_subscriptions=ctx.config.max_subscriptions,
                      offer=ctx.config.self_tools,
                      subscriptions=ctx.config.mode == "reactive")
    if ctx.peers is not None:  # --features a2a with --a2a-peer: a2a.delegate
        from agentd.agent.a2a_delegate import install

        install(tools, ctx.peers)
    from agentd.agent import graph

    graph.install(tools, ctx.backend, ctx.handle)
    return tools


async def _serve_self(stack: contextlib.AsyncExitStack, ctx: RunContext) -> None:
    """`--serve-mcp`: the self-MCP, on the same backend as the loop's self-tools."""
    from agentd.app import serving

    ctx.served = await stack.enter_async_context(
        serving.serve(ctx.config, run_id=ctx.run_id, backend=ctx.backend))


# The share of --drain-timeout journaled runs get to end before they are suspended,
# and the share by which the exchanges in flight then must be answered to be journaled;
# the rest is for stopping their processes and closing the listener and the MCP
# sessions (agentd.tree.supervisor.Supervisor.settle).
JOURNALED_RUN_SHARE = 0.6
IN_FLIGHT_SHARE = 0.8


def _settle_at_drain(stack: contextlib.AsyncExitStack, ctx: RunContext) -> None:
    """With --journal: at the drain, while the listener still answers, the served
    runs may end; those that do not are suspended, journaled for the next process."""
    from agentd.tree.supervisor import Supervisor

    sup = ctx.backend
    durable = sup.durable if isinstance(sup, Supervisor) else None
    if durable is None:
        return

    async def settle() -> None:
        now = asyncio.get_running_loop().time()
        start = ctx.stopped_at if ctx.stopped_at is not None else now
        drain = ctx.config.drain_timeout
        await durable.settle(start + drain * JOURNALED_RUN_SHARE,
                             start + drain * IN_FLIGHT_SHARE)

    ctx.on_stop.append(durable.close)  # from the signal on, not from the settle
    stack.push_async_callback(settle)


async def _run_reactive(ctx: RunContext) -> RunResult:
    """`--mode reactive`: the reactive daemon runs the loop once per wake until
    `ctx.stop` is set by a signal (agentd.reactive.daemon)."""
    from agentd.reactive.awaiting import await_resource_tool
    from agentd.reactive.daemon import loop_runner, run_reactive
    from agentd.reactive.waiters import Waiters

    config = ctx.config
    waiters = Waiters()
    toolbox = ctx.toolbox
    assert toolbox is not None  # connected by `_body` before the mode runs

    def fresh_selftools() -> SelfTools:  # a fresh subscribe queue per wake
        tools = make_selftools(ctx)
        tools.add(await_resource_tool(toolbox, waiters))
        return tools

    run_wake = loop_runner(ctx.intelligence, toolbox,
                           instruction=config.instruction or "",
                           output_contract=config.output_contract, budgets=ctx.budgets,
                           selftools=fresh_selftools, deadline=config.deadline,
                           tracer=ctx.tracer)
    def emit(line: WakeLine) -> None:  # one JSON line per wake, flushed (docs/reactive.md)
        print_result(line, ctx.stdout)

    result, _code = await run_reactive(config, toolbox, run_wake, ctx.stop,
                                       run_id=ctx.run_id, waiters=waiters, emit=emit)
    return result


async def _run_mode(ctx: RunContext) -> Outcome | RunResult:
    if ctx.config.mode == "reactive":
        return await _run_reactive(ctx)
    from agentd.reactive.awaiting import await_resource_tool, watch_updates

    instruction = ctx.config.instruction or ""
    async with watch_updates(ctx.toolbox) as waiters:
        if ctx.selftools is not None:
            ctx.selftools.add(await_resource_tool(ctx.toolbox, waiters))
        return await _unless_lost(ctx.toolbox, ctx.resume(ctx.prior, instruction)
                                  if ctx.prior is not None else ctx.task(instruction))


async def _unless_lost(toolbox: AgentToolbox | None, work: Awaitable[Outcome]) -> Outcome:
    """Run the loop; a required server lost meanwhile (a stale server, found by
    the pinger, not by a call) ends it with that fault (agentd.mcp.client.rules.faults)."""
    lost = toolbox.lost if toolbox is not None else None
    task = asyncio.ensure_future(work)
    if lost is None:
        return await task
    try:
        either: set[asyncio.Future[Any]] = {task, lost}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    if task.done() and not task.cancelled():
        return task.result()
    raise lost.result()


# --- the run ------------------------------------------------------------------------

async def _body(ctx: RunContext, *, serve: bool, backend: SubagentBackend | None,
                extra: Callable[[contextlib.AsyncExitStack, RunContext], Awaitable[None]]
                | None = None) -> Outcome | RunResult:
    config = ctx.config
    loop = asyncio.get_running_loop()
    # In reactive mode --deadline bounds each wake's run, not the daemon.
    deadline_at = (loop.time() + config.deadline
                   if config.deadline and config.mode != "reactive" else None)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(ctx.intelligence.aclose)
        # One cancel scope for the deadline and for signals: when it fires, the
        # work inside is cancelled (in-flight calls send notifications/cancelled)
        # and everything entered on the stack then closes normally: the drain.
        scope = ctx.scope = asyncio.timeout_at(deadline_at)
        try:
            async with scope:
                if ctx.interrupted:
                    raise TimeoutError
                if serve and config.metrics_listen:
                    await _serve_metrics(stack, config)
                ctx.toolbox = await stack.enter_async_context(
                    _open_toolbox(config, ctx.run_id))
                if serve:
                    stack.callback(health.add_check("mcp", lambda: _required_down(ctx.toolbox)))
                if config.a2a_peers:
                    await _open_a2a(stack, ctx)
                if backend is not None:
                    ctx.backend = backend
                else:
                    ctx.backend = await _start_backend(stack, ctx)
                ctx.selftools = make_selftools(ctx)
                if serve and config.serve is not None:
                    await _serve_self(stack, ctx)
                    _settle_at_drain(stack, ctx)
                if extra is not None:
                    await extra(stack, ctx)
                return await _run_mode(ctx)
        except TimeoutError:
            if ctx.interrupted:
                return Outcome(status="interrupted", partial=True,
                               result=ctx.state.partial_result(), reason="signal")
            if not scope.expired():
                raise
            log.warning("run.deadline", deadline_s=config.deadline, steps=ctx.state.steps)
            return Outcome(status="deadline", partial=True, result=ctx.state.partial_result(),
                           reason=f"deadline={config.deadline}s passed")
        finally:
            ctx.scope = None


def _open_toolbox(config: Config, run_id: str) -> Toolbox:
    from agentd.app.compose import open_toolbox

    return open_toolbox(config, run_id)


async def _serve_metrics(stack: contextlib.AsyncExitStack, config: Config) -> None:
    """`--metrics-listen HOST:PORT`: /metrics, /healthz and /readyz on their own
    listener (task mode has no --serve-mcp listener to share)."""
    from agentd.config.serve import split_host_port
    from agentd.obs.http import serve_standalone

    host, port = split_host_port(config.metrics_listen or "")
    bearer = config.metrics_bearer
    if bearer:
        from agentd.secrets import substitute

        bearer = substitute(bearer, config.secrets_dir)
    elif config.serve is not None:
        bearer = config.serve.bearer
    listener = await serve_standalone(host, port, bearer=bearer)
    stack.push_async_callback(listener.stop)


def _required_down(toolbox: AgentToolbox | None) -> str | None:
    """Readiness: the required MCP servers that are not connected now (names only)."""
    down = toolbox.required_down() if toolbox is not None else []
    return f"required MCP servers not connected: {', '.join(down)}" if down else None


async def execute(config: Config, *, run_id: str, handle: str = "0",
                  tracer: Tracer | None = None, serve: bool = True, signals: bool = True,
                  backend: SubagentBackend | None = None,
                  extra: Callable[[contextlib.AsyncExitStack, RunContext], Awaitable[None]]
                  | None = None,
                  on_overrun: Callable[[], None] | None = None,
                  stdout: Any = None) -> tuple[RunResult, ExitCode, LoopState]:
    """Run to an outcome and classify it; no printing (shared by run, acp and the demo).

    `backend=None` starts the tree's Supervisor for this run (the root);
    a caller may pass a backend of its own. `extra` is called once everything is
    connected, before the loop (the demo and the reactive work hook in here).
    `on_overrun()` is called when the drain ran past
    --drain-timeout (the root process then ends hard, once its result is out).
    `stdout` gets a reactive daemon's wake lines as they come (None: sys.stdout);
    the result's `steps` and `usage` include the runs this process served.
    """
    state = LoopState()
    try:
        # Unset tunables fall back to AGENTD_INTELLIGENCE_* env, then the provider defaults.
        intelligence = for_config(config)
    except ConfigError as exc:
        log.error("config.invalid", error=str(exc))
        return _result(run_id, "failed", False, None, state), ExitCode.USAGE, state
    ctx = RunContext(config, run_id=run_id, handle=handle, intelligence=intelligence,
                     state=state, tracer=tracer)
    ctx.stdout = stdout
    result, code = await _drive(ctx, serve=serve, signals=signals, backend=backend,
                                extra=extra, on_overrun=on_overrun)
    return _with_served(result, ctx.backend), code, state


async def _drive(ctx: RunContext, *, serve: bool, signals: bool,
                 backend: SubagentBackend | None,
                 extra: Callable[[contextlib.AsyncExitStack, RunContext], Awaitable[None]]
                 | None, on_overrun: Callable[[], None] | None) -> tuple[RunResult, ExitCode]:
    """`execute`'s run to an outcome, under signals, the deadline and the drain."""
    config, run_id, handle, state = ctx.config, ctx.run_id, ctx.handle, ctx.state
    loop = asyncio.get_running_loop()
    body = asyncio.create_task(_body(ctx, serve=serve, backend=backend, extra=extra),
                               name=f"agentd-run-{handle}")
    hard = loop.create_future()
    interrupted: list[str] = []
    drain_timer: list[asyncio.TimerHandle] = []

    def drain_over() -> None:
        if not hard.done():
            hard.set_result(None)

    def on_signal(name: str) -> None:
        if interrupted:
            log.warning("run.signal.again", signal=name, action="stop waiting for the drain")
            if not hard.done():
                hard.set_result(None)
            return
        interrupted.append(name)
        if signals:
            health.set_draining()  # /readyz fails from the first moment of the drain
        log.warning("run.signal", signal=name, drain_timeout_s=config.drain_timeout)
        ctx.stopped_at = loop.time()
        ctx.stop.set()
        for stopping in ctx.on_stop:
            stopping()
        # One clock for the whole drain, in every mode: everything (an in-flight
        # reactive wake, the kill ladder, closing MCP sessions) ends by
        # signal + --drain-timeout; past that the process ends anyway.
        if config.mode == "reactive":
            # the daemon lets its in-flight wake finish, for the first part of the drain
            grace = config.drain_timeout * REACTIVE_WAKE_SHARE
            drain_timer.append(loop.call_later(grace, ctx.interrupt))
        else:
            ctx.interrupt()
        drain_timer.append(loop.call_later(config.drain_timeout, drain_over))

    if config.deadline and config.mode != "reactive":
        # a deadline exit drains within --drain-timeout too
        def deadline_drain_over() -> None:
            if not hard.done():
                hard.set_result("deadline")

        drain_timer.append(loop.call_later(config.deadline + config.drain_timeout,
                                           deadline_drain_over))
    installed = []
    if signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal, sig.name)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                pass
    try:
        await asyncio.wait({body, hard}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # our caller gave up (a subagent turn cancelled)
        ctx.interrupt()  # soft first: in-flight calls get notifications/cancelled
        await asyncio.wait({body}, timeout=config.drain_timeout)
        if not body.done():
            body.cancel()
            await asyncio.wait({body}, timeout=1.0)
        raise
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        for t in drain_timer:
            t.cancel()
    if not body.done():
        log.error("run.drain.timeout", drain_timeout_s=config.drain_timeout)
        _kill_lingering(ctx.backend)
        body.cancel()
        await asyncio.wait({body}, timeout=1.0)
        if on_overrun is not None:
            on_overrun()
    if interrupted and body.done() and not body.cancelled() and body.exception() is None \
            and isinstance(reported := body.result(), RunResult):
        # the reactive daemon drained and reported
        log.info("run.interrupted", signal=interrupted[0], steps=reported.steps)
        return reported, ExitCode.INTERRUPTED
    if interrupted:
        if body.done() and not body.cancelled() and (failed := body.exception()) is not None:
            log.warning("run.drain.error", error=repr(leaf_error(failed)))
        log.info("run.interrupted", signal=interrupted[0], steps=state.steps)
        return (_result(run_id, "interrupted", True, state.partial_result(), state),
                ExitCode.INTERRUPTED)
    if body.cancelled() and hard.done() and hard.result() == "deadline":
        log.warning("run.end", status="deadline", steps=state.steps,
                    exit_code=int(ExitCode.DEADLINE), reason="the drain overran")
        return (_result(run_id, "deadline", True, state.partial_result(), state),
                ExitCode.DEADLINE)
    if body.cancelled():
        log.error("run.cancelled", steps=state.steps)
        return (_result(run_id, "interrupted", True, state.partial_result(), state),
                ExitCode.INTERRUPTED)
    err = body.exception()
    if err is None and isinstance(reported := body.result(), RunResult):
        code = EXIT_BY_STATUS.get(reported.status, ExitCode.FAILED)
        log.info("run.end", status=reported.status, steps=reported.steps, exit_code=int(code))
        return reported, code
    if err is None:
        outcome = body.result()
        assert isinstance(outcome, Outcome)
        code = EXIT_BY_STATUS.get(outcome.status, ExitCode.FAILED)
        log.info("run.end", status=outcome.status, steps=state.steps, calls=state.calls,
                 total_tokens=state.usage.total_tokens,
                 tree_tokens=ctx.backend.tree_tokens, exit_code=int(code),
                 reason=outcome.reason or None)
        return (_result(run_id, outcome.status, outcome.partial, outcome.result, state),
                code)
    leaf = leaf_error(err)
    code, event, message = classify(leaf)
    if code == ExitCode.FAILED:
        log.error(event, error=message, exc_type=type(leaf).__name__)
    else:
        log.error(event, error=message)
    failure: dict[str, Any] = {"error": message}
    if isinstance(leaf, RequiredServerLost) and not leaf.handshake:  # name server and fault
        failure.update(server=leaf.server, fault=leaf.fault)
    return _result(run_id, "failed", False, failure, state), code


def _with_served(result: RunResult, backend: SubagentBackend) -> RunResult:
    """The exit line counts the runs this process served too (a worker's work is
    theirs: spec §3, docs/server.md): their steps and usage, by the tree's ledger."""
    steps, usage = backend.served_usage()
    if not steps and not usage.total_tokens:
        return result
    log.info("run.served", steps=steps, total_tokens=usage.total_tokens)
    total = Usage(result.usage.prompt_tokens, result.usage.completion_tokens,
                  result.usage.total_tokens)
    total.add(usage)
    return msgspec.structs.replace(result, steps=result.steps + steps, usage=total)



def _kill_lingering(backend: SubagentBackend) -> None:
    """The drain's last rung: SIGKILL every subagent still alive (one that ignored
    SIGTERM); PDEATHSIG and the process-group kill make sure of the rest."""
    import os
    import signal as _signal

    for pid in backend.live_pids():
        with contextlib.suppress(OSError):
            os.killpg(pid, _signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, _signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)  # reaped now if it is already gone


def _result(run_id: str, status: str, partial: bool, result: Any,
            state: LoopState) -> RunResult:
    usage = Usage(state.usage.prompt_tokens, state.usage.completion_tokens,
                  state.usage.total_tokens)
    return RunResult(run_id=run_id, status=status, partial=partial, result=result,
                     steps=state.steps, usage=usage)


async def run(config: Config, *, tracer: Tracer | None = None, stdout: Any = None) -> int:
    """`agentd --instruction ...`: the whole run; returns the exit code."""
    run_id = new_run_id()
    configure(fmt=config.log_format, run_id=run_id, level=config.log_level or "info")
    log.info("run.start", mode=config.mode, servers=[s.name for s in config.mcp],
             max_steps=config.max_steps, deadline_s=config.deadline,
             token_ceiling=config.token_ceiling, serve=config.serve is not None)
    health.set_draining(False)
    trace.setup("agentd")
    recorder = None
    if config.trajectory is not None and tracer is None:
        recorder = tracer = TrajectoryRecorder(session_id=run_id, model=config.model)
    overran: list[bool] = []
    with trace.run_span("agentd.run", run_id, **{"agentd.mode": config.mode}) as span:
        result, code, _state = await execute(config, run_id=run_id, tracer=tracer,
                                             on_overrun=lambda: overran.append(True),
                                             stdout=stdout)
        span.set(**{"agentd.status": result.status, "agentd.steps": result.steps,
                    "agentd.exit_code": int(code)})
    metrics.RUNS.inc(result.status)
    await trace.ashutdown()
    if recorder is not None and config.trajectory is not None and code != ExitCode.USAGE:
        _write_trajectory(config.trajectory, recorder, result)
    if code != ExitCode.USAGE:
        print_result(result, stdout)
    if overran:
        _end_hard(code)
    return int(code)


def _write_trajectory(path: str, recorder: TrajectoryRecorder, result: RunResult) -> None:
    """`--trajectory FILE`, however the run ended; a file that cannot be written is
    an error line, never a different exit code (the run's result is out already)."""
    failure = result.result.get("error") if isinstance(result.result, dict) else None
    recorder.end(result.status, reason=str(failure) if failure else None)
    try:
        write_document(path, recorder.dump())
    except OSError as exc:
        log.error("trajectory.write_failed", path=path, error=exc.strerror or str(exc),
                  fix="--trajectory: a writable file in an existing directory")
        return
    log.info("trajectory.written", path=path, steps=len(recorder.steps),
             subagents=len(recorder.subagents))


def _end_hard(code: int) -> None:
    """After a drain that overran --drain-timeout the result is out; whatever is
    still unwinding (a connection that never answers) does not hold the process."""
    import os
    import sys

    log.error("run.exit.hard", exit_code=int(code), detail="the drain overran --drain-timeout")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(int(code))
