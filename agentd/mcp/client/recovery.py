"""Liveness and reconnection of one MCP client (the IO over :class:`Liveness`).

:class:`Recovery` is one part of :class:`~agentd.mcp.client.facade.MCPClient`, with
its own state (whether the connection is up, closing, gone or stale, the
recovery in flight), handed what it needs: the connection, the policy, the
task spawner, and two hooks of the client -- ``on_connected`` (what every
(re)connect does next: the update stream, the subscriptions, the catalogue)
and ``stop_stream`` (the update stream's task, cancelled when the connection
is given up or recovered).  It holds:

* the idle pinger: :class:`~agentd.mcp.client.rules.liveness.Liveness` says when a ping is
  due and when missed pings make the server stale (the revision says whether
  it pings at all); a stale server is reconnected on new connections, or --
  in task mode (``reconnect_stale`` False) -- given up for good
  (:meth:`give_up`, the fault policy decides);
* :meth:`trigger`: one recovery at a time, under the backoff policy,
  probing a session that may have survived a network blip before
  re-initializing; requests wait for it (:meth:`wait_connected`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any

from agentd.errors import HandshakeError, ToolFault
from agentd.log import Logger
from agentd.mcp.client.connection import Connection
from agentd.mcp.client.request_loop import EXPIRED
from agentd.mcp.client.rules.faults import (
    HTTPStatusError,
    RetryPolicy,
    RPCError,
    SessionExpired,
    TransportError,
)
from agentd.mcp.client.rules.liveness import STALE_AFTER_MISSES, Reconnect
from agentd.mcp.client.transport import DELETE_LIMIT

__all__ = ["Recovery"]

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any] | None"]


class Recovery:
    """The client's liveness and recovery; see the module docstring."""

    def __init__(self, name: str, log: Logger, conn: Connection, policy: RetryPolicy, *,
                 spawn: Spawn, init_timeout: float, ping_interval: float | None,
                 ping_timeout: float, reconnect_stale: bool,
                 on_connected: Callable[[bool], Coroutine[Any, Any, None]],
                 stop_stream: Callable[[], None],
                 on_gone: Callable[[str], None]) -> None:
        self.name = name
        self.log = log
        self._conn = conn
        self._policy = policy
        self._spawn = spawn
        self._init_timeout = init_timeout
        self._ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self._reconnect_stale = reconnect_stale  # False: a stale server is left gone
        self._on_connected = on_connected
        self._stop_stream = stop_stream
        self._on_gone = on_gone
        self.up = asyncio.Event()  # set while requests may be sent
        self.closing = False
        self.gone: str | None = None  # why the connection was given up for good
        self.stale = False
        self.last_error = ""  # the last reconnect failure (named in faults)
        self._kick = asyncio.Event()  # set by a call waiting on a reconnect
        self._recovering: asyncio.Task[Any] | None = None

    @property
    def connected(self) -> bool:
        return self.up.is_set()

    def close(self) -> None:
        """The client is closing: nothing waits for or starts a reconnect any more."""
        self.closing = True
        self.up.clear()

    def _unusable(self) -> ToolFault | None:
        if self.gone is not None:
            return ToolFault(self.name, f"server gone: {self.gone}", retryable=False,
                             cause="stale" if self.stale else "gone")
        return None

    async def wait_connected(self) -> None:
        if self.up.is_set():
            return
        if (gone := self._unusable()) is not None:
            raise gone
        if self.closing:
            raise ToolFault(self.name, "client closed", retryable=False, cause="closed")
        self._kick.set()  # a reconnect sleeping in its backoff tries again now
        try:
            async with asyncio.timeout(self._policy.reconnect_wait):
                await self.up.wait()
        except TimeoutError:
            last = f": {self.last_error}" if self.last_error else ""
            raise ToolFault(self.name, "server unavailable (reconnecting)" + last,
                            retryable=True) from None
        if (gone := self._unusable()) is not None:
            raise gone
        if self.closing:
            raise ToolFault(self.name, "client closed", retryable=False)

    async def after_connect(self, *, first: bool) -> None:
        """The connection is up: requests flow again, then the client's next steps."""
        self.up.set()
        self.stale = False
        await self._on_connected(first)

    # ------------------------------------------------------------ liveness

    async def pinger(self) -> None:
        """The idle pinger (see the module docstring)."""
        interval = self._ping_interval
        assert interval
        live = self._conn.liveness
        while not self.closing:
            await asyncio.sleep(interval)
            # 2026-07-28 has no ping: failed requests and listen streams tell
            if not live.due(time.monotonic(), connected=self.up.is_set(),
                            pings=self._conn.session.revision.pings):
                continue  # not idle: traffic proves liveness
            try:
                await self._conn.ping(self.ping_timeout)
                live.answered()
            except RPCError:
                live.answered()  # it answered, if with an error
            except SessionExpired as exc:
                self.trigger(expired=True, reason=f"ping: {exc}", event=EXPIRED)
            except TransportError as exc:  # the connection is gone: reconnect now
                live.answered()
                self.trigger(expired=False, reason=f"ping: {exc}")
            except Exception as exc:  # no answer: a miss
                self.log.warning("mcp.ping.missed", misses=live.misses + 1,
                                 error=str(exc)[:200])
                if live.missed():
                    self.stale = True
                    self.log.warning("mcp.stale", misses=STALE_AFTER_MISSES,
                                     reconnect=self._reconnect_stale)
                    if not self._reconnect_stale:  # the fault policy decides (faults.py)
                        await self.give_up(f"stale: {STALE_AFTER_MISSES} missed pings")
                        return
                    self.trigger(expired=True, reason="stale", drop=True)

    async def give_up(self, reason: str) -> None:
        """The shutdown ladder for this connection: stop its streams, fail what
        waits on it, close its connections; it stays gone (no reconnect)."""
        self.gone = reason
        self.up.clear()
        self._stop_stream()
        self._conn.fail_all(lambda: ToolFault(self.name, f"server gone: {reason}",
                                              retryable=False, cause="stale"))
        if self._conn.transport is not None:
            # a server that missed its pings gets no longer than one ping to
            # answer the DELETE: waiting the usual bound would hold the give-up
            with contextlib.suppress(Exception):
                await self._conn.transport.close(
                    delete_within=min(DELETE_LIMIT, self.ping_timeout))
        self.log.warning("mcp.gone", reason=reason)
        self._on_gone(reason)

    # ------------------------------------------------------------ (re)connect

    def task_failed(self, exc: BaseException) -> None:
        """A background task's bug ended the group: nothing may wait on this
        connection any more (the bug is raised again when the client closes)."""
        reason = f"internal error: {type(exc).__name__}: {exc}"[:300]
        self.gone = reason
        self.up.clear()
        self._conn.fail_all(lambda: ToolFault(self.name, f"server gone: {reason}",
                                              retryable=False, cause="gone"))
        self._on_gone(reason)

    # ------------------------------------------------------------ recovery

    def trigger(self, *, expired: bool, reason: str, drop: bool = False,
                event: str = "mcp.disconnected") -> None:
        """Start one recovery (``event`` names why: ``mcp.session.expired`` when the
        server no longer knows our session, else ``mcp.disconnected``)."""
        if self.closing or self.gone is not None:
            return
        if self._recovering is not None and not self._recovering.done():
            return
        self.up.clear()
        self.log.warning(event, reason=reason[:300])
        self._recovering = self._spawn(self._recover(expired, drop), "recover")

    async def _recover(self, expired: bool, drop: bool) -> None:
        """Reconnect under the backoff policy until it works or the client closes."""
        t = self._conn.transport
        assert t is not None
        self._stop_stream()
        plan = Reconnect(expired=expired, drop=drop)
        while not self.closing:
            if plan.reopen():
                await t.reopen()  # a stale server: new connections, new session
            if pause := plan.next_try():
                await self._policy.reconnect_pause(pause, self._kick)
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
                    await self._conn.handshake(self._init_timeout)
                    self._spawn(self._finish_recover(), "restore")
                    return
            except (HandshakeError, TransportError, HTTPStatusError, TimeoutError) as exc:
                self.last_error = str(exc)[:300]
                self.log.info("mcp.reconnect.failed", attempt=plan.attempt,
                              error=str(exc)[:300])
                plan.failed(handshake=isinstance(exc, HandshakeError))

    async def _finish_recover(self) -> None:
        try:
            await self.after_connect(first=False)
        except (ToolFault, HandshakeError) as exc:
            self.log.warning("mcp.restore.failed", error=str(exc)[:300])
