"""Subscriptions of one MCP client: the two routes an update takes, and
negotiation by need.

:class:`Subscriptions` is one part of :class:`~agentd.mcp.client.facade.MCPClient`
with its own state (the subscribed URIs, the update stream's task, whether a
move to 2025-11-25 was refused).  The revision the handshake chose names the
route (:attr:`agentd.mcp.client.rules.revision.Revision.channel`), and the route does the
IO of that revision:

* ``subscribe`` (:class:`SessionRoute`, 2025-11-25): ``resources/subscribe``,
  and the session's standalone GET stream, whose loss starts a recovery; on a
  reconnect every subscription is re-issued and one ``updated`` synthesized
  per watched URI (edge -> level), then the catalogue re-listed.  A server
  that answers the GET with 405 (a JSON-only deployment) accepts a
  subscription it can never deliver: no channel (None).  So does one that
  gives no ``Mcp-Session-Id`` (supergateway stateless, the TypeScript SDK's
  stateless mode: a fresh server per request): its notifications belong to a
  session, and the one that took our subscribe ended with that request,
  whatever a GET stream then shows.
* ``listen`` (:class:`ListenRoute`, 2026-07-28): a URI of the
  ``subscriptions/listen`` filter (:class:`~agentd.mcp.client.listen_stream.Listener`),
  which re-opens and resyncs by itself; the catalogue is re-listed on a
  reconnect only where its ttl ran out.

A 2026-07-28 server whose listen cannot deliver is moved to 2025-11-25 first
(the rule is :func:`agentd.mcp.client.rules.negotiate.renegotiate_for_updates`, asked of the
revision).  The reactive daemon asks :meth:`Subscriptions.channel` after
subscribing and polls a URI with no channel instead of waiting forever
(docs/reactive.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from agentd.errors import HandshakeError, ToolFault
from agentd.log import Logger
from agentd.mcp.client.connection import Connection
from agentd.mcp.client.listen_stream import Listener
from agentd.mcp.client.recovery import Recovery
from agentd.mcp.client.request_loop import EXPIRED, RequestLoop
from agentd.mcp.client.rules.faults import (
    HTTPStatusError,
    RetryPolicy,
    RPCError,
    SessionExpired,
    TransportError,
)
from agentd.mcp.client.rules.revision import Channel
from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt

__all__ = ["Catalogue", "ListenRoute", "SessionRoute", "Subscriptions"]

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any] | None"]


class Catalogue(Protocol):
    """What a (re)connect and a listen resync ask of the client's catalogue."""

    async def relist(self, *, only_stale: bool) -> None:
        """List the tools and resources the server offers (only those whose ttl
        ran out when ``only_stale``)."""

    def relist_changed(self, honoured: m26.SubscriptionFilter) -> None:
        """A list change may have been missed: re-read it where the ttl allows."""


class Route(Protocol):
    """The IO of one revision's update route (see the module docstring)."""

    def open(self, *, first: bool) -> asyncio.Task[Any] | None: ...
    async def restore(self, *, first: bool) -> None: ...
    async def subscribe(self, uri: str) -> bool: ...
    async def unsubscribe(self, uri: str) -> None: ...
    async def channel(self) -> Channel | None: ...


class SessionRoute:
    """``resources/subscribe`` and the GET stream (2025-11-25)."""

    def __init__(self, name: str, log: Logger, conn: Connection, requests: RequestLoop,
                 recovery: Recovery, subscriptions: set[str],
                 updates: asyncio.Queue[tuple[str, str]], catalogue: Catalogue, *,
                 spawn: Spawn, init_timeout: float) -> None:
        self.name = name
        self.log = log
        self._conn = conn
        self._requests = requests
        self._recovery = recovery
        self._subscriptions = subscriptions  # the client's set (shared, not copied)
        self._updates = updates
        self._catalogue = catalogue
        self._spawn = spawn
        self._init_timeout = init_timeout

    def open(self, *, first: bool) -> asyncio.Task[Any] | None:
        return self._spawn(self._get_stream(self._conn.generation), "listen")

    async def restore(self, *, first: bool) -> None:
        """On a reconnect, re-issue every subscription and synthesize one
        ``updated`` per watched URI; then list the catalogue."""
        if not first:
            watched = sorted(self._subscriptions)
            for uri in watched:
                try:
                    await self._requests.request(mt.RESOURCES_SUBSCRIBE,
                                                 mt.SubscribeParams(uri=uri))
                except (ToolFault, HandshakeError) as exc:
                    self.log.warning("mcp.subscribe.restore_failed", uri=uri, error=str(exc))
            # edge -> level: a change missed while disconnected is not lost
            for uri in watched:
                self._updates.put_nowait((self.name, uri))
            self.log.info("mcp.reconnected", generation=self._conn.generation,
                          resubscribed=len(watched))
        await self._catalogue.relist(only_stale=False)

    async def subscribe(self, uri: str) -> bool:
        await self._requests.request(mt.RESOURCES_SUBSCRIBE, mt.SubscribeParams(uri=uri))
        self._subscriptions.add(uri)
        return True

    async def unsubscribe(self, uri: str) -> None:
        if self._conn.session.capabilities.resources_subscribe and self._recovery.connected:
            with contextlib.suppress(ToolFault):
                await self._requests.request(mt.RESOURCES_UNSUBSCRIBE,
                                             mt.UnsubscribeParams(uri=uri))

    async def channel(self) -> Channel | None:
        """The GET stream, once it answered (at most ``init_timeout`` seconds: a
        server that has not answered the GET by then is taken to offer none)."""
        t = self._conn.transport
        if t is None or not t.session_id:  # no session to tie the subscription to
            return None
        if not t.get_known.is_set():
            try:
                async with asyncio.timeout(self._init_timeout):
                    await t.get_known.wait()
            except TimeoutError:
                return None
        return "subscribe" if t.get_offered else None

    async def _get_stream(self, generation: int) -> None:
        """The 2025-11-25 standalone GET stream; its loss starts a recovery."""
        t = self._conn.transport
        assert t is not None
        recovery = self._recovery
        try:
            await t.listen()
        except SessionExpired:
            if generation != self._conn.generation:
                return
            # A 404 on GET may only mean "no GET route": ask the session itself.
            try:
                await self._conn.ping(recovery.ping_timeout)
            except SessionExpired as exc:
                recovery.trigger(expired=True, reason=f"GET stream: {exc}", event=EXPIRED)
            except (TransportError, HTTPStatusError, RPCError, TimeoutError):
                pass  # the pinger / the next request will find out
            else:
                t.get_offered = False
                self.log.info("mcp.stream.not_offered", status=404)
        except (TransportError, HTTPStatusError) as exc:
            if generation == self._conn.generation:
                recovery.trigger(expired=False, reason=f"stream lost: {exc}")
        else:
            if generation == self._conn.generation:
                self.log.info("mcp.stream.not_offered", status=t.not_offered)


class ListenRoute:
    """A URI of the ``subscriptions/listen`` filter (2026-07-28)."""

    def __init__(self, log: Logger, conn: Connection, listener: Listener,
                 subscriptions: set[str], catalogue: Catalogue) -> None:
        self.log = log
        self._conn = conn
        self.listener = listener
        self._subscriptions = subscriptions
        self._catalogue = catalogue

    def open(self, *, first: bool) -> asyncio.Task[Any] | None:
        """The listen stream; on a reconnect, once it is acknowledged, it
        synthesizes one ``updated`` per watched URI (the §1.6 rule)."""
        return self.listener.start(self._conn.generation, resync=not first)

    async def restore(self, *, first: bool) -> None:
        """The catalogue, re-listed on a reconnect only where its ttl ran out."""
        await self._catalogue.relist(only_stale=not first)
        if not first:
            self.log.info("mcp.reconnected", generation=self._conn.generation,
                          resubscribed=len(self._subscriptions))

    async def subscribe(self, uri: str) -> bool:
        return await self.listener.subscribe(uri)

    async def unsubscribe(self, uri: str) -> None:
        self.listener.unsubscribe(uri)

    async def channel(self) -> Channel | None:
        return "listen"


class Subscriptions:
    """``subscribe``/``unsubscribe``, the update stream and the renegotiation they
    may need; see the module docstring."""

    def __init__(self, name: str, log: Logger, conn: Connection, requests: RequestLoop,
                 recovery: Recovery, updates: asyncio.Queue[tuple[str, str]],
                 catalogue: Catalogue, *, policy: RetryPolicy, spawn: Spawn,
                 init_timeout: float) -> None:
        self.log = log
        self._conn = conn
        self._recovery = recovery
        self._updates = updates
        self._catalogue = catalogue
        self._init_timeout = init_timeout
        self.uris: set[str] = set()  # the subscribed URIs
        self.legacy_refused = False  # renegotiating at 2025-11-25 failed: stay at 2026-07-28
        self._renegotiating = asyncio.Lock()
        self.stream: asyncio.Task[Any] | None = None  # the GET stream's or the listen stream's
        self.listener = Listener(conn, log, subscriptions=self.uris, policy=policy,
                                 init_timeout=init_timeout, spawn=spawn,
                                 closing=lambda: recovery.closing,
                                 on_unreachable=lambda why: recovery.trigger(
                                     expired=True, reason=why),
                                 on_resync=self._resync)
        self._routes: dict[Channel, Route] = {
            "subscribe": SessionRoute(name, log, conn, requests, recovery, self.uris, updates,
                                      catalogue, spawn=spawn, init_timeout=init_timeout),
            "listen": ListenRoute(log, conn, self.listener, self.uris, catalogue),
        }

    @property
    def _route(self) -> Route:
        return self._routes[self._conn.session.revision.channel]

    # ------------------------------------------------------------ the stream

    async def restore(self, *, first: bool) -> None:
        """What every (re)connect does: the update stream, then the route's restore."""
        self.stream = self._route.open(first=first)
        await self._route.restore(first=first)

    def stop_stream(self) -> None:
        stream = self.stream
        if stream is not None and stream is not asyncio.current_task():
            stream.cancel()

    async def channel(self) -> Channel | None:
        """The channel an ``updated`` for a subscribed URI would come on, or None."""
        return await self._route.channel()

    def _resync(self, watched: list[str], honoured: m26.SubscriptionFilter) -> None:
        """A listen stream re-opened after a loss: edge -> level."""
        for uri in watched:
            self._updates.put_nowait((self._conn.name, uri))
        self._catalogue.relist_changed(honoured)

    # ------------------------------------------------------------ subscribe

    async def subscribe(self, uri: str) -> bool:
        """Subscribe one concrete URI on the revision's route (a server whose
        listen cannot deliver is moved to 2025-11-25 first).  False (with a
        warning) when the server cannot deliver updates: the client degrades
        instead of sending it."""
        if not uri or "{" in uri or "}" in uri:
            raise ValueError(f"subscribe needs a concrete URI, not {uri!r}")
        if self._needs_renegotiation() and await self._renegotiate(uri):
            return await self.subscribe(uri)  # now at 2025-11-25 (agentd/mcp/client/rules/negotiate.py)
        if not self._conn.session.capabilities.resources_subscribe:
            self.log.warning("mcp.subscribe.unsupported", uri=uri)
            return False
        return await self._route.subscribe(uri) or (
            self._needs_renegotiation() and await self.subscribe(uri))  # listen said -32601

    async def unsubscribe(self, uri: str) -> None:
        if uri not in self.uris:
            return
        self.uris.discard(uri)
        await self._route.unsubscribe(uri)

    def _needs_renegotiation(self) -> bool:
        s = self._conn.session
        return s.revision.needs_renegotiation(
            delivers=s.listen_delivers, listen_unsupported=self.listener.unsupported,
            legacy_refused=self.legacy_refused)

    async def _renegotiate(self, uri: str) -> bool:
        """Negotiation by need: this server's 2026-07-28 surface cannot deliver the
        updates a subscription needs, so speak 2025-11-25 to it from now on (a
        reconnect re-initializes it too).  False, logged, when it will not
        initialize: it is discovered again and the subscription degrades."""
        async with self._renegotiating:
            conn = self._conn
            if not conn.session.revision.renegotiable:
                return True  # another subscribe did it meanwhile
            why = ("subscriptions/listen answered -32601" if self.listener.unsupported
                   else "server/discover says resources.subscribe: false")
            if self.stream is not None:
                self.stream.cancel()
            self._recovery.up.clear()
            conn.reinitialize = True  # pinned: the handshake re-initializes from now on
            try:
                await conn.handshake(self._init_timeout)
                if not conn.session.capabilities.resources_subscribe:  # nothing gained
                    raise HandshakeError("no resources.subscribe at 2025-11-25 either")
            except HandshakeError as exc:
                self.legacy_refused = True
                conn.reinitialize = False
                self.log.warning("mcp.renegotiate.failed", uri=uri, reason=why,
                                 error=str(exc)[:300])
                self._recovery.trigger(expired=True, event="mcp.reconnecting",
                                       reason="renegotiation failed: reconnecting at the "
                                              "revision server/discover offered")
                return False
            self.log.info("mcp.renegotiated", uri=uri, reason=why,
                          protocol_version=conn.session.protocol_version)
            await self._recovery.after_connect(first=not self.uris)
            return True
