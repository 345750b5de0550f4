"""Reactive mode (`--mode reactive --subscribe URI…`): sleep until something
watched changes, then run the loop once on its current state.

* Ownership. Each URI is watched on the declared server that owns it by the
  toolbox's one rule (`agentd.mcp.client.toolbox.owner_of`, the same for reads and
  `await_resource`): the server named for it, else the one whose catalogue
  lists it, else the only server serving resources (which must then advertise
  `resources.subscribe`). A `--subscribe server=URI` entry names the owner (no
  URI scheme holds `=`).
* Never silent: one outcome per URI, one event each. `reactive.subscribed`
  (`resources/subscribe` and the session's GET stream), `reactive.listening`
  (2026-07-28's listen stream), `reactive.polling` (the owner can deliver no
  `updated` for it: no `resources.subscribe`, a subscribe refused or not
  honoured, no GET stream; re-read every `--poll-interval`, agentd.reactive.
  polling), `reactive.refused` (not watched: no owner, an ambiguous one, a
  template, the self-subscription cap, or polling disabled). A `--subscribe`
  URI that would need polling with `--poll-interval 0`, or whose owner is
  ambiguous, ends the daemon at startup (`ReactiveError`, exit 6). A URI no
  server owns stays non-fatal:
  the spec's worker is `--subscribe file:///nowhere`, no `--mcp`, serving
  only its self-MCP.
* Wakes. The servers' `notifications/resources/updated` (and the client's
  synthesized ones after a reconnect) flow through the `Router`: debounced,
  coalesced per URI. For each wake the daemon reads every woken URI fresh
  (notify-then-read) and runs the loop once with the instruction and that
  current state. While a run is in flight further updates coalesce.
  `--wake-on-start` runs it once first, before any update (wake 0: every
  watched URI read; a server that sends updates only after a tool call, as
  server-everything does, would otherwise leave the daemon idle).
* Output. Each wake's run is written at once as one JSON line on stdout
  (`on_run`, agentd.output.WakeLine); the final result object follows at exit.
* Self-subscribe. A run's queued `agentd__subscribe` / `agentd__unsubscribe`
  requests (spec §2.4) are applied when it finishes, with the same ownership
  rule.
* Drain. On `stop` (SIGINT/SIGTERM, set by the caller) the daemon stops taking
  wakes, gives an in-flight run `drain_timeout` seconds to finish, then cancels
  it, and returns `interrupted` / exit 130. Everything it starts lives in its
  own TaskGroup.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from agentd.config.model import (
    DEFAULT_DEBOUNCE,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_MAX_SUBSCRIPTIONS,
    DEFAULT_POLL_INTERVAL,
)
from agentd.errors import ReactiveError
from agentd.exitcodes import ExitCode
from agentd.log import log
from agentd.mcp.client.rules.faults import kind as fault_kind
from agentd.mcp.client.seams import AgentToolbox, Observed, ResourceServer
from agentd.mcp.client.toolbox import Unowned, owner_of, resource_servers
from agentd.obs import health, trace
from agentd.output import RunResult, Usage, WakeLine
from agentd.reactive.polling import Poller
from agentd.reactive.router import Router, Wake
from agentd.reactive.waiters import Waiters

if TYPE_CHECKING:  # the loop is imported when a runner is built (loop_runner)
    from agentd.agent.loop import LoopState, Tracer
    from agentd.agent.selftools import SelfTools
    from agentd.config.model import Config, RunLimits
    from agentd.intelligence.base import Intelligence

_log = log.bind(component="reactive")


def named_uri(entry: str) -> tuple[str | None, str]:
    """(`server`, `URI`) of a `--subscribe server=URI` entry; (None, entry) for a
    bare URI. No URI scheme holds `=`, so an `=` before the first `:` can only
    name a server."""
    eq, colon = entry.find("="), entry.find(":")
    if 0 < eq and (colon < 0 or eq < colon):
        return entry[:eq].strip(), entry[eq + 1:]
    return None, entry


class WakeRun(msgspec.Struct):
    """What one loop run for a wake produced (and queued for the daemon)."""

    status: str
    partial: bool = False
    result: Any = None
    steps: int = 0
    usage: Usage = msgspec.field(default_factory=Usage)
    subscribe: list[str] = []
    unsubscribe: list[str] = []
    servers: dict[str, str] = {}  # a queued subscribe's URI -> the server the run named


class Read(msgspec.Struct):
    """One URI's state as read fresh for a wake."""

    uri: str
    server: str | None
    text: str
    is_error: bool = False
    updates: int = 0  # notifications coalesced into this wake for this URI


RunWake = Callable[[Wake, list[Read]], Awaitable[WakeRun]]
OnRun = Callable[[Wake, list[Read], WakeRun], None]

START_SEQ = 0  # the `--wake-on-start` wake's number (the router's count from 1)


class ReactiveDaemon:
    """See the module docstring. `run_wake` runs the loop once for a wake."""

    def __init__(self, toolbox: AgentToolbox, run_wake: RunWake, *, run_id: str = "",
                 debounce: float = DEFAULT_DEBOUNCE,
                 drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
                 updates: asyncio.Queue[tuple[str, str]] | None = None,
                 waiters: Waiters | None = None, router: Router | None = None,
                 max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS,
                 poll_interval: float = DEFAULT_POLL_INTERVAL,
                 wake_on_start: bool = False, on_run: OnRun | None = None) -> None:
        self.toolbox = toolbox
        self.run_wake = run_wake
        self.wake_on_start = wake_on_start
        self.on_run = on_run  # told each wake's run as it ends (the stdout line)
        self.run_id = run_id
        self.drain_timeout = drain_timeout
        self.max_subscriptions = max_subscriptions
        self.waiters = waiters if waiters is not None else Waiters()
        self.router = router if router is not None else Router(debounce,
                                                               claim=self.waiters.claim)
        self.updates = updates if updates is not None else toolbox.updates
        self.watched: dict[str, str] = {}  # uri -> owning server name
        self.modes: dict[str, str] = {}  # uri -> "subscribe", "listen" or "poll"
        # None: polling disabled (--poll-interval 0); a URI that needs it is refused
        self.poller = (Poller(poll_interval, self._poll_read, self._poll_wake)
                       if poll_interval > 0 else None)
        self.self_watched: set[str] = set()  # those a run asked for (capped)
        self.runs = 0
        self.steps = 0
        self.usage = Usage()
        self.last: WakeRun | None = None
        self.status = "running"
        self.ready = asyncio.Event()  # set once the --subscribe URIs are handled

    # -- subscriptions ---------------------------------------------------
    def _client(self, name: str) -> ResourceServer | None:
        return next((c for c in resource_servers(self.toolbox) if c.name == name), None)

    def _refuse(self, uri: str, origin: str, cause: str, reason: str,
                server: str | None = None) -> bool:
        _log.warning("reactive.refused", uri=uri, origin=origin, server=server, cause=cause,
                     reason=reason, detail="not watched; no wake will come from this URI")
        return False

    def _watch(self, uri: str, server: str, mode: str, origin: str) -> None:
        self.watched[uri] = server
        self.modes[uri] = mode
        if origin == "self":
            self.self_watched.add(uri)

    async def subscribe(self, uri: str, *, origin: str = "flag",
                        server: str | None = None) -> bool:
        """Watch `uri` on its owner (the toolbox's one rule, `owner_of`; or the
        named `server`): subscribed, listened to, or polled when the owner can
        deliver no `updated` for it. False (logged `reactive.refused`) if it is
        not watched. A `--subscribe` URI (`origin="flag"`) that could only be
        polled while polling is disabled raises `ReactiveError` (exit 6)."""
        uri = uri.strip()
        if not uri or "{" in uri or "}" in uri:
            return self._refuse(uri, origin, "invalid", "a concrete URI is needed, not a template")
        if uri in self.watched:
            return True
        if origin == "self" and len(self.self_watched) >= self.max_subscriptions:
            return self._refuse(uri, origin, "cap",
                                f"--max-subscriptions ({self.max_subscriptions}) reached")
        owner = owner_of(uri, resource_servers(self.toolbox), server, subscribe=True)
        if isinstance(owner, Unowned):
            if origin == "flag" and owner.ambiguous:
                # the operator must name the server: refuse to start (a URI no
                # connected server serves stays a warning: spec §3's worker, or
                # an optional server that is down)
                raise ReactiveError(uri, server, owner.reason, polling_off=False)
            return self._refuse(uri, origin, "ambiguous" if owner.ambiguous else "unowned",
                                owner.reason)
        if not owner.capabilities.resources_subscribe:
            return await self._fallback(uri, owner.name, origin, "unsupported",
                                        "the server does not advertise resources.subscribe")
        try:
            ok = await owner.subscribe(uri)
        except Exception as exc:  # a server refusing the URI is not fatal
            return await self._fallback(uri, owner.name, origin, "failed",
                                        f"the subscribe failed ({fault_kind(exc)}): "
                                        f"{type(exc).__name__}: {exc}"[:300])
        if ok is False:
            return await self._fallback(uri, owner.name, origin, "not_honoured",
                                        "the server did not take the subscription")
        channel = await owner.update_channel()
        if channel is None:
            return await self._fallback(uri, owner.name, origin, "no_channel",
                                        "the server offers no stream that could carry "
                                        "notifications/resources/updated to us (no GET "
                                        "stream, or no session to tie the subscription to)")
        mode = "listen" if channel == "listen" else "subscribe"
        self._watch(uri, owner.name, mode, origin)
        _log.info("reactive.listening" if mode == "listen" else "reactive.subscribed",
                  uri=uri, origin=origin, server=owner.name,
                  owner="named" if server is not None else "rule")
        return True

    async def _fallback(self, uri: str, server: str, origin: str, cause: str,
                        reason: str) -> bool:
        """Poll `uri` (its owner cannot deliver `updated` for it), or refuse it
        when polling is disabled: at startup that ends the daemon (exit 6)."""
        if self.poller is None:
            if origin == "flag":
                raise ReactiveError(uri, server, reason)
            return self._refuse(uri, origin, cause, f"{reason}; polling is disabled "
                                                    "(--poll-interval 0)", server)
        self._watch(uri, server, "poll", origin)
        _log.warning("reactive.polling", uri=uri, origin=origin, server=server, cause=cause,
                     reason=reason, interval=self.poller.plan.interval)
        await self.poller.add(uri)  # the baseline read
        return True

    def watch_report(self) -> list[dict[str, str]]:
        """Each watched URI, its server and how it is watched, for /readyz and
        `agent://status` (agentd.obs.health)."""
        return [{"uri": u, "server": s, "mode": self.modes.get(u, "subscribe")}
                for u, s in sorted(self.watched.items())]

    async def unsubscribe(self, uri: str, *, origin: str = "flag") -> None:
        uri = uri.strip()
        server = self.watched.pop(uri, None)
        self.self_watched.discard(uri)
        self.modes.pop(uri, None)
        if server is None:
            return
        if self.poller is not None:
            self.poller.remove(uri)
        client = self._client(server)
        if client is not None:
            try:
                await client.unsubscribe(uri)
            except Exception as exc:
                _log.warning("reactive.unsubscribe.failed", uri=uri, server=server,
                             error=str(exc)[:300])
        _log.info("reactive.unsubscribed", uri=uri, origin=origin, server=server)

    async def apply_queued(self, subscribe: Iterable[str], unsubscribe: Iterable[str],
                           servers: Mapping[str, str] | None = None) -> None:
        """Apply a finished run's self-subscribe queue (spec §2.4), in order;
        `servers` maps a URI to the server its run named for it."""
        for uri in unsubscribe:
            await self.unsubscribe(uri, origin="self")
        for uri in subscribe:
            await self.subscribe(uri, origin="self", server=(servers or {}).get(uri))

    # -- polling ---------------------------------------------------------
    async def _poll_read(self, uri: str) -> Observed:
        """A polled read: the toolbox read, under the run's fault policy."""
        return await self.toolbox.read_resource(uri, server=self.watched.get(uri))

    def _poll_wake(self, uri: str) -> None:
        server = self.watched.get(uri)
        if server is not None:
            self.updates.put_nowait((server, uri))

    # -- wakes -----------------------------------------------------------
    async def read_fresh(self, wake: Wake) -> list[Read]:
        """Notify-then-read: the current state of every woken, watched URI."""
        uris = list(wake.uris)
        if wake.resync:  # the pending set overflowed: re-read everything watched
            uris += [u for u in self.watched if u not in wake.counts]
        reads: list[Read] = []
        for uri in uris:
            server = self.watched.get(uri)
            if server is None:
                _log.debug("reactive.update.unwatched", uri=uri)
                continue
            client = self._client(server)
            if client is None:
                continue
            try:
                obs = await client.read_resource(uri)
            except Exception as exc:
                # Not handed to the model as state: the client re-subscribes and
                # synthesizes an update on reconnect, so this URI wakes again.
                # The client's decision (agentd.mcp.client.rules.faults) names the kind; the
                # daemon never ends on it: it reconnects with backoff instead.
                _log.warning("reactive.read.failed", uri=uri, server=server,
                             kind=fault_kind(exc), error=f"{type(exc).__name__}: {exc}"[:300])
                if self.poller is not None and self.modes.get(uri) == "poll":
                    self.poller.plan.invalidate(uri)  # no reconnect re-delivers it: a poll will
                continue
            reads.append(Read(uri=uri, server=server, text=obs.text,
                              is_error=bool(obs.is_error), updates=wake.counts.get(uri, 0)))
        return reads

    async def handle(self, wake: Wake) -> WakeRun | None:
        reads = await self.read_fresh(wake)
        if not reads and wake.seq != START_SEQ:  # the start wake runs on the instruction alone
            _log.info("reactive.wake.skipped", seq=wake.seq,
                      reason="nothing watched could be read")
            return None
        t0 = time.perf_counter()
        try:
            outcome = await self.run_wake(wake, reads)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed run does not end the daemon
            _log.error("reactive.run.failed", seq=wake.seq,
                       error=f"{type(exc).__name__}: {exc}"[:500])
            outcome = WakeRun(status="failed", partial=True)
        self.runs += 1
        self.steps += outcome.steps
        self.usage.add(outcome.usage)
        self.last = outcome
        _log.info("reactive.run", seq=wake.seq, status=outcome.status, steps=outcome.steps,
                  uris=[r.uri for r in reads],
                  duration_ms=round((time.perf_counter() - t0) * 1000, 3))
        if self.on_run is not None:
            self.on_run(wake, reads, outcome)
        await self.apply_queued(outcome.subscribe, outcome.unsubscribe, outcome.servers)
        return outcome

    async def _traced(self, wake: Wake) -> WakeRun | None:
        """`handle(wake)` in its own trace (a worker lives for days: one trace per wake)."""
        if not trace.enabled:
            return await self.handle(wake)
        attrs: dict[str, Any] = {"agentd.wake.seq": wake.seq, "agentd.wake.uris": len(wake.uris),
                                 "agentd.wake.coalesced": wake.coalesced}
        with trace.span("agentd.reactive.wake", root=True, **attrs):
            return await self.handle(wake)

    async def start(self, uris: Iterable[str]) -> None:
        """Subscribe the `--subscribe` entries: `URI`, or `server=URI` to name the
        owner (like `--mcp name=<endpoint>`)."""
        for entry in uris:
            server, uri = named_uri(entry)
            await self.subscribe(uri, origin="flag", server=server)
        _log.info("reactive.ready", watched=sorted(self.watched),
                  modes={u: self.modes[u] for u in sorted(self.watched)},
                  servers=[c.name for c in resource_servers(self.toolbox)])
        self.ready.set()

    async def serve(self, stop: asyncio.Event, subscribe: Iterable[str] = ()) -> RunResult:
        """Subscribe, then run once per wake until `stop` is set; drain."""
        unreport = health.set_watched(self.watch_report)
        try:
            await self.start(subscribe)
            await self._loop(stop)
        finally:
            unreport()
        self.status = "interrupted"
        stats = self.router.stats()
        _log.info("reactive.drained", runs=self.runs, watched=len(self.watched), **stats)
        last = self.last
        return RunResult(run_id=self.run_id, status="interrupted",
                         partial=bool(last.partial) if last else False,
                         result=last.result if last else None,
                         steps=self.steps, usage=self.usage)

    async def _loop(self, stop: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as tg:
            pump = tg.create_task(self.router.pump(self.updates))
            stopped = tg.create_task(stop.wait())
            polling = tg.create_task(self.poller.run()) if self.poller is not None else None
            try:
                if self.wake_on_start and not stop.is_set():
                    start = Wake(seq=START_SEQ, uris=tuple(self.watched), counts={})
                    _log.info("reactive.wake.start", uris=list(start.uris))
                    await self._run_drained(tg, start, stopped)
                while not stop.is_set():
                    waiting = tg.create_task(self.router.next_wake())
                    await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
                    if not waiting.done():
                        waiting.cancel()
                        break
                    wake = waiting.result()
                    if wake is None:  # the router closed and nothing is left
                        break
                    await self._run_drained(tg, wake, stopped)
            finally:
                self.router.close()
                pump.cancel()
                stopped.cancel()
                if polling is not None:
                    polling.cancel()


    async def _run_drained(self, tg: asyncio.TaskGroup, wake: Wake,
                           stopped: asyncio.Task[Any]) -> None:
        """Run `wake`; a signal meanwhile gives it `drain_timeout` to finish."""
        run = tg.create_task(self._traced(wake))
        await asyncio.wait({run, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not run.done():  # signalled mid-run: bounded drain
            _log.info("reactive.draining", seq=wake.seq, drain_timeout=self.drain_timeout)
            await asyncio.wait({run}, timeout=self.drain_timeout)
            if not run.done():
                run.cancel()
                _log.warning("reactive.drain.cancelled", seq=wake.seq)
        if run.done() and not run.cancelled() and run.exception() is not None:
            raise run.exception()  # type: ignore[misc]


EXIT_INTERRUPTED = int(ExitCode.INTERRUPTED)


# -- the loop, once per wake ------------------------------------------------

def wake_message(wake: Wake, reads: Sequence[Read], *, limit: int = 64 * 1024) -> str:
    """The user message a wake adds after the instruction: what changed, and
    its current state read just now (fenced: server-controlled text)."""
    from agentd.agent import prompt as P

    if wake.seq == START_SEQ:
        head = (f"[agentd] reactive wake #{wake.seq} (--wake-on-start): the run at start, "
                f"before any update; {len(reads)} watched resource(s). Their current "
                "state, read now:")
    else:
        head = (f"[agentd] reactive wake #{wake.seq}: {len(reads)} watched resource(s) "
                f"changed ({wake.coalesced} update(s) coalesced). Their current state, "
                "read now:")
    parts = [head]
    for r in reads:
        text, size = P.cut_utf8(r.text, limit)
        body = P.fence("resource", text, uri=r.uri, server=r.server or "",
                       status="error" if r.is_error else "ok")
        if size > limit:
            body += f"\n[agentd] resource cut: showing the first {limit} of {size} bytes"
        parts.append(body)
    return "\n".join(parts)


def loop_runner(intelligence: Intelligence, toolbox: AgentToolbox, *, instruction: str,
                output_contract: str | None, budgets: RunLimits,
                selftools: Callable[[], SelfTools], deadline: float | None = None,
                tracer: Tracer | None = None,
                on_step: Callable[[LoopState], None] | None = None,
                spent: Callable[[], int] | None = None) -> RunWake:
    """A `run_wake` that runs `agentd.agent.loop.run_task` once per wake.

    `selftools()` makes the run's fresh `SelfTools` (its subscribe queue is
    per run); the instruction stays the first user message and the wake (URIs
    and fresh state) follows it. `deadline` bounds each wake's run."""
    from agentd.agent.loop import LoopState, run_task
    from agentd.intelligence.base import user

    async def run_wake(wake: Wake, reads: list[Read]) -> WakeRun:
        tools = selftools()
        state = LoopState()
        history = [user(wake_message(wake, reads, limit=budgets.observation_bytes))]
        try:
            async with asyncio.timeout(deadline):
                outcome = await run_task(intelligence, toolbox, tools, instruction=instruction,
                                         output_contract=output_contract, budgets=budgets,
                                         state=state, tracer=tracer, history=history,
                                         on_step=on_step, spent=spent)
            status, partial, result = outcome.status, outcome.partial, outcome.result
        except TimeoutError:
            status, partial, result = "deadline", True, state.last_content
        return WakeRun(status=status, partial=partial, result=result, steps=state.steps,
                       usage=state.usage,
                       subscribe=list(tools.subscriptions),
                       unsubscribe=list(tools.unsubscriptions),
                       servers=dict(tools.subscription_servers))

    return run_wake


async def run_reactive(config: Config, toolbox: AgentToolbox, run_wake: RunWake,
                       stop: asyncio.Event, *,
                       run_id: str = "", waiters: Waiters | None = None,
                       router: Router | None = None,
                       emit: Callable[[WakeLine], None] | None = None
                       ) -> tuple[RunResult, int]:
    """The whole reactive mode for `agentd.app.run`: (the stdout object, exit code).

    `emit` is given each wake's `WakeLine` as its run ends (the caller writes it
    to stdout). Returns when `stop` is set (the caller's SIGINT/SIGTERM
    handler), after the bounded drain: status `interrupted`, exit 130."""
    def on_run(wake: Wake, reads: list[Read], run: WakeRun) -> None:
        if emit is not None:
            emit(WakeLine(run_id=run_id, wake=wake.seq, status=run.status,
                          partial=run.partial, result=run.result, steps=run.steps,
                          usage=run.usage, uris=[r.uri for r in reads]))

    daemon = ReactiveDaemon(toolbox, run_wake, run_id=run_id, debounce=config.debounce,
                            drain_timeout=config.drain_timeout, waiters=waiters,
                            router=router, max_subscriptions=config.max_subscriptions,
                            poll_interval=config.poll_interval,
                            wake_on_start=config.wake_on_start, on_run=on_run)
    result = await daemon.serve(stop, config.subscribe)
    return result, EXIT_INTERRUPTED
