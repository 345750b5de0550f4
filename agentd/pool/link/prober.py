"""The IO around :class:`~agentd.pool.membership.Membership`: probe each peer, feed it.

Every ``timeout / 2`` seconds (or at once when stopped) the loop ages the
membership, starts the probes it says are due (one ``POST /pool/probe``
each, signed like a relayed request, bounded by the probe timeout) and feeds
every outcome back with the monotonic time it was observed.  Each transition
is logged (``pool.peer``); what a peer's status means for its handles is
read from the membership by whoever answers them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable

from agentd.errors import PoolError
from agentd.log import log
from agentd.pool.link.dns import DnsRefresher
from agentd.pool.link.relay import Relay
from agentd.pool.membership import Membership, Transition

__all__ = ["Prober"]


class Prober:
    def __init__(self, relay: Relay, membership: Membership, *,
                 clock: Callable[[], float] = time.monotonic,
                 dns: DnsRefresher | None = None) -> None:
        self.relay = relay
        self.membership = membership
        self.clock = clock
        self.dns = dns  # --pool-dns: peers learned from the name's addresses
        self.static = dict(relay.peers)  # --pool-peer: always members
        self._log = log.bind(component="pool")

    async def run(self, stop: asyncio.Event) -> None:
        """Probe until ``stop`` is set; in-flight probes end within the probe timeout."""
        m = self.membership
        self._apply(m.set_peers(set(self.relay.peers), self.clock()))
        async with asyncio.TaskGroup() as tg:
            if self.dns is not None:
                tg.create_task(self.dns.run(stop, self.publish))
            while not stop.is_set():
                now = self.clock()
                self._apply(m.tick(now))
                for peer in m.due(now):
                    tg.create_task(self._probe(peer))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), m.timeout / 2)

    async def _probe(self, peer: str) -> None:
        try:
            answer = await self.relay.probe(peer, self.membership.timeout)
            incarnation = bytes.fromhex(answer.incarnation)
        except (PoolError, ValueError):
            self._apply(self.membership.failed(peer, self.clock()))
            return
        self._apply(self.membership.answered(peer, incarnation, answer.free, self.clock(),
                                             durable=answer.durable))

    def publish(self, learned: dict[str, str]) -> None:
        """DNS discovery's peers join the static ones (a static id keeps its URL)."""
        self.relay.peers = {**learned, **self.static}
        self._apply(self.membership.set_peers(set(self.relay.peers), self.clock()))

    def _apply(self, transitions: Iterable[Transition]) -> None:
        for t in transitions:
            if t.status == "alive" and t.lost is None:
                self._log.info("pool.peer", peer=t.peer, status=t.status)
            else:
                # a dead peer says after how long (--pool-dead-after) it was called so
                extra = {"dead_after": self.membership.dead_after} if t.status == "dead" else {}
                self._log.warning("pool.peer", peer=t.peer, status=t.status,
                                  runs_lost=t.lost is not None, **extra)
