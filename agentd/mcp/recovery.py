"""Liveness and reconnection of one MCP client (the IO over :class:`Liveness`).

A mixin of :class:`~agentd.mcp.client.MCPClient` (as :mod:`agentd.mcp.channel`
is), so the client module holds the API and this one the recovery ladder:

* what every (re)connect does next (:meth:`_after_connect`): the GET stream
  or the listen stream, the subscriptions re-issued and one ``updated``
  synthesized per watched URI (edge -> level), the catalogue re-listed --
  at 2026-07-28 only where :class:`~agentd.mcp.catalogue.Freshness` says its
  ttl ran out;
* the idle pinger: :class:`~agentd.mcp.liveness.Liveness` says when a ping is
  due and when missed pings make the server stale; a stale server is
  reconnected on new connections, or -- in task mode (``reconnect_stale``
  False) -- given up for good (:meth:`_give_up`, the fault policy decides);
* the 2025-11-25 standalone GET stream, whose loss starts a recovery;
* :meth:`_trigger_recover`: one recovery at a time, under the backoff policy,
  probing a session that may have survived a network blip before
  re-initializing; requests wait for it (:meth:`_wait_connected`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

from agentd.errors import HandshakeError, ToolFault
from agentd.log import Logger
from agentd.mcp.catalogue import Freshness
from agentd.mcp.client_session import ClientSession
from agentd.mcp.connection import Connection
from agentd.mcp.faults import HTTPStatusError, RetryPolicy, RPCError, SessionExpired, TransportError
from agentd.mcp.http_transport import DELETE_LIMIT, StreamableHTTPTransport
from agentd.mcp.listen import Listener
from agentd.mcp.liveness import STALE_AFTER_MISSES, Reconnect
from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt

__all__ = ["EXPIRED", "Reconnecting"]

EXPIRED: Final = "mcp.session.expired"  # the server no longer knows our session


class Reconnecting:
    """The client's liveness and recovery; see the module docstring."""

    name: str
    log: Logger
    policy: RetryPolicy
    gone: str | None
    stale: bool
    last_error: str
    reconnect_stale: bool
    ping_interval: float | None
    ping_timeout: float
    init_timeout: float
    on_gone: Callable[[Any, str], None] | None
    _conn: Connection
    _session: ClientSession
    _connected: asyncio.Event
    _closing: bool
    _kick: asyncio.Event
    _recovering: asyncio.Task | None
    _listener: asyncio.Task | None
    _spawn: Callable[[Coroutine, str], asyncio.Task | None]
    subscriptions: set[str]
    updates: asyncio.Queue
    _listen: Listener
    _fresh: Freshness
    _request: Callable[..., Coroutine[Any, Any, Any]]
    _schedule_relist: Callable[[str, Callable[[], Coroutine]], None]
    list_tools: Callable[[], Coroutine[Any, Any, Any]]
    _refresh_resources: Callable[[], Coroutine[Any, Any, None]]

    @property
    def _transport(self) -> StreamableHTTPTransport | None:
        return self._conn.transport

    async def _wait_connected(self) -> None:
        if self._connected.is_set():
            return
        if self.gone is not None:
            raise ToolFault(self.name, f"server gone: {self.gone}", retryable=False,
                            cause="stale" if self.stale else "gone")
        if self._closing:
            raise ToolFault(self.name, "client closed", retryable=False, cause="closed")
        self._kick.set()  # a reconnect sleeping in its backoff tries again now
        try:
            async with asyncio.timeout(self.policy.reconnect_wait):
                await self._connected.wait()
        except TimeoutError:
            last = f": {self.last_error}" if self.last_error else ""
            raise ToolFault(self.name, "server unavailable (reconnecting)" + last,
                            retryable=True) from None
        if self.gone is not None:
            raise ToolFault(self.name, f"server gone: {self.gone}", retryable=False,
                            cause="stale" if self.stale else "gone")
        if self._closing:
            raise ToolFault(self.name, "client closed", retryable=False)

    async def ping(self, time_limit: float | None = None) -> None:
        """``ping`` (2025-11-25); at 2026-07-28, which has none, ``server/discover``
        is the probe."""
        if self._session.stateless:
            await self._request(m26.SERVER_DISCOVER, time_limit=time_limit or self.ping_timeout)
            return
        await self._request(mt.PING, time_limit=time_limit or self.ping_timeout)

    # ------------------------------------------------------------ liveness

    async def _pinger(self) -> None:
        interval = self.ping_interval
        assert interval
        live = self._conn.liveness
        while not self._closing:
            await asyncio.sleep(interval)
            # 2026-07-28 has no ping: failed requests and listen streams tell
            if not live.due(time.monotonic(), connected=self._connected.is_set(),
                            pings=not self._session.stateless):
                continue  # not idle: traffic proves liveness
            try:
                await self._conn.ping(self.ping_timeout)
                live.answered()
            except RPCError:
                live.answered()  # it answered, if with an error
            except SessionExpired as exc:
                self._trigger_recover(expired=True, reason=f"ping: {exc}", event=EXPIRED)
            except TransportError as exc:  # the connection is gone: reconnect now
                live.answered()
                self._trigger_recover(expired=False, reason=f"ping: {exc}")
            except Exception as exc:  # no answer: a miss
                self.log.warning("mcp.ping.missed", misses=live.misses + 1,
                                 error=str(exc)[:200])
                if live.missed():
                    self.stale = True
                    self.log.warning("mcp.stale", misses=STALE_AFTER_MISSES,
                                     reconnect=self.reconnect_stale)
                    if not self.reconnect_stale:  # the fault policy decides (faults.py)
                        await self._give_up(f"stale: {STALE_AFTER_MISSES} missed pings")
                        return
                    self._trigger_recover(expired=True, reason="stale", drop=True)

    async def _give_up(self, reason: str) -> None:
        """The shutdown ladder for this connection: stop its streams, fail what
        waits on it, close its connections; it stays gone (no reconnect)."""
        self.gone = reason
        self._connected.clear()
        listener = self._listener
        if listener is not None and listener is not asyncio.current_task():
            listener.cancel()
        self._conn.fail_all(lambda: ToolFault(self.name, f"server gone: {reason}",
                                              retryable=False, cause="stale"))
        if self._transport is not None:
            # a server that missed its pings gets no longer than one ping to
            # answer the DELETE: waiting the usual bound would hold the give-up
            with contextlib.suppress(Exception):
                await self._transport.close(delete_within=min(DELETE_LIMIT, self.ping_timeout))
        self.log.warning("mcp.gone", reason=reason)
        if self.on_gone is not None:
            self.on_gone(self, reason)

    async def _get_stream(self, generation: int) -> None:
        """The 2025-11-25 standalone GET stream; its loss starts a recovery."""
        t = self._transport
        assert t is not None
        try:
            await t.listen()
        except SessionExpired:
            if generation != self._conn.generation:
                return
            # A 404 on GET may only mean "no GET route": ask the session itself.
            try:
                await self._conn.ping(self.ping_timeout)
            except SessionExpired as exc:
                self._trigger_recover(expired=True, reason=f"GET stream: {exc}", event=EXPIRED)
            except (TransportError, HTTPStatusError, RPCError, TimeoutError):
                pass  # the pinger / the next request will find out
            else:
                t.get_offered = False
                self.log.info("mcp.stream.not_offered", status=404)
        except (TransportError, HTTPStatusError) as exc:
            if generation == self._conn.generation:
                self._trigger_recover(expired=False, reason=f"stream lost: {exc}")
        else:
            if generation == self._conn.generation:
                self.log.info("mcp.stream.not_offered", status=t.not_offered)

    # ------------------------------------------------------------ (re)connect

    def _task_failed(self, exc: BaseException) -> None:
        """A background task's bug ended the group: nothing may wait on this
        connection any more (the bug is raised again when the client closes)."""
        reason = f"internal error: {type(exc).__name__}: {exc}"[:300]
        self.gone = reason
        self._connected.clear()
        self._conn.fail_all(lambda: ToolFault(self.name, f"server gone: {reason}",
                                              retryable=False, cause="gone"))
        if self.on_gone is not None:
            self.on_gone(self, reason)

    async def _after_connect(self, *, first: bool) -> None:
        """(Re)start the GET stream and list the catalogue; on a reconnect, first
        re-issue every subscription and synthesize one ``updated`` per watched URI."""
        self._connected.set()
        self.stale = False
        if self._session.stateless:
            await self._after_discover(first=first)
            return
        self._listener = self._spawn(self._get_stream(self._conn.generation), "listen")
        if not first:
            watched = sorted(self.subscriptions)
            for uri in watched:
                try:
                    await self._request(mt.RESOURCES_SUBSCRIBE, mt.SubscribeParams(uri=uri))
                except (ToolFault, HandshakeError) as exc:
                    self.log.warning("mcp.subscribe.restore_failed", uri=uri, error=str(exc))
            # edge -> level: a change missed while disconnected is not lost
            for uri in watched:
                self.updates.put_nowait((self.name, uri))
            self.log.info("mcp.reconnected", generation=self._conn.generation,
                          resubscribed=len(watched))
        if self._session.capabilities.tools:
            await self.list_tools()
        if self._session.capabilities.resources:
            await self._refresh_resources()

    async def _after_discover(self, *, first: bool) -> None:
        """A 2026-07-28 server (re)adopted: the listen stream, then the catalogue.

        On a reconnect the listen manager re-opens the stream and, once it is
        acknowledged, synthesizes one ``updated`` per watched URI (the §1.6 rule);
        the catalogue is re-listed only where its ttl ran out."""
        self._listener = self._listen.start(self._conn.generation, resync=not first)
        now = time.monotonic()
        if self._session.capabilities.tools and (first or self._fresh.stale("tools", now)):
            await self.list_tools()
        if self._session.capabilities.resources and (first or self._fresh.stale("resources", now)):
            await self._refresh_resources()
        if not first:
            self.log.info("mcp.reconnected", generation=self._conn.generation,
                          resubscribed=len(self.subscriptions))

    def _listen_resync(self, watched: list[str], honoured: m26.SubscriptionFilter) -> None:
        """A listen stream re-opened after a loss: edge -> level."""
        for uri in watched:
            self.updates.put_nowait((self.name, uri))
        # a list change missed meanwhile: re-read where the ttl allows it
        now = time.monotonic()
        if honoured.toolsListChanged and self._fresh.stale("tools", now):
            self._schedule_relist("tools", self.list_tools)
        if honoured.resourcesListChanged and self._fresh.stale("resources", now):
            self._schedule_relist("resources", self._refresh_resources)

    # ------------------------------------------------------------ recovery

    def _trigger_recover(self, *, expired: bool, reason: str, drop: bool = False,
                         event: str = "mcp.disconnected") -> None:
        """Start one recovery (``event`` names why: ``mcp.session.expired`` when the
        server no longer knows our session, else ``mcp.disconnected``)."""
        if self._closing or self.gone is not None:
            return
        if self._recovering is not None and not self._recovering.done():
            return
        self._connected.clear()
        self.log.warning(event, reason=reason[:300])
        self._recovering = self._spawn(self._recover(expired, drop), "recover")

    async def _recover(self, expired: bool, drop: bool) -> None:
        """Reconnect under the backoff policy until it works or the client closes."""
        t = self._transport
        assert t is not None
        listener = self._listener
        if listener is not None and listener is not asyncio.current_task():
            listener.cancel()
        plan = Reconnect(expired=expired, drop=drop)
        while not self._closing:
            if plan.reopen():
                await t.reopen()  # a stale server: new connections, new session
            if pause := plan.next_try():
                await self.policy.reconnect_pause(pause, self._kick)
            try:
                if plan.probes(bool(t.session_id)):
                    # the session may have survived a network blip: probe it
                    try:
                        await self._conn.ping(self.ping_timeout)
                    except (SessionExpired, HTTPStatusError) as exc:
                        if isinstance(exc, HTTPStatusError) and not 400 <= exc.status < 500:
                            raise  # a 4xx to our ping: the session is not usable either
                        plan.session_lost()
                        self.log.warning(EXPIRED, reason=f"probe: {exc}"[:300])
                    except RPCError:
                        pass
                    else:
                        self._conn.generation += 1
                        self._spawn(self._finish_recover(), "restore")
                        return
                if plan.handshakes(bool(t.session_id)):
                    await self._conn.handshake(self.init_timeout)
                    self._spawn(self._finish_recover(), "restore")
                    return
            except (HandshakeError, TransportError, HTTPStatusError, TimeoutError) as exc:
                self.last_error = str(exc)[:300]
                self.log.info("mcp.reconnect.failed", attempt=plan.attempt,
                              error=str(exc)[:300])
                plan.failed(handshake=isinstance(exc, HandshakeError))

    async def _finish_recover(self) -> None:
        try:
            await self._after_connect(first=False)
        except (ToolFault, HandshakeError) as exc:
            self.log.warning("mcp.restore.failed", error=str(exc)[:300])
