"""The supervisor: the ONE spawn chokepoint and the owner of every subagent process.

`Supervisor` implements `agentd.agent.subagents.SubagentBackend`.  The in-loop
self-tools of the root agent (caller `"0"`), the self-MCP's `subagent.*` tools
(caller `"served"`), and every subagent's own self-tools (arriving as `tree/*`
requests on that child's control wire, so the caller is the pipe's handle,
never a claim) all call the same `spawn()`, which:

* mints the child's handle and depth from the caller's handle: `0.3`,
  `0.3.1`, ...; `served.{n}` for runs a peer started over the self-MCP.  A
  handle's depth is its number of dotted components (the root has depth 1);
* checks, in this order, and refuses with `SpawnRefused` (shown as an
  `isError` tool result, never a crash):
    - `spawn refused: caller handle 0.7 is not running`
    - `spawn refused: max_depth=4 reached at handle 0.2.1.3`
    - `spawn refused: tool_scope widens the caller's scope at handle 0.2 (not in scope: x)`
    - `spawn refused: max_children=16 reached at handle 0.2`  (live children of the caller)
    - `spawn refused: max_subagents=256 reached at handle 0.2`  (live subagents in the tree)
    - `spawn refused: token_ceiling=50000 reached at handle 0.2`  (tokens spent by the tree)

Processes are flat: every subagent, at any depth, is a child process of the
root agentd (or of its forkserver), so caps, handles and cancellation live in
one place; a subtree is the set of handles under a prefix.  Everything is
structured: each run is a task in the supervisor's TaskGroup, a node's end
cancels its live non-detached descendants, and `aclose()` walks the kill
ladder over every live child within `--drain-timeout`.

Terminal handles stay readable for `terminal_ttl` seconds (default 600) and at
most `keep_terminal` of them are kept (default 1024, oldest evicted first);
after that `status()` raises `UnknownHandle`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from agentd.agent.subagents import TERMINAL, HandleState, SpawnRefused, SpawnRequest, UnknownHandle
from agentd.config import Config
from agentd.intelligence.base import model_label
from agentd.log import log
from agentd.obs import health, metrics, trace
from agentd.tree.childflags import FAULT_ENV
from agentd.tree.control import (
    CHILD_ERROR,
    IO_FAULT,
    IO_SCOPE,
    SPAWN_REFUSED,
    UNKNOWN_HANDLE,
    ChildConfig,
    HandleBody,
    Incoming,
    IoCompletion,
    MessageParams,
    RunOutcome,
    TurnState,
)
from agentd.tree.procs import Channel, ChannelClosed, ChildProcess, ExecSpawner, RemoteError
from agentd.wire.jsonrpc import ErrorObject

__all__ = ["ROOT", "SERVED", "Supervisor"]

ROOT = "0"
SERVED = "served"
DEFAULT_TERMINAL_TTL = 600.0
DEFAULT_KEEP_TERMINAL = 1024
CONFIGURE_TIMEOUT = 60.0  # the least time a child gets to answer child/configure


def _raise_fd_limit(want: int) -> None:
    """Each live child holds 3-4 fds here: lift the soft RLIMIT_NOFILE toward the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (ImportError, ValueError, OSError):
        pass


def _io_attrs(handle: str, req: object) -> dict[str, Any]:
    """The `agentd.io` span's attributes (dotted names, so not keywords)."""
    return {"agentd.handle": handle, "agentd.io": type(req).__name__}


def _io_event(req: Any, steps: int) -> str:
    """A brokered request as a live-view event: the tool's name, never arguments."""
    config = getattr(type(req), "__struct_config__", None)
    kind = config.tag if config is not None and config.tag else type(req).__name__
    if kind == "complete":
        return f"step {steps + 1}: thinking"
    if kind == "call":
        return f"tool {str(getattr(req, 'name', ''))[:80]}"
    return {"read": "reading a resource", "subscribe": "subscribing",
            "unsubscribe": "unsubscribing"}.get(kind, str(kind))


def _cap_of(refusal: str) -> str:
    """The cap named by a refusal text (a small fixed set: a metric label)."""
    if "=" in refusal:
        cap = refusal.split(":", 1)[-1].strip().split("=", 1)[0]
        if cap.isidentifier():
            return cap
    for key, cap in (("tool_scope", "tool_scope"), ("not running", "not_running"),
                     ("shutting down", "shutting_down"), ("mode", "mode")):
        if key in refusal:
            return cap
    return "other"


def depth_of(handle: str) -> int:
    return handle.count(".") + 1


def _within(handle: str, ancestor: str) -> bool:
    return handle.startswith(ancestor + ".")


class _Node:
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
        self.seq = itertools.count(1)
        self.spawned_any = False  # a handle was ever minted under this one
        self.live_children: set[str] = set()
        self.done = asyncio.Event()
        self.stop = asyncio.Event()
        self.stop_reason = "cancelled"
        self.idle = asyncio.Event()  # warm: a turn is not running
        self.turn_lock = asyncio.Lock()
        self.tokens = 0
        self.spawned_at = time.monotonic()
        self.first_frame: float | None = None
        self.finished_at: float | None = None
        self.reason: str | None = None
        self.fault = os.environ.get(FAULT_ENV)
        self.span: Any = trace.NOSPAN  # agentd.spawn, from spawn to the end (agentd.obs)
        self.steps = 0  # answers of the intelligence brokered for it
        self.last = "spawned"  # its last event, for `agentd top` (names, never content)

    @property
    def live(self) -> bool:
        return not self.state.done


def _settle(fut: asyncio.Future[Any]) -> None:
    """Give up on a request's answer; if it already failed, mark its error seen."""
    if not fut.cancel() and not fut.cancelled():
        fut.exception()


class Supervisor:
    """The subagent backend of one agentd process (see module doc).

    Use as `async with Supervisor(config) as sup:`; hand `sup` to the self-MCP
    (caller "served") and to the root loop's self-tools (caller "0").
    `spawn` is `config.spawn` unless given ("exec" or "forkserver").
    """

    def __init__(self, config: Config, *, scope: Iterable[str] | None = None,
                 spawn: str | None = None, run_id: str = "",
                 terminal_ttl: float = DEFAULT_TERMINAL_TTL,
                 keep_terminal: int = DEFAULT_KEEP_TERMINAL,
                 max_frame: int | None = None, broker: Any = None,
                 ledger: Any = None) -> None:
        from agentd_native import MAX_FRAME

        self.config = config
        self.run_id = run_id
        self.max_frame = max_frame or MAX_FRAME
        self.terminal_ttl = terminal_ttl
        self.keep_terminal = keep_terminal
        root_scope = frozenset(scope if scope is not None else (
            s.name for s in (*config.mcp, *config.a2a_peers)))  # A2A peers: docs/a2a.md
        self._nodes: dict[str, _Node] = {
            ROOT: _Node(ROOT, "", root_scope, "root", None),
            SERVED: _Node(SERVED, "", root_scope, "root", None),
        }
        self._terminal: OrderedDict[str, float] = OrderedDict()
        self._callbacks: list[Callable[[HandleState], None]] = []
        self._counts = dict.fromkeys(
            ("spawned", "running", "completed", "failed", "cancelled", "budget_exhausted",
             "deadline", "refused", "evicted"), 0)
        self._live = 0
        self._root_tokens = 0
        self._spent = 0  # tokens of finished subagents
        mode = spawn or config.spawn
        self._spawner: Any = ExecSpawner()
        if mode == "forkserver":
            from agentd.tree.forkserver import ForkserverSpawner, available

            if available():
                self._spawner = ForkserverSpawner()
            else:
                log.warning("subagent.forkserver_unavailable", fallback="exec",
                            reason=f"not supported on {sys.platform}")
        # Brokered I/O (agentd.tree.broker): children's intelligence and MCP calls are
        # made here, on the run's pooled provider and Toolbox, charged to one ledger.
        from agentd.intelligence.ledger import Ledger

        self.ledger = ledger if ledger is not None else (
            broker.intelligence.ledger if broker is not None else Ledger(config.token_ceiling))
        self.broker = broker
        self._own_toolbox: Any = None
        self._owned = False
        self.fallbacks = 0  # forkserver -> exec (at most once)
        # A started child answers its first frame before its heavy imports, but under
        # a burst of exec spawns it may wait for a CPU: be patient, yet bounded.
        self._configure_within = max(config.init_timeout, CONFIGURE_TIMEOUT)
        self._tg: asyncio.TaskGroup | None = None
        self._closing = False
        self.log = log.bind(component="supervisor")

    # ------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Supervisor:
        _raise_fd_limit(4 * self.config.max_subagents + 256)
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        try:
            if self.broker is None:
                await self._own_broker()
            await self._spawner.start()
        except BaseException:
            await self._close_own_toolbox()
            await self._tg.__aexit__(None, None, None)
            raise
        self.broker.notify = self._notify_update
        self._model: str | None = None  # the metrics' model label, at the first brokered step
        self._unobserve = [metrics.SUBAGENTS_LIVE.source(lambda: {(): self._live}),
                           health.add_check("forkserver", self._spawner_down)]
        return self

    def _spawner_down(self) -> str | None:
        """Readiness: None while subagents can be spawned; else why not."""
        down = getattr(self._spawner, "down", None)
        return down() if down is not None else None

    async def _own_broker(self) -> None:
        """A Supervisor used on its own (tests, benchmarks, the worker) brokers with a
        provider and a Toolbox of its own, built from its config."""
        from agentd.intelligence import make_intelligence
        from agentd.intelligence.flow import FlowGate
        from agentd.intelligence.ledger import Metered
        from agentd.tree.broker import Broker

        cfg = self.config
        ledger = self.ledger

        def provider() -> Metered:
            return Metered(make_intelligence(cfg.intelligence, model=cfg.model,
                                             stream=cfg.intelligence_stream,
                                             timeout=cfg.intelligence_timeout,
                                             attempts=cfg.intelligence_attempts),
                           ledger, "0", FlowGate(cfg.max_inflight_intelligence))

        toolbox = None
        if cfg.mcp:
            from agentd.mcp.call_limits import tool_limits
            from agentd.mcp.toolbox import Toolbox

            toolbox = Toolbox(cfg.mcp, run_id=self.run_id, init_timeout=cfg.init_timeout,
                              ping_interval=cfg.ping_interval, secrets_dir=cfg.secrets_dir,
                              tool_limits=tool_limits(cfg))
            await toolbox.__aenter__()
            self._own_toolbox = toolbox
        self.broker = Broker(intelligence=provider, toolbox=toolbox)
        self._owned = True

    async def _close_own_toolbox(self) -> None:
        """Close what `_own_broker` opened (a broker handed in is its owner's to close)."""
        owned, self._owned = self._owned, False
        tb, self._own_toolbox = self._own_toolbox, None
        if owned and self.broker is not None:
            await self.broker.aclose()
        if tb is not None:
            await tb.__aexit__(None, None, None)

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.aclose()
        finally:
            for node in self._nodes.values():  # brokered calls nobody will read any more
                for task in list(node.io):
                    task.cancel()
            for remove in getattr(self, "_unobserve", ()):
                remove()
            tg, self._tg = self._tg, None
            if tg is not None:
                await tg.__aexit__(*exc)
            await self._spawner.aclose()
            await self._close_own_toolbox()

    async def aclose(self) -> None:
        """Drain: the kill ladder over every live subagent, within --drain-timeout."""
        self._closing = True
        live = [n for n in self._nodes.values() if n.live and n.request is not None]
        for node in live:
            self._request_stop(node, "cancelled")
        if live:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.drain_timeout + 5.0):
                    await asyncio.gather(*(n.done.wait() for n in live))

    # ------------------------------------------------------------- backend
    async def spawn(self, caller: str, request: SpawnRequest) -> HandleState:
        node = self._admit(caller, request)
        assert self._tg is not None, "use the Supervisor as an async context manager"
        # the spawn's span lives until the subagent ends; its child runs under it
        attrs: dict[str, Any] = {"agentd.handle": node.handle, "agentd.depth": node.depth,
                                 "agentd.mode": node.mode, "agentd.caller": caller}
        node.span = trace.start("agentd.spawn", **attrs)
        self._tg.create_task(self._drive(node), name=f"subagent {node.handle}")
        if request.mode != "sync":
            return node.state
        try:
            await node.done.wait()
        except asyncio.CancelledError:  # the caller gave up: so does its child
            self._request_stop(node, "cancelled")
            raise
        return node.state

    async def send(self, caller: str, handle: str, message: str) -> HandleState:
        node = self._nodes.get(handle)
        if node is None or node.request is None or not _within(handle, caller):
            raise UnknownHandle(handle)
        if node.mode != "warm":
            raise UnknownHandle(f"{handle} is not a warm session")
        async with node.turn_lock:
            await node.idle.wait()
            if not node.live or node.proc is None:
                return node.state
            node.idle.clear()
            try:
                outcome = await self._until_stopped(
                    node, node.proc.channel.call("child/send", MessageParams(
                        message, trace.current_traceparent())))
            except (ChannelClosed, RemoteError) as exc:
                outcome = RunOutcome(status="failed", reason=str(exc))
            finally:
                node.idle.set()
        if outcome is None:
            return node.state
        if outcome.status != "completed":
            self._request_stop(node, outcome.status)
        self._charge(node, outcome.tokens)
        node.state.result = outcome.result
        node.state.partial = outcome.partial
        return TurnState(handle=handle, status=node.state.status, partial=outcome.partial,
                         result=outcome.result, started=node.state.started)

    def status(self, handle: str) -> HandleState:
        self._evict()
        node = self._nodes.get(handle)
        if node is None or node.request is None:
            raise UnknownHandle(handle)
        return node.state

    async def cancel(self, handle: str) -> HandleState:
        node = self._nodes.get(handle)
        if node is None or node.request is None:
            raise UnknownHandle(handle)
        subtree = [n for h, n in self._nodes.items()
                   if (h == handle or _within(h, handle)) and n.live and n.request is not None]
        for n in subtree:
            self._request_stop(n, "cancelled")
        if subtree:
            await asyncio.gather(*(n.done.wait() for n in subtree))
        return node.state

    def on_terminal(self, callback: Callable[[HandleState], None]) -> None:
        self._callbacks.append(callback)

    def counts(self) -> dict[str, int]:
        out = dict(self._counts)
        out["running"] = self._live
        return out

    # ------------------------------------------------------------ extras
    def charge_root(self, tokens: int) -> None:
        """The root loop reports its own total tokens (when its calls are not metered)."""
        self.ledger.report(ROOT, tokens)

    @property
    def tree_tokens(self) -> int:
        """The tree's tokens: the ledger's, charged as each intelligence call is made."""
        return self.ledger.total

    def snapshot(self) -> list[dict[str, Any]]:
        """Every known handle (live, or terminal and not yet evicted), for the live
        view (`agent://status` `tree`, `agentd top`): names and numbers only."""
        now = time.monotonic()
        out = []
        for h, n in self._nodes.items():
            if n.request is None:
                continue
            end = n.finished_at if n.finished_at is not None else now
            out.append({"handle": h, "parent": n.parent, "status": n.state.status,
                        "depth": n.depth, "mode": n.mode, "steps": n.steps,
                        "tokens": n.tokens, "age_ms": int((end - n.spawned_at) * 1000),
                        "last": n.last})
        return out

    def live_pids(self) -> list[int]:
        return [n.proc.pid for n in self._nodes.values()
                if n.proc is not None and n.proc.returncode is None]

    def process(self, handle: str) -> ChildProcess | None:
        """The live or last process of a handle (tests, benchmarks, diagnostics)."""
        node = self._nodes.get(handle)
        return node.proc if node is not None else None

    def timing(self, handle: str) -> tuple[float, float | None]:
        """(spawned_at, first_frame) monotonic times of a handle (benchmarks)."""
        node = self._nodes[handle]
        return node.spawned_at, node.first_frame

    # ----------------------------------------------------------- chokepoint
    def _refuse(self, caller: str, text: str) -> SpawnRefused:
        self._counts["refused"] += 1
        metrics.REFUSALS.inc(_cap_of(text))
        self.log.warning("subagent.refused", caller=caller, reason=text)
        return SpawnRefused(text)

    def _admit(self, caller: str, request: SpawnRequest) -> _Node:
        cfg = self.config
        if self._closing:
            raise self._refuse(caller, "spawn refused: shutting down")
        parent = self._nodes.get(caller)
        if parent is None or (parent.request is not None and not parent.live):
            raise self._refuse(caller, f"spawn refused: caller handle {caller} is not running")
        depth = parent.depth + 1
        if depth > cfg.max_depth:
            raise self._refuse(caller, f"spawn refused: max_depth={cfg.max_depth} reached "
                                       f"at handle {caller}")
        if request.mode not in ("sync", "async", "warm", "detach"):
            raise self._refuse(caller, f"spawn refused: unknown mode {request.mode!r}")
        scope = parent.scope if request.tool_scope is None else frozenset(request.tool_scope)
        wider = scope - parent.scope
        if wider:
            raise self._refuse(caller, "spawn refused: tool_scope widens the caller's scope "
                                       f"at handle {caller} (not in scope: "
                                       f"{', '.join(sorted(wider))})")
        if len(parent.live_children) >= cfg.max_children:
            raise self._refuse(caller, f"spawn refused: max_children={cfg.max_children} "
                                       f"reached at handle {caller}")
        if self._live >= cfg.max_subagents:
            raise self._refuse(caller, f"spawn refused: max_subagents={cfg.max_subagents} "
                                       f"reached at handle {caller}")
        if (tree := self.ledger.ceiling) is not None and self.tree_tokens >= tree:
            raise self._refuse(caller, f"spawn refused: token_ceiling={tree} "
                                       f"reached at handle {caller}")
        self._evict()
        handle = f"{caller}.{next(parent.seq)}"
        parent.spawned_any = True
        node = _Node(handle, caller, scope, request.mode, request)
        if request.mode == "warm":
            node.idle.clear()
        else:
            node.idle.set()
        self._nodes[handle] = node
        parent.live_children.add(handle)
        self._live += 1
        self._counts["spawned"] += 1
        metrics.SUBAGENTS.inc("spawned")
        return node

    def _talks_http(self, node: _Node) -> bool:
        """Will this child speak HTTP?  Never: its I/O is brokered by this process, so
        every child forks from the small template."""
        return False

    def _child_config(self, node: _Node) -> ChildConfig:
        cfg = self.config
        req = node.request
        assert req is not None
        # the tree's ceiling is the ledger's; a batch's samples also have their own
        budget = cfg.token_ceiling if (tree := self.ledger.ceiling) is None else min(
            max(tree - self.tree_tokens, 0), cfg.token_ceiling or tree)
        # Brokered: no server spec, no gateway URL, no model name, no secret goes down;
        # only the catalogue of the servers in scope (the parent enforces the scope).
        limits = msgspec.structs.asdict(cfg.limits) | {"token_ceiling": budget}
        return ChildConfig(
            **limits,
            handle=node.handle, depth=node.depth, instruction=req.instruction,
            output_contract=req.output_contract, mode=node.mode,
            tool_scope=tuple(sorted(node.scope)), mcp=(), intelligence=None, model=None,
            brokered=True, catalogue=self.broker.catalogue(node.scope),
            max_frame=self.max_frame, log_format=cfg.log_format,
            log_level=os.environ.get("AGENTD_LOG_LEVEL", "info").lower(),
            run_id=self.run_id, secrets_dir=cfg.secrets_dir, tracing=trace.exporting)

    # ------------------------------------------------------------- one run
    async def _drive(self, node: _Node) -> None:
        budget = self.config.drain_timeout
        proc: ChildProcess | None = None
        first: list[asyncio.Future[Any]] = []

        def hello(channel: Channel) -> None:
            """The first frames: child/run pipelined right behind child/configure."""
            assert node.request is not None
            first.append(channel.request("child/configure", self._child_config(node)))
            first.append(channel.request("child/run", MessageParams(
                node.request.instruction, node.span.traceparent)))

        try:
            env = None
            if node.fault is not None:  # test-only fault injection, as set at spawn time
                env = {**os.environ, FAULT_ENV: node.fault}
            try:
                proc = await self._spawn(node, env, hello)
            except Exception as exc:  # fds exhausted, forkserver gone, ...: this run fails
                self._finish(node, "failed", reason=f"spawn failed: {exc}")
                return
            node.proc = proc
            node.started.set()
            self.log.info("subagent.spawn", handle=node.handle, pid=proc.pid, depth=node.depth,
                          mode=node.mode, scope=sorted(node.scope), spawn=self._spawner.name)
            await self._run(node, proc, budget, *first)
        finally:
            for fut in first:  # an answer nobody awaited any more (stopped, failed)
                _settle(fut)
            if proc is not None:
                if proc.returncode is None:
                    await asyncio.shield(proc.ladder(budget, ask=None, reason="cleanup"))
                await proc.close()
                if node.live:
                    self._finish(node, "failed", reason=self._why(proc))
                emit = self.log.warning if node.state.status == "failed" else self.log.info
                emit("subagent.exit", handle=node.handle, pid=proc.pid,
                     returncode=proc.returncode, status=node.state.status, reason=node.reason)
            elif node.live:
                self._finish(node, "cancelled", reason="cancelled before start")

    async def _spawn(self, node: _Node, env: dict[str, str] | None,
                     hello: Callable[[Channel], None]) -> ChildProcess:
        """Start the child; a forkserver that cannot start means exec from then on."""
        from agentd.tree.forkserver import ForkserverUnavailable

        spawner = self._spawner
        try:
            return await spawner.spawn(node.handle, lambda ev: self._incoming(node, ev),
                                       max_frame=self.max_frame, env=env,
                                       http=self._talks_http(node), hello=hello)
        except ForkserverUnavailable as exc:
            if self._spawner is spawner:  # once, however many spawns were waiting on it
                self.fallbacks += 1
                self.log.warning("subagent.forkserver_unavailable", fallback="exec",
                                 reason=str(exc)[:300])
                self._spawner = ExecSpawner()
                with contextlib.suppress(Exception):
                    await spawner.aclose()
        return await self._spawner.spawn(node.handle, lambda ev: self._incoming(node, ev),
                                         max_frame=self.max_frame, env=env,
                                         http=self._talks_http(node), hello=hello)

    @staticmethod
    def _why(proc: ChildProcess) -> str:
        if proc.channel.failure:
            return f"protocol error: {proc.channel.failure}"
        rc = proc.returncode
        if rc is not None and rc < 0:
            return f"killed by signal {-rc}"
        return f"exited with code {rc} before its result"

    async def _until_stopped(self, node: _Node, call: Any) -> Any:
        """Await a control call unless the node is asked to stop first (then None)."""
        task = asyncio.ensure_future(call)
        stop = asyncio.ensure_future(node.stop.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, ChannelClosed, RemoteError):
                    await task
        return task.result() if task.done() and not task.cancelled() else None

    async def _run(self, node: _Node, proc: ChildProcess, budget: float,
                   configured: asyncio.Future[Any], ran: asyncio.Future[Any]) -> None:
        """Drive one run from its first frames (sent by `hello` when the wire opened).

        child/run goes out right behind child/configure: the child finds it waiting
        when its runtime starts instead of idling for a round trip through this loop.
        """
        try:
            await self._until_stopped(node, asyncio.wait_for(configured,
                                                             self._configure_within))
            node.first_frame = time.monotonic()
            outcome = None
            if not node.stop.is_set():
                outcome = await self._until_stopped(node, ran)
        except TimeoutError:
            proc.channel.failure = proc.channel.failure or "no answer to child/configure"
            await proc.ladder(budget, ask=None, reason="configure timeout")
            self._finish(node, "failed", reason="no answer to child/configure within "
                                                f"{self._configure_within}s")
            return
        except (ChannelClosed, RemoteError):
            outcome = None
        if node.stop.is_set():  # cancel / drain / parent ended: ask the child to cancel
            ask = "child/cancel" if not proc.channel.closed.is_set() else None
            await proc.ladder(budget, ask=ask, reason=node.stop_reason)
            self._finish(node, node.stop_reason, partial=True, result=node.state.result,
                         reason=node.stop_reason)
            return
        if outcome is None:  # the wire broke or the child died
            if proc.channel.failure:  # protocol error: end it through the ladder
                await proc.ladder(budget, ask=None, reason="protocol error")
            else:
                await proc.wait(budget)
            self._finish(node, "failed", reason=self._why(proc))
            return
        self._charge(node, outcome.tokens)
        if node.mode == "warm" and outcome.status == "completed":
            node.state.result = outcome.result
            node.state.partial = outcome.partial
            node.idle.set()
            closed = asyncio.ensure_future(proc.channel.closed.wait())
            stop = asyncio.ensure_future(node.stop.wait())
            try:
                await asyncio.wait({closed, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
                stop.cancel()
            async with node.turn_lock:
                pass  # let a send in flight see the stop
            if node.stop.is_set():
                await proc.ladder(budget, ask="child/shutdown", reason=node.stop_reason)
                self._finish(node, node.stop_reason, partial=node.state.partial,
                             result=node.state.result, reason=node.stop_reason)
            else:
                await proc.ladder(budget, ask=None, reason="wire closed")
                self._finish(node, "failed", reason=self._why(proc))
            return
        # the child exits on its own after its result; make sure it does
        if not await proc.wait(budget * 0.4):
            await proc.ladder(budget * 0.6, ask="child/shutdown", reason="lingering")
        self._finish(node, outcome.status, partial=outcome.partial, result=outcome.result,
                     reason=outcome.reason)

    def _charge(self, node: _Node, tokens: int) -> None:
        """A child's own count (progress, result): the ledger has it already when its
        calls were brokered; `report` never counts the same tokens twice."""
        node.tokens = max(node.tokens, tokens)
        self.ledger.report(node.handle, tokens)

    def _request_stop(self, node: _Node, reason: str) -> None:
        if node.live and not node.stop.is_set():
            node.stop_reason = reason
            node.stop.set()

    def _finish(self, node: _Node, status: str, *, partial: bool = False, result: Any = None,
                reason: str | None = None) -> None:
        if not node.live:
            return
        if status not in TERMINAL:
            status = "failed"
        node.state.status = status
        node.state.partial = partial
        node.state.result = result
        node.reason = reason
        if status == "failed" and result is None and reason:
            node.state.result = {"error": reason}
        node.finished_at = time.monotonic()
        node.idle.set()  # a send waiting for the session sees it ended
        self._terminal[node.handle] = node.finished_at
        self._live -= 1
        self._spent += node.tokens
        self._counts[status] = self._counts.get(status, 0) + 1
        metrics.SUBAGENTS.inc(status)
        node.last = status if not reason or status == "completed" else f"{status}: {reason}"[:120]
        node.span.set(**{"agentd.status": status})
        node.span.end()
        parent = self._nodes.get(node.parent)
        if parent is not None:
            parent.live_children.discard(node.handle)
            if parent.proc is not None and parent.live:
                parent.proc.channel.notify("child/terminal", self._body(node.state))
        node.done.set()
        for task in list(node.io):  # its model/tool calls in flight: nobody will read them
            task.cancel()
        if self.broker is not None and self.broker.holds(node.handle) and self._tg is not None:
            self._tg.create_task(self.broker.drop(node.handle))
        # structured: nothing outlives its run (detached subagents excepted); a node
        # that never spawned has no descendants (spares a scan of every node per exit)
        if node.spawned_any:
            for h, n in list(self._nodes.items()):
                if _within(h, node.handle) and n.live and n.mode != "detach":
                    self._request_stop(n, "cancelled")
        for cb in self._callbacks:
            try:
                cb(node.state)
            except Exception as exc:  # a callback's bug must not stop the tree
                self.log.error("subagent.callback_error", handle=node.handle, error=repr(exc))

    def _evict(self) -> None:
        now = time.monotonic()
        while self._terminal:
            handle, at = next(iter(self._terminal.items()))
            if now - at < self.terminal_ttl and len(self._terminal) <= self.keep_terminal:
                break
            del self._terminal[handle]
            node = self._nodes.get(handle)
            if node is not None and not node.live_children:
                del self._nodes[handle]
                self._counts["evicted"] += 1

    # -------------------------------------------------- requests from children
    @staticmethod
    def _body(state: HandleState) -> HandleBody:
        return HandleBody(handle=state.handle, status=state.status, partial=state.partial,
                          result=state.result if state.done else None)

    def _incoming(self, node: _Node, ev: Incoming) -> None:
        if ev.method == "child/progress":
            self._charge(node, ev.params.tokens)
            return
        if ev.method == "child/spans":
            trace.relay_in(ev.params.spans, **{"agentd.handle": node.handle})
            return
        if ev.method == "io/request":
            if self._tg is not None and node.live:
                task = self._tg.create_task(self._serve_io(node, ev))
                node.io.add(task)
                task.add_done_callback(node.io.discard)
            elif node.proc is not None:
                node.proc.channel.error(ev.id, IO_SCOPE, "the subagent is not running")
            return
        if self._tg is None or not node.live:
            if node.proc is not None:
                node.proc.channel.error(ev.id, SPAWN_REFUSED, "spawn refused: shutting down")
            return
        self._tg.create_task(self._serve_request(node, ev))

    async def _serve_io(self, node: _Node, ev: Incoming) -> None:
        """One brokered request of `node` (the pipe that asked), with its own scope."""
        if node.proc is None:  # it asked before its spawn call returned
            await node.started.wait()
        assert node.proc is not None
        ch = node.proc.channel

        p = ev.params
        try:
            with trace.span("agentd.io", parent=getattr(p, "traceparent", None), kind="server",
                            **_io_attrs(node.handle, p)) if trace.enabled else trace.NOSPAN:
                t0 = time.perf_counter()
                node.last = _io_event(p, node.steps)
                result = await self.broker.serve(node.handle, node.scope, p)
            if isinstance(result, IoCompletion):  # a subagent's loop step
                node.steps += 1
                calls = len(result.completion.tool_calls)
                node.last = f"step {node.steps}: " + (f"{calls} tool call(s)" if calls
                                                      else "answered")
                if self._model is None:  # the provider exists now: it just answered
                    self._model = model_label(self.broker.intelligence)
                metrics.turn(self._model, result.completion.usage, time.perf_counter() - t0)
        except Exception as exc:  # a fault of ours or of a peer: the child gets an error
            self.log.error("subagent.io_error", handle=node.handle, error=repr(exc)[:300])
            ch.error(ev.id, IO_FAULT, f"{type(exc).__name__}: {exc}")
        else:
            if isinstance(result, ErrorObject):  # a refusal, or a fault of the call
                ch.error(ev.id, result.code, result.message, result.data)
            else:
                ch.respond(ev.id, result)

    def _notify_update(self, handle: str, update: Any) -> None:
        node = self._nodes.get(handle)
        if node is not None and node.live and node.proc is not None:
            node.proc.channel.notify("io/updated", update)

    async def _serve_request(self, node: _Node, ev: Incoming) -> None:
        if node.proc is None:  # it asked before its spawn call returned
            await node.started.wait()
        proc = node.proc
        assert proc is not None
        ch = proc.channel
        p = ev.params
        try:
            if ev.method == "tree/spawn":
                with trace.span("agentd.tree.spawn", parent=p.traceparent, kind="server"):
                    state = await self.spawn(node.handle, SpawnRequest(
                        instruction=p.instruction, output_contract=p.output_contract,
                        tool_scope=p.tool_scope, mode=p.mode))
            else:
                if not _within(p.handle, node.handle):
                    raise UnknownHandle(p.handle)
                if ev.method == "tree/send":
                    state = await self.send(node.handle, p.handle, p.message)
                elif ev.method == "tree/status":
                    state = self.status(p.handle)
                else:
                    state = await self.cancel(p.handle)
            ch.respond(ev.id, self._body(state))
        except SpawnRefused as exc:
            ch.error(ev.id, SPAWN_REFUSED, str(exc))
        except UnknownHandle as exc:
            ch.error(ev.id, UNKNOWN_HANDLE, f"unknown handle {exc}")
        except Exception as exc:
            self.log.error("subagent.request_error", handle=node.handle, method=ev.method,
                           error=repr(exc))
            ch.error(ev.id, CHILD_ERROR, f"{type(exc).__name__}: {exc}")

