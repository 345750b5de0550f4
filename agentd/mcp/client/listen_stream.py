"""The 2026-07-28 listen stream of one client: the IO around :class:`ListenPlan`.

:class:`Listener` keeps one acknowledged ``subscriptions/listen`` stream open
for what the client watches (the list changes the server offers, the
subscribed URIs).  A filter change (subscribe/unsubscribe) opens the new
stream first and closes the old one once the new one is acknowledged, so no
update falls between the two.  A broken stream is re-opened with backoff and
then the state is re-read: one synthesized ``updated`` per watched URI, the
catalogue re-listed where it may have changed.  A stream that cannot be
re-opened because the server is unreachable is the liveness signal of this
revision (there is no ping): the connection is recovered.

What the stream must agree on with ``subscribe``/``unsubscribe`` (the filter
epoch, what is honoured, what ended, whether listen is served at all) is the
sans-IO :class:`~agentd.mcp.client.rules.listen_plan.ListenPlan`; acknowledgements are
matched to their streams by the one dispatcher
(:class:`~agentd.wire.dispatch.Dispatcher`).  The client owns the tasks: it
hands in ``spawn``, and the listener never outlives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from msgspec import Raw

from agentd.errors import ToolFault
from agentd.log import Logger
from agentd.mcp.client.answered import Answered
from agentd.mcp.client.connection import Connection
from agentd.mcp.client.rules.faults import (
    HTTPStatusError,
    RetryPolicy,
    RPCError,
    SessionExpired,
    TransportError,
)
from agentd.mcp.client.rules.listen_plan import ListenPlan
from agentd.mcp.client.rules.session import ClientSession
from agentd.wire import mcp2026 as m26
from agentd.wire.dispatch import Dispatcher
from agentd.wire.jsonrpc import METHOD_NOT_FOUND

__all__ = ["Listener"]

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any] | None"]
_OPEN_FAULTS = (TimeoutError, TransportError, HTTPStatusError, SessionExpired, RPCError)


class Listener:
    """One client's listen stream manager; see the module docstring."""

    def __init__(self, conn: Connection, log: Logger, *, subscriptions: set[str],
                 policy: RetryPolicy, init_timeout: float, spawn: Spawn,
                 closing: Callable[[], bool], on_unreachable: Callable[[str], None],
                 on_resync: Callable[[list[str], m26.SubscriptionFilter], None]) -> None:
        self.plan = ListenPlan()
        self._conn = conn
        self.log = log
        self.subscriptions = subscriptions  # the client's set (shared, not copied)
        self._policy = policy
        self._init_timeout = init_timeout
        self._spawn = spawn
        self._closing = closing
        self._on_unreachable = on_unreachable  # recover the connection (reason)
        self._on_resync = on_resync  # (watched URIs, what the stream honours)
        self._acks: Dispatcher[int | str] = Dispatcher()
        self._changed = asyncio.Event()
        self._acked = asyncio.Event()
        # subscription id -> (ended gracefully, why) of a stream that ended by itself
        self._ends: dict[int | str, tuple[bool, BaseException | None]] = {}
        self.task: asyncio.Task[Any] | None = None

    @property
    def unsupported(self) -> bool:
        return self.plan.unsupported

    # ------------------------------------------------------------ the client's side

    def start(self, generation: int, *, resync: bool) -> asyncio.Task[Any] | None:
        self.plan.adopted()  # asked again of the (re)discovered server
        self.task = self._spawn(self._run(generation, resync=resync), "listen")
        return self.task

    def acknowledged(self, params: Raw) -> None:
        got = ClientSession.acknowledged(params)
        if got is not None:
            self._acks.resolve(got[0], got[1])

    def closed(self) -> None:
        """The client is closing: a subscribe waiting for an acknowledgement ends."""
        self._acked.set()

    def unsubscribe(self, uri: str) -> None:
        self.plan.changed(uri)
        self._changed.set()  # re-opened without it

    async def subscribe(self, uri: str) -> bool:
        """Add ``uri`` to the listen filter; True once a stream honours it."""
        plan = self.plan
        plan.ended.discard(uri)
        if plan.unsupported:
            self.log.warning("mcp.subscribe.unsupported", uri=uri,
                             detail="the server does not serve subscriptions/listen")
            return False
        if uri in self.subscriptions and plan.honours(uri):
            return True
        self.subscriptions.add(uri)
        want = plan.changed(uri)
        self._changed.set()
        try:
            async with asyncio.timeout(self._init_timeout):
                while not plan.acked(want):  # a stream opened with this filter (or later)
                    if self._closing():
                        raise ToolFault(self._conn.name, "client closed", retryable=False,
                                        cause="closed")
                    await self._acked.wait()
            if not plan.honours(uri):  # acknowledged, but not honoured
                self.subscriptions.discard(uri)
                self._changed.set()
                self.log.warning("mcp.subscribe.refused", uri=uri)
                return False
        except TimeoutError:
            self.subscriptions.discard(uri)
            self._changed.set()
            raise ToolFault(self._conn.name, f"subscriptions/listen for {uri} was not "
                            f"acknowledged within {self._init_timeout:g}s", retryable=True,
                            method=m26.SUBSCRIPTIONS_LISTEN) from None
        return True

    # ------------------------------------------------------------ the stream

    def _settle(self) -> None:
        """Wake every subscribe waiting for an acknowledgement (the plan says which)."""
        acked, self._acked = self._acked, asyncio.Event()
        acked.set()

    def _filter(self) -> m26.SubscriptionFilter | None:
        caps = self._conn.session.capabilities
        return self.plan.filter(self.subscriptions, subscribe=caps.resources_subscribe,
                                tools_changed=caps.tools_list_changed,
                                resources_changed=caps.resources_list_changed)

    async def _stream(self, sid: int | str, data: bytes, done: asyncio.Future[Any],
                      answered: Answered, ack: asyncio.Future[Any]) -> None:
        """One ``subscriptions/listen`` POST, held open until it ends."""
        conn = self._conn
        t = conn.transport
        assert t is not None
        err: BaseException | None = None
        graceful = cancelled = False
        try:
            await t.post(data, answered, headers=conn.session.headers(m26.SUBSCRIPTIONS_LISTEN),
                         resumable=False, error_bodies=True)
            if done.done() and not done.cancelled() and done.exception() is not None:
                err = done.exception()
            elif done.done():
                graceful = True  # the listen result: everything it held was delivered
                err = TransportError("the server closed the listen stream", sent=True)
            else:
                err = TransportError("the listen stream ended", sent=True)
        except (TransportError, HTTPStatusError, SessionExpired) as exc:
            err = exc
        except asyncio.CancelledError:  # replaced or closed by us: nothing to report
            cancelled = True
            raise
        finally:
            conn.calls.forget(sid)
            conn.session.forget(sid)
            if not ack.done():
                ack.set_exception(err or TransportError("listen stream cancelled", sent=True))
                ack.exception()
            if not cancelled:
                self._ends[sid] = (graceful, err)

    async def _run(self, generation: int, *, resync: bool) -> None:
        conn = self._conn
        plan = self.plan
        loop = asyncio.get_running_loop()
        current: asyncio.Task[Any] | None = None
        current_sid: int | str | None = None
        attempt = 0
        reopened = graceful = False
        try:
            while not self._closing() and generation == conn.generation:
                self._changed.clear()
                epoch = plan.epoch
                flt = self._filter()
                if flt is None:
                    if current is not None:
                        current.cancel()
                        current = None
                    plan.idle(epoch)
                    self._settle()
                    await self._changed.wait()
                    continue
                sid, data = conn.session.listen(flt)
                ack = self._acks.expect(sid, cancel_abandons=False)
                answered = Answered()
                done = conn.calls.expect(sid, cancel_abandons=False, on_settled=answered.set)
                stream = self._spawn(self._stream(sid, data, done, answered, ack),
                                     "listen.stream")
                if stream is None:  # closing
                    return
                try:
                    async with asyncio.timeout(self._init_timeout):
                        honoured: m26.SubscriptionFilter = await ack
                except _OPEN_FAULTS as exc:
                    stream.cancel()
                    self._ends.pop(sid, None)
                    attempt += 1
                    self.log.warning("mcp.listen.failed", attempt=attempt,
                                     error=f"{type(exc).__name__}: {exc}"[:300])
                    if isinstance(exc, TransportError) and not exc.sent:
                        self._on_unreachable(f"listen: {exc}")
                        return
                    if (isinstance(exc, RPCError) and exc.code == METHOD_NOT_FOUND) or (
                            isinstance(exc, HTTPStatusError) and exc.status in (404, 405)):
                        # a server without subscriptions/listen: nothing will ever be
                        # pushed; subscribe() degrades (False) as for a 2025 server
                        # without resources.subscribe
                        self.log.warning("mcp.listen.unsupported",
                                         error=f"{type(exc).__name__}: {exc}"[:300])
                        plan.refused()
                        self._settle()
                        return
                    await asyncio.sleep(self._policy.reconnect_backoff(attempt))
                    continue
                finally:
                    self._acks.forget(sid)
                if current is not None:
                    assert current_sid is not None  # set with `current`
                    if current.done():  # it ended by itself while this one opened
                        ended_by_server, _ = self._ends.pop(current_sid, (True, None))
                        resync = resync or not ended_by_server
                    current.cancel()  # closing the old stream is its cancellation
                current, current_sid = stream, sid
                ended = plan.opened(epoch, flt, honoured, reopened=reopened)
                if ended:  # asked again after a close, and no longer honoured: it has
                    self.log.info("mcp.listen.ended", uris=sorted(ended)[:20])  # nothing
                self.log.info("mcp.listen.open", subscription=sid,  # left to fire
                              uris=len(plan.listening), reopen=resync,
                              tools_list_changed=bool(honoured.toolsListChanged),
                              resources_list_changed=bool(honoured.resourcesListChanged))
                self._settle()
                if resync:  # edge -> level: whatever changed while we were not listening
                    resync = False
                    self._on_resync(plan.watched(self.subscriptions), honoured)
                if not graceful:  # a server that keeps closing gracefully is not hammered
                    attempt = 0
                changed = loop.create_task(self._changed.wait())
                try:
                    await asyncio.wait((current, changed), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    changed.cancel()
                reopened = graceful = False
                if current.done():  # the stream broke, or the server closed it
                    graceful, why = self._ends.pop(current_sid, (False, None))
                    current = None
                    plan.lost()
                    attempt += 1
                    reopened = True
                    if graceful:
                        # a graceful close loses nothing: re-open for what may still
                        # fire (the new acknowledgement says what that is), no resync
                        self.log.info("mcp.listen.closed")
                    else:
                        resync = True
                        self.log.warning("mcp.listen.lost", error=str(why)[:300])
                    await asyncio.sleep(self._policy.backoff(attempt))
        finally:
            if current is not None:
                current.cancel()
