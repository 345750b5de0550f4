"""The self-MCP in pool mode: owner-naming handles outside, ``served.N`` inside.

:class:`PoolBackend` is the served face's backend in a pool
(:class:`agentd.served.backend.ServedBackend`): it wraps the worker's
:class:`~agentd.served.backend.LocalServed`, routes each operation by the
handle's owner (here, relayed, or lost), places a spawn this worker is too full
for on the peer with the most room, watches peers' runs for this worker's
subscribers, and answers peers' relayed operations
(:class:`agentd.pool.link.relay.RelayTarget`).  The self-MCP handler only calls it.

The backend keeps minting ``served.{n}``; this object gives each served run a
pool handle (:func:`agentd.pool.handles.mint_handle`, bound to the spawning
principal) and decides, for a handle a caller names, whether it is this
worker's (-> its ``served.N``), another member's (-> relayed to that owner),
a former incarnation's of this worker (-> the terminal "worker lost" body) or
nothing (-> the one unknown-handle answer, with no relay: a forged, altered or
another principal's handle fails the MAC on every worker).

With a journal (``journal_id``) the worker is *durable*: its incarnation is the
journal's id, so its handles name their runs across restarts (a restarted
worker adopts (:meth:`PoolServed.adopt`) its journaled runs' pool names), its probes
say ``durable: true``, and its peers hold its handles while it is down: an
operation on one is the retryable "not answering" refusal, a subscriber's
watch keeps waiting, and only an answer with another incarnation (the journal
gone: a node loss) makes them "worker lost".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import Callable
from typing import Any, Final, NamedTuple

import msgspec

from agentd.agent.subagents import HandleState, Refusal, SpawnRequest, Unknown
from agentd.config.model import PoolSpec
from agentd.errors import PoolError
from agentd.log import log
from agentd.log_bridge import throttled
from agentd.obs import health, metrics
from agentd.output import Usage
from agentd.pool import handles
from agentd.pool.discovery import Discovery
from agentd.pool.link.dns import DnsRefresher
from agentd.pool.link.prober import Prober
from agentd.pool.link.relay import ProbeAnswer, Relay, RelayAnswer, RelayRequest
from agentd.pool.membership import Membership
from agentd.served.backend import SERVED_CALLER, Body, LocalServed, Subscribed, spawn_body
from agentd.tree.ownership import top_of
from agentd.wire.guard import convert_peer

__all__ = ["HANDLE_HEADER", "HANDLE_TOOLS", "PoolBackend", "PoolServed", "Where", "lost_body",
           "with_handle_header"]

HANDLE_HEADER = "Handle"  # SEP-2243: 2026-07-28 clients send it as Mcp-Param-Handle
HANDLE_TOOLS = frozenset({"subagent.status", "subagent.send", "subagent.cancel"})
WAIT_POLL: Final = 20.0  # a peer's relayed wait for a run's end answers at least this often


class _PlacedSpawn(SpawnRequest, frozen=True, forbid_unknown_fields=True):
    """A peer's placement as this worker decodes it: a member it does not know (a
    newer peer's, or a caller's word like ``async``) is refused, never dropped."""


def _top(handle: str) -> str:
    return ".".join(handle.split(".")[:2])


def with_handle_header(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``x-mcp-header: "Handle"`` on its ``handle`` property: the
    routing hint that lets a balancer send the call straight to the owner
    (docs/operations.md "Pool"); offered in pool mode only, so a single worker's
    tools are unchanged."""
    props = dict(schema["properties"])
    props["handle"] = {**props["handle"], "x-mcp-header": HANDLE_HEADER}
    return {**schema, "properties": props}


def lost_body(handle: str, owner: str) -> dict[str, Any]:
    """The terminal body of a run whose worker is gone (docs/operations.md "Pool")."""
    return {"handle": handle, "status": "failed", "done": True, "partial": False,
            "result": f"worker lost: pool member {owner} that ran this subagent is gone"}


class Where(NamedTuple):
    """Where a handle's operation runs: ``internal`` here, or ``owner``'s relay, or lost."""

    internal: str | None = None
    owner: str | None = None
    lost: dict[str, Any] | None = None
    durable: bool = False  # the handle's owner journals its runs (its incarnation says so)


class PoolServed:
    """Pool handles for one worker's served runs, and the relay to the others."""

    def __init__(self, spec: PoolSpec, *, capacity: int,
                 ssl_context: ssl.SSLContext | None = None,
                 journal_id: bytes | None = None) -> None:
        """``journal_id``: the worker's journal identity (``--journal``), its stable
        incarnation; None: a random one per process, as without a journal."""
        if journal_id is not None and len(journal_id) != handles.INCARNATION_BYTES:
            raise ValueError(f"a journal id has {handles.INCARNATION_BYTES} bytes, "
                             f"not {len(journal_id)}")
        self.key = handles.PoolKey(spec.key.encode())
        self.me = spec.id
        self.capacity = capacity  # this worker's --max-subagents: its free slots' ceiling
        self.durable = journal_id is not None
        self.incarnation = handles.incarnation(
            journal_id if journal_id is not None else os.urandom(handles.INCARNATION_BYTES),
            durable=self.durable)
        self.relay = Relay(self.key, self.me, {p.id: p.url for p in spec.peers},
                           ssl_context=ssl_context, open_members=spec.dns is not None)
        self.membership = Membership(self.me, dead_after=spec.dead_after)
        dns = None
        if spec.dns is not None:  # peers learned from the name's addresses (agentd.pool.link.dns)
            found = Discovery(self.me, spec.dns.scheme, spec.dns.port, spec.dns.interval)
            dns = DnsRefresher(self.relay, found, spec.dns.name,
                               probe_timeout=self.membership.timeout)
        self.prober = Prober(self.relay, self.membership, dns=dns)
        self._to_internal: dict[str, str] = {}  # pool top handle -> served.N
        self._to_pool: dict[str, str] = {}  # served.N -> pool top handle
        self._unobserve = metrics.POOL_PEERS.source(self._peer_counts)
        self._tg: asyncio.TaskGroup | None = None
        self._watches: dict[str, asyncio.Task[None]] = {}  # uri -> its watcher
        self.subscribe_timeout = spec.subscribe_timeout
        self._log = log.bind(component="pool")

    def watches_in(self, tg: asyncio.TaskGroup) -> None:
        """Watchers of peers' runs run in the serving context's TaskGroup."""
        self._tg = tg

    def stop_watches(self) -> None:
        for task in list(self._watches.values()):
            task.cancel()
        self._tg = None

    def watch(self, uri: str, handle: str, owner: str, principal: str,
              ended: Callable[[str], None]) -> bool:
        """Watch a peer's run for this worker's subscribers of ``uri``: ``ended(uri)``
        once the owner answers it terminal, unknown (evicted) or it is lost (a
        durable owner that is down is waited for: its run is journaled).  False
        when this worker is not serving (no TaskGroup to run the watch in)."""
        if self._tg is None:
            return False
        if uri not in self._watches:
            self._watches[uri] = self._tg.create_task(
                self._watch(uri, handle, owner, principal, ended))
        return True

    async def _watch(self, uri: str, handle: str, owner: str, principal: str,
                     ended: Callable[[str], None]) -> None:
        try:
            while (where := self.where(handle, principal)) is not None and where.lost is None:
                try:
                    answer = await self.call(owner, "wait", handle, None, principal)
                except PoolError:  # until the owner answers or is called dead
                    await asyncio.sleep(self.membership.interval)
                    continue
                if answer.kind != "body" or answer.body is None or answer.body.get("done"):
                    break
        finally:
            self._watches.pop(uri, None)
        ended(uri)

    async def admit(self, wanted: dict[str, str], principal: str) -> dict[str, RelayAnswer | None]:
        """The fan-in before a subscribe or listen is answered: for each ``uri -> handle``
        another member owns, that owner's verdict (a relayed ``subscribe``: the run's
        body, or ``unknown``), all asked at once and awaited together for at most
        ``subscribe_timeout`` seconds.  None for a handle whose owner did not answer in
        time (logged, one line per owner): the pool's lost-owner rule holds it --
        subscribed and watched, its ``updated`` due when the owner answers or is
        called dead (docs/operations.md "Pool").  Handles of this worker, of a lost
        owner and unknown ones are not in the answer: the caller decides them here."""
        asks: dict[str, tuple[str, str]] = {}
        for uri, handle in wanted.items():
            where = self.where(handle, principal)
            if where is not None and where.owner is not None:
                asks[uri] = (handle, where.owner)
        answers: dict[str, RelayAnswer | None] = dict.fromkeys(asks)
        if not asks:
            return answers

        async def ask(uri: str, handle: str, owner: str) -> None:
            with contextlib.suppress(PoolError):  # logged by the relay
                answers[uri] = await self.call(owner, "subscribe", handle, None, principal)

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.subscribe_timeout), asyncio.TaskGroup() as tg:
                for uri, (handle, owner) in asks.items():
                    tg.create_task(ask(uri, handle, owner))
        silent: dict[str, int] = {}
        for uri, (_, owner) in asks.items():
            if answers[uri] is None:
                silent[owner] = silent.get(owner, 0) + 1
        for owner, n in sorted(silent.items()):
            throttled(self._log, "warning", "pool.subscribe_unanswered", key=owner, peer=owner,
                      handles=n, timeout=self.subscribe_timeout)
        self._log.info("pool.subscribe_fanned_in", owners=len({o for _, o in asks.values()}),
                       handles=len(asks), unanswered=sum(silent.values()))
        return answers

    def _peer_counts(self) -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {(s,): 0 for s in ("alive", "suspect", "dead")}
        for state in self.membership.peers.values():
            out[(state.status,)] += 1
        return out

    async def close(self) -> None:
        """The relay's connections, and this pool's gauge, go."""
        self._unobserve()
        await self.relay.close()

    def name(self, internal: str, principal: str) -> str:
        """The pool handle of the served run ``internal`` (``served.N``), minted once."""
        top = _top(internal)
        pool = self._to_pool.get(top)
        if pool is None:
            pool = handles.mint_handle(self.key, self.me, self.incarnation,
                                       os.urandom(handles.RANDOM_BYTES), principal)
            self._to_pool[top] = pool
            self._to_internal[pool] = top
        return pool + internal[len(top):]

    def external(self, internal: str) -> str:
        """``internal`` as callers see it (a handle of no served run is unchanged)."""
        top = _top(internal)
        pool = self._to_pool.get(top)
        return pool + internal[len(top):] if pool is not None else internal

    def internal(self, handle: str) -> str | None:
        """The ``served.N`` of a pool handle of this worker (no principal check:
        for cache hints and bookkeeping only)."""
        parts = handle.split(".")
        top = self._to_internal.get(".".join(parts[:3]))
        return top + "".join("." + p for p in parts[3:]) if top is not None else None

    def adopt(self, internal_top: str, pool_handle: str) -> bool:
        """A restarted durable worker's journaled run ``internal_top`` (``served.N``)
        takes back its pool name, so its former handles answer again.  False (and
        nothing adopted) for a name this worker would not have minted: another
        owner's, or another incarnation's (the journal ran under another
        ``--pool-id`` or identity).  The MAC is not checked here: the name comes
        from this worker's own journal, and callers' handles are still checked
        against it, principal included, by :meth:`where`."""
        parts = pool_handle.split(".")
        if len(parts) != 3 or parts[1] != self.me or _top(internal_top) != internal_top:
            return False
        try:
            incarnation = handles.token_incarnation(parts[2])
        except ValueError:
            return False
        if incarnation != self.incarnation:
            return False
        self._to_pool[internal_top] = pool_handle
        self._to_internal[pool_handle] = internal_top
        return True

    def forget(self, internal_top: str) -> None:
        """An evicted run's pool name goes with it (it then reads unknown)."""
        pool = self._to_pool.pop(internal_top, None)
        if pool is not None:
            self._to_internal.pop(pool, None)

    def body(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "handle": self.external(body["handle"])}

    def where(self, handle: str, principal: str) -> Where | None:
        """Where ``handle`` lives for ``principal``; None when it is unknown (forged,
        altered, another principal's, or evicted here: the one unknown answer)."""
        ref = handles.parse_handle(self.key, handle, principal)
        if ref is None:
            return None
        if ref.owner != self.me:
            peer = self.membership.peers.get(ref.owner)
            if peer is not None and not peer.holds(ref.incarnation, durable=ref.durable):
                # dead (and not durable), or answering with another incarnation since
                return Where(lost=lost_body(handle, ref.owner))
            return Where(owner=ref.owner, durable=ref.durable)
        if ref.incarnation != self.incarnation:  # this worker restarted since
            return Where(lost=lost_body(handle, self.me))
        internal = self.internal(handle)
        if internal is None:  # evicted
            return None
        return Where(internal=internal)

    async def call(self, owner: str, op: str, handle: str, message: str | None,
                   principal: str, *, arguments: dict[str, Any] | None = None,
                   durable: bool = False) -> RelayAnswer:
        """One operation relayed to ``owner`` (raises a PoolError of kind "unavailable";
        for a durable owner, in words saying its runs are journaled: retry).  A durable
        owner is one whose probe answer said so, or, ``durable``, whose handle does."""
        request = RelayRequest(op=op, handle=handle, message=message,  # type: ignore[arg-type]
                               arguments=arguments)
        try:
            return await self.relay.call(owner, request, principal)
        except PoolError as exc:
            peer = self.membership.peers.get(owner)
            if not (durable or (peer is not None and peer.durable)):
                raise
            raise PoolError(f"pool member {owner} holding this run is not answering "
                            f"(restarting?); its runs are journaled there: retry ({exc})",
                            kind="unavailable") from None

    def probe_answer(self, counts: dict[str, int]) -> ProbeAnswer:
        """This worker's incarnation, whether it is durable, and its free slots
        (``counts``: the backend's); none while it drains (SIGTERM: peers place
        nothing on a worker that is stopping)."""
        free = 0 if health.draining() else max(0, self.capacity - counts.get("running", 0))
        return ProbeAnswer(self.incarnation.hex(), free, durable=self.durable)

    def share(self, counts: dict[str, int]) -> dict[str, Any]:
        """``agent://status``'s ``pool``: this worker's id, its free slots, its view of
        every peer and how many served runs it holds (spawned here or placed here by peers)."""
        return {"id": self.me, "free": self.probe_answer(counts).free,
                "served_runs": len(self._to_pool),
                "peers": {p: s.status for p, s in sorted(self.membership.peers.items())}}

    def rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`agentd top`'s rows with pool handles for served runs."""
        return [{**r, "handle": self.external(r["handle"])} for r in rows]


class PoolBackend:
    """The served face's backend of a pool worker: this worker's runs through
    ``local`` under their pool names, every other member's relayed to its owner
    (docs/operations.md "Pool")."""

    def __init__(self, local: LocalServed, pool: PoolServed) -> None:
        self.local = local
        self.pool = pool
        self._waiters: dict[str, asyncio.Event] = {}  # served.N -> a peer waits on its end
        self._log = log.bind(component="selfmcp")
        local.on_terminal(self._ended)
        local.backend.on_evicted(self._forget)

    def _ended(self, state: HandleState) -> None:
        waiting = self._waiters.pop(state.handle, None)
        if waiting is not None:  # peers' subscribers, over the relay
            waiting.set()

    def _forget(self, handle: str) -> None:
        """The backend no longer retains ``handle``: an evicted run's pool name is
        forgotten with it."""
        if handle.startswith(SERVED_CALLER + ".") and handle == top_of(handle):
            self.pool.forget(handle)

    # ------------------------------------------------- the served face
    async def spawn(self, request: SpawnRequest, principal: str) -> Body | Refusal:
        body = await self._spawn_here(request, principal)
        if not isinstance(body, Refusal):
            return body
        peer = self._placement()
        if peer is None:
            return body
        # this worker is at its caps: the spawn runs on the peer with the most room
        self._log.info("pool.placed", peer=peer)
        try:
            answer = await self.pool.call(peer, "spawn", "", None, principal,
                                          arguments=msgspec.to_builtins(request))
        except PoolError:  # the peer went away: this worker's refusal stands
            return body
        if answer.kind != "body" or answer.body is None:
            return Refusal(answer.text or "spawn refused")
        return answer.body

    def _placement(self) -> str | None:
        """The peer a refused spawn goes to: only when this worker has no free slot
        left, or drains (a scope refusal stays a refusal)."""
        if self.pool.probe_answer(self.local.counts()).free > 0:
            return None
        return self.pool.membership.place()

    async def _spawn_here(self, request: SpawnRequest, principal: str) -> Body | Refusal:
        state = await self.local.spawned(request, principal)
        if isinstance(state, Refusal):
            return state
        return spawn_body(state, self.pool.name(state.handle, principal))

    async def operate(self, op: str, handle: str, message: str | None,
                      principal: str) -> Body | Refusal | Unknown:
        """The operation wherever the handle lives: here, relayed to its owner, or
        the lost body; `Unknown` by the name the caller used."""
        where = self.pool.where(handle, principal)
        if where is None:
            return Unknown(handle)
        if where.lost is not None:
            return where.lost
        if where.owner is not None:
            answer = await self.pool.call(where.owner, op, handle, message, principal,
                                          durable=where.durable)
            if answer.kind == "refused":
                return Refusal(answer.text or "spawn refused")
            if answer.kind != "body" or answer.body is None:
                return Unknown(handle)
            return answer.body
        assert where.internal is not None
        body = await self.local.operate(op, where.internal, message, principal)
        return self.pool.body(body) if isinstance(body, dict) else Unknown(handle)

    def subscribe(self, uri: str, handle: str, principal: str, verdict: object,
                  ended: Callable[[str], None]) -> Subscribed:
        where = self.pool.where(handle, principal)
        if where is None:
            return "refused"  # unknown, evicted or another's
        if where.lost is not None:
            return "ended"
        if where.owner is not None:  # the owner's verdict, fanned in by admit()
            if isinstance(verdict, RelayAnswer):
                if verdict.kind != "body" or verdict.body is None:
                    return "refused"  # unknown there (evicted): as on one worker
                if verdict.body.get("done"):
                    return "ended"
            # running there, or no answer in time: held and watched until the
            # owner answers terminal or is called dead (the lost-owner rule)
            return "held" if self.pool.watch(uri, handle, where.owner, principal, ended) \
                else "refused"
        assert where.internal is not None
        return self.local.subscribe(uri, where.internal, principal, verdict, ended)

    async def admit(self, wanted: dict[str, str], principal: str) -> dict[str, Any]:
        return await self.pool.admit(wanted, principal)

    def shown(self, handle: str) -> str:
        return self.pool.external(handle)

    def on_terminal(self, callback: Callable[[HandleState], None]) -> None:
        self.local.on_terminal(callback)

    def on_spawned(self, callback: Callable[[], None]) -> None:
        self.local.on_spawned(callback)

    def retained(self, handle: str) -> float | None:
        return self.local.retained(self.pool.internal(handle) or "")

    def counts(self) -> dict[str, int]:
        return self.local.counts()

    def served_usage(self) -> tuple[int, Usage]:
        return self.local.served_usage()

    def rows(self, principal: str | None) -> list[dict[str, Any]]:
        return self.pool.rows(self.local.rows(principal))

    def status_extra(self) -> dict[str, Any]:
        return {"pool": self.pool.share(self.local.counts())}  # this worker's share

    def tool_schema(self, name: str, schema: dict[str, Any]) -> dict[str, Any]:
        return with_handle_header(schema) if name in HANDLE_TOOLS else schema

    # ------------------------------------------ the relay's target
    def probe_answer(self) -> ProbeAnswer:
        """A peer's liveness probe (agentd.pool.link.relay.RelayTarget)."""
        return self.pool.probe_answer(self.local.counts())

    async def relayed(self, request: RelayRequest, principal: str) -> RelayAnswer:
        """A peer's relayed operation (agentd.pool.link.relay.RelayTarget): only on this
        worker's own handles (a relayed handle is never relayed on)."""
        if request.op == "spawn":  # placed here by a peer at its caps: never placed on
            try:
                spawn = convert_peer(request.arguments or {}, _PlacedSpawn, ValueError)
            except ValueError as exc:
                return RelayAnswer("refused", text=f"spawn refused: bad relayed request: {exc}")
            placed = await self._spawn_here(spawn, principal)
            if isinstance(placed, Refusal):
                return RelayAnswer("refused", text=placed.text)
            return RelayAnswer("body", body=placed)
        where = self.pool.where(request.handle, principal)
        if where is not None and where.lost is not None:
            return RelayAnswer("body", body=where.lost)
        if where is None or where.internal is None:  # unknown, or a third member's
            return RelayAnswer("unknown")
        if request.op == "wait":  # a peer's subscriber: answered at the terminal state
            body = await self._wait_terminal(where.internal, principal)
        else:
            body = await self.local.operate(request.op, where.internal, request.message,
                                            principal)
        if not isinstance(body, dict):
            return RelayAnswer("unknown")
        return RelayAnswer("body", body=self.pool.body(body))

    async def _wait_terminal(self, internal: str, principal: str) -> Body | Unknown:
        """The run's body once it is terminal, or as it is after ``WAIT_POLL`` s."""
        state = self.local.state(internal, principal)
        if isinstance(state, HandleState) and not state.done:
            event = self._waiters.setdefault(internal, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), WAIT_POLL)
            state = self.local.state(internal, principal)
        return state if isinstance(state, Unknown) else state.body()
