"""The IO around :class:`~agentd.pool.discovery.Discovery`: resolve, identify, publish.

Every ``interval`` seconds the loop resolves the ``--pool-dns`` name through
the :class:`Resolver` seam (:class:`SystemResolver`: the event loop's
``getaddrinfo``, so ``/etc/hosts``, the cluster DNS or any resolver the
system is configured with answers), probes each new address for its signed
id (:meth:`~agentd.pool.link.relay.Relay.probe_url`) and hands the learned peer
list to ``publish``.  A failed resolution or probe is logged
(``pool.dns_failed``) and the last answer kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from typing import Protocol

from agentd.errors import PoolError
from agentd.log import log
from agentd.pool.discovery import Discovery
from agentd.pool.link.relay import Relay

__all__ = ["DnsRefresher", "Resolver", "SystemResolver"]


class Resolver(Protocol):
    async def resolve(self, name: str, port: int) -> list[str]:
        """The addresses ``name`` resolves to (raises OSError when it does not)."""
        ...


class SystemResolver:
    """The system's resolver, through the running loop's ``getaddrinfo``."""

    async def resolve(self, name: str, port: int) -> list[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(
            name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        return [str(info[4][0]) for info in infos]


class DnsRefresher:
    def __init__(self, relay: Relay, discovery: Discovery, name: str, *,
                 resolver: Resolver | None = None, probe_timeout: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.relay = relay
        self.discovery = discovery
        self.name = name
        self.resolver: Resolver = resolver if resolver is not None else SystemResolver()
        self.probe_timeout = probe_timeout
        self.clock = clock
        self._log = log.bind(component="pool")

    async def refresh(self) -> None:
        """One resolution and the probes of its new addresses."""
        d = self.discovery
        try:
            addresses = await self.resolver.resolve(self.name, d.port)
        except (OSError, UnicodeError) as exc:
            self._log.warning("pool.dns_failed", name=self.name, error=type(exc).__name__)
            return
        new = d.resolved(addresses)
        if d.refused:
            self._log.warning("pool.dns_refused", name=self.name, addresses=d.refused,
                              reason="http takes loopback addresses only")
        for url in new:
            try:
                answer = await self.relay.probe_url(url, self.probe_timeout)
            except PoolError as exc:
                self._log.warning("pool.dns_failed", url=url, error=str(exc))
                continue
            d.identified(url, answer.id)
            self._log.info("pool.dns_peer", url=url, peer=answer.id,
                           me=answer.id == d.me)

    async def run(self, stop: asyncio.Event, publish: Callable[[dict[str, str]], None]) -> None:
        """Refresh every ``interval`` seconds until ``stop`` is set, publishing the peers."""
        while not stop.is_set():
            if self.discovery.due(self.clock()):
                await self.refresh()
                publish(self.discovery.peers())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, self.discovery.next_resolve
                                                        - self.clock()))
