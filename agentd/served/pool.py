"""The self-MCP in pool mode: owner-naming handles outside, ``served.N`` inside.

The backend keeps minting ``served.{n}``; this object gives each served run a
pool handle (:func:`agentd.pool.handles.mint_handle`, bound to the spawning
principal) and decides, for a handle a caller names, whether it is this
worker's (-> its ``served.N``), another member's (-> relayed to that owner),
a former incarnation's of this worker (-> the terminal "worker lost" body) or
nothing (-> the one unknown-handle answer, with no relay: a forged, altered or
another principal's handle fails the MAC on every worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import Callable
from typing import Any, NamedTuple

from agentd.config import PoolSpec
from agentd.errors import PoolError
from agentd.log import log
from agentd.log_bridge import throttled
from agentd.obs import metrics
from agentd.pool import handles
from agentd.pool.discovery import Discovery
from agentd.pool.dns import DnsRefresher
from agentd.pool.membership import Membership
from agentd.pool.prober import Prober
from agentd.pool.relay import ProbeAnswer, Relay, RelayAnswer, RelayRequest

__all__ = ["HANDLE_HEADER", "HANDLE_TOOLS", "PoolServed", "Where", "lost_body",
           "with_handle_header"]

HANDLE_HEADER = "Handle"  # SEP-2243: 2026-07-28 clients send it as Mcp-Param-Handle
HANDLE_TOOLS = frozenset({"subagent.status", "subagent.send", "subagent.cancel"})


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


class PoolServed:
    """Pool handles for one worker's served runs, and the relay to the others."""

    def __init__(self, spec: PoolSpec, *, capacity: int,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.key = handles.PoolKey(spec.key.encode())
        self.me = spec.id
        self.capacity = capacity  # this worker's --max-subagents: its free slots' ceiling
        self.incarnation = os.urandom(handles.INCARNATION_BYTES)
        self.relay = Relay(self.key, self.me, {p.id: p.url for p in spec.peers},
                           ssl_context=ssl_context, open_members=spec.dns is not None)
        self.membership = Membership(self.me, dead_after=spec.dead_after)
        dns = None
        if spec.dns is not None:  # peers learned from the name's addresses (agentd.pool.dns)
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
        once the owner answers it terminal, unknown (evicted) or it is lost.  False
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
            if peer is not None and (peer.status == "dead" or peer.incarnation
                                     not in (None, ref.incarnation)):
                return Where(lost=lost_body(handle, ref.owner))  # dead, or restarted since
            return Where(owner=ref.owner)
        if ref.incarnation != self.incarnation:  # this worker restarted since
            return Where(lost=lost_body(handle, self.me))
        internal = self.internal(handle)
        if internal is None:  # evicted
            return None
        return Where(internal=internal)

    async def call(self, owner: str, op: str, handle: str, message: str | None,
                   principal: str, *, arguments: dict[str, Any] | None = None) -> RelayAnswer:
        """One operation relayed to ``owner`` (raises a PoolError of kind "unavailable")."""
        request = RelayRequest(op=op, handle=handle, message=message,  # type: ignore[arg-type]
                               arguments=arguments)
        return await self.relay.call(owner, request, principal)

    def probe_answer(self, counts: dict[str, int]) -> ProbeAnswer:
        """This worker's incarnation and free slots (``counts``: the backend's)."""
        return ProbeAnswer(self.incarnation.hex(),
                           max(0, self.capacity - counts.get("running", 0)))

    def share(self, counts: dict[str, int]) -> dict[str, Any]:
        """``agent://status``'s ``pool``: this worker's id, its free slots, its view of
        every peer and how many served runs it holds (spawned here or placed here by peers)."""
        return {"id": self.me, "free": self.probe_answer(counts).free,
                "served_runs": len(self._to_pool),
                "peers": {p: s.status for p, s in sorted(self.membership.peers.items())}}

    def rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`agentd top`'s rows with pool handles for served runs."""
        return [{**r, "handle": self.external(r["handle"])} for r in rows]
