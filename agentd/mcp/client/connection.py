"""The thin connection under :class:`~agentd.mcp.client.facade.MCPClient`.

One :class:`Connection` per client: the HTTP transport, the sans-IO
:class:`~agentd.mcp.client.rules.session.ClientSession`, THE request/response
dispatcher (:class:`~agentd.wire.dispatch.Dispatcher`: the one place ids meet
futures) and the :class:`~agentd.mcp.client.rules.liveness.Liveness` clock.  It does what
every request needs and nothing the client decides: the handshake (version
selection, ``server/discover`` then ``initialize``), one send and the wait for
its answer, the routing of inbound answers to their waiters, and the abandon
hook that tells the server a request was given up (``notifications/cancelled``,
never for ``initialize``).  The rules live in the session and
:mod:`agentd.mcp.client.rules.negotiate`; the retry policy, reconnection, the catalogue
and the listen stream stay in the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

import msgspec

from agentd.errors import ToolFault
from agentd.log import Logger
from agentd.log_bridge import throttled
from agentd.mcp.client.answered import Answered
from agentd.mcp.client.call_watch import LIMIT_CAUSE, CallWatch
from agentd.mcp.client.rules.faults import (
    HTTPStatusError,
    RPCError,
    SessionExpired,
    TransportError,
    no_answer,
)
from agentd.mcp.client.rules.liveness import Liveness
from agentd.mcp.client.rules.session import (
    ClientSession,
    Failed,
    HandshakeError,
    Notified,
    Reply,
    Resolved,
)
from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt
from agentd.wire.dispatch import Dispatcher

if TYPE_CHECKING:  # imported when connecting: the tool types need no HTTP stack
    from agentd.mcp.client.legacy_sse import LegacySSETransport
    from agentd.mcp.client.transport import StreamableHTTPTransport

__all__ = ["DISCOVER_TIMEOUT", "MAX_AUDIT_TEXT", "Connection"]

DISCOVER_TIMEOUT: Final = 3.0  # the server/discover probe: a server that cannot say speaks a session revision
MAX_AUDIT_TEXT: Final = 2000
Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any] | None"]
Headers = tuple[tuple[str, str], ...] | list[tuple[str, str]]


class Connection:
    """Transport + session + dispatcher + liveness of one server; see the module."""

    def __init__(self, name: str, log: Logger, session: ClientSession, *,
                 on_notified: Callable[[Notified], None], spawn: Spawn,
                 ping_interval: float | None) -> None:
        self.name = name
        self.log = log
        self.session = session
        self.transport: StreamableHTTPTransport | LegacySSETransport | None = None
        self.calls: Dispatcher[int | str] = Dispatcher(self.abandon)
        self.liveness = Liveness(ping_interval, now=time.monotonic())
        # a server that speaks a session revision (negotiated, or moved there by
        # need: agentd.mcp.client.subscriptions) is re-initialized directly on a reconnect
        self.reinitialize = False
        self.generation = 0  # bumps at every (re)initialize
        self._on_notified = on_notified
        self._spawn = spawn

    def bind(self, transport: StreamableHTTPTransport | LegacySSETransport) -> None:
        self.transport = transport

    # ------------------------------------------------------------ inbound

    def receive(self, data: bytes | str) -> None:
        """Every message the transport read: answers to their waiters, the
        server's requests answered, notifications to the client."""
        self.liveness.heard(time.monotonic())
        session = self.session
        events = session.receive(data)
        if session.garbled:  # the server's bytes refused: visible, never silent
            throttled(self.log, "warning", "mcp.garbage", key=self.name, reason=session.garbled)
        calls = self.calls
        for ev in events:
            cls = ev.__class__
            if cls is Resolved:
                calls.resolve(ev.id, ev.result)
            elif cls is Failed:
                e = ev.error
                calls.fail(ev.id, RPCError(e.code, e.message, None if e.data is msgspec.UNSET
                                           else e.data, side="remote"))
            elif cls is Reply:
                if ev.method not in (mt.PING, mt.ROOTS_LIST):
                    self.log.warning("mcp.server_request.refused", method=ev.method[:100])
                self._spawn(self.send_quiet(ev.data), "reply")
            elif cls is Notified:
                self._on_notified(ev)

    async def send_quiet(self, data: bytes) -> None:
        t = self.transport
        if t is None:
            return
        with contextlib.suppress(TransportError, HTTPStatusError, SessionExpired):
            await t.post(data)

    # ------------------------------------------------------------ requests

    async def send(self, rid: int | str, data: bytes, method: str, time_limit: float | None,
                   headers: Headers = (), watch: CallWatch | None = None) -> msgspec.Raw:
        """One send of a request and the wait for its answer (within ``watch``'s limits)."""
        answered = Answered()
        fut = self.calls.expect(rid, cancel_abandons=False, on_settled=answered.set)
        t = self.transport
        assert t is not None
        self.session.take_garbled()  # only a refusal of this answer is its reason
        rev = self.session.revision  # how its answer is read (agentd.mcp.client.rules.revision)
        try:
            async with watch if watch is not None else contextlib.nullcontext():
                if time_limit is None:
                    await t.post(data, answered, headers=headers, resumable=rev.resumable,
                                 error_bodies=rev.error_bodies)
                    if fut.done():
                        return fut.result()
                    if not t.get_offered:  # nowhere else it could come from
                        raise no_answer(method, self.session.take_garbled())
                    return await fut
                async with asyncio.timeout(time_limit):
                    await t.post(data, answered, headers=headers, resumable=rev.resumable,
                                 error_bodies=rev.error_bodies)
                    if not fut.done() and not t.get_offered:
                        raise no_answer(method, self.session.take_garbled())
                    return await fut
        except BaseException as exc:
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: it is superseded by ``exc``
            reached = watch.reached if watch is not None else None
            if isinstance(exc, ToolFault) and exc.cause == LIMIT_CAUSE and reached is not None:
                self.calls.abandon(rid, reached.reason)
            elif isinstance(exc, (asyncio.CancelledError, TimeoutError)):
                self.calls.abandon(rid, "timeout" if isinstance(exc, TimeoutError)
                                   else "cancelled")
            else:
                self.calls.forget(rid)
                self.session.forget(rid)
            raise

    def abandon(self, rid: int | str, reason: str) -> None:
        """We stop waiting for ``rid``: tell the server (never for initialize)."""
        note = self.session.cancel(rid, reason)
        if note is not None:
            self._spawn(self.send_quiet(note), "cancelled")

    async def ping(self, within: float) -> None:
        rid, data = self.session.request(mt.PING)
        await self.send(rid, data, mt.PING, within)

    def fail_all(self, make: Callable[[], BaseException]) -> None:
        self.calls.fail_all(make)

    # ------------------------------------------------------------ handshake

    def replace_session(self) -> None:
        t = self.transport
        assert t is not None
        # Requests of the session being replaced can no longer be answered.
        self.calls.fail_all(lambda: TransportError("the session was replaced", sent=True))
        self.session.reset()
        t.forget_session()

    async def handshake(self, init_timeout: float) -> None:
        """Version selection, per server and per connect (no flag).

        ``server/discover`` first, within a short timeout: a 2026-07-28 answer
        adopts the server statelessly; anything that is not positive evidence
        of one (an HTTP 4xx, a JSON-RPC error, no answer in time, a result
        listing no 2026-07-28 version) falls back to ``initialize``; a -32022
        is retried with the best version of its ``data.supported``.  The whole
        selection fits in ``init_timeout``.  A server known to speak a session
        revision (or moved there by need) is re-initialized directly on a reconnect,
        and one on the HTTP+SSE transport always is (2024-11-05 has no discover).
        """
        t = self.transport
        assert t is not None
        loop = asyncio.get_running_loop()
        started = loop.time()
        s = self.session
        # a server known to speak a session revision, or declared on the HTTP+SSE
        # transport (whose revision has no server/discover), is initialized directly
        if (self.reinitialize and self.generation) or not s.session_revision.discovers:
            self.replace_session()
            await self.initialize(init_timeout, init_timeout)
            return
        limit = min(DISCOVER_TIMEOUT, init_timeout / 2)
        retried = False
        while True:  # a -32022 naming 2026-07-28 is asked once more (negotiate.py)
            self.replace_session()
            rid, data = s.start_discover()
            t.set_protocol_version(m26.LATEST_MODERN_VERSION)
            answered = Answered()
            fut = self.calls.expect(rid, cancel_abandons=False, on_settled=answered.set)
            why = ""
            try:
                async with asyncio.timeout(limit):
                    # a 2026-07-28 request: a 4xx's JSON-RPC error is its answer
                    await t.post(data, answered, headers=(("Mcp-Method", m26.SERVER_DISCOVER),),
                                 resumable=False, error_bodies=True)
                    why = (s.finish_discover(await fut) if fut.done()
                           else "server/discover got no JSON-RPC answer")
            except TimeoutError:
                why = f"no answer to server/discover within {limit:g}s"
            except RPCError as exc:
                try:
                    choice = s.discover_failed(exc.code, exc.data)
                except HandshakeError as hexc:
                    raise HandshakeError(f"{self.name}: {hexc}") from None
                why = f"server/discover answered {exc.code}: {exc.message[:200]}"
                if choice.modern and not retried:
                    retried = True
                    self.log.info("mcp.version.retry", version=choice.version, reason=why)
                    continue
            except HTTPStatusError as exc:
                if exc.status == 401:  # credentials, not a revision: initialize would say the same
                    s.handshake_failed()
                    raise HandshakeError(f"{self.name}: {exc}") from None
                why = f"server/discover answered HTTP {exc.status}"
            except TransportError as exc:
                if not exc.sent:  # unreachable: no revision verdict, a connect failure
                    s.handshake_failed()
                    raise HandshakeError(f"{self.name}: {exc}") from None
                why = f"server/discover failed: {exc}"
            finally:
                self.calls.forget(rid)
            break
        if not why:
            self.reinitialize = False
            self.generation += 1
            self.liveness.heard(time.monotonic())
            self.log.info("mcp.handshake", protocol_version=s.protocol_version,
                          negotiated_by=m26.SERVER_DISCOVER, stateless=True,
                          supported_versions=list(s.supported_versions),
                          server_info=msgspec.to_builtins(s.server_info),
                          capabilities=dict(s.capabilities.raw), session=False,
                          instructions=(s.instructions or "")[:MAX_AUDIT_TEXT])  # untrusted
            return
        self.log.info("mcp.discover.fallback", reason=why[:300])
        self.replace_session()
        await self.initialize(max(init_timeout - (loop.time() - started), 0.001), init_timeout)

    async def initialize(self, limit: float, init_timeout: float) -> None:
        t = self.transport
        assert t is not None
        s = self.session
        rid, data = s.start_initialize()
        answered = Answered()
        fut = self.calls.expect(rid, cancel_abandons=False, on_settled=answered.set)
        try:
            async with asyncio.timeout(limit):
                await t.post(data, answered, initialize=True)
                if not fut.done():  # its one answer was no message for it: say why, now
                    raise HandshakeError(f"{self.name}: initialize failed: "
                                         f"{no_answer(mt.INITIALIZE, s.take_garbled())}")
                result = await fut
        except TimeoutError:
            s.handshake_failed()  # initialize is never cancelled
            raise HandshakeError(
                f"{self.name}: no answer to initialize within {init_timeout:g}s") from None
        except HandshakeError:
            s.handshake_failed()
            raise
        except (TransportError, HTTPStatusError, SessionExpired, ToolFault) as exc:
            s.handshake_failed()
            raise HandshakeError(f"{self.name}: initialize failed: {exc}") from None
        finally:
            self.calls.forget(rid)
        try:
            initialized = s.finish_initialize(result)
        except HandshakeError as exc:
            raise HandshakeError(f"{self.name}: {exc}") from None
        t.set_protocol_version(s.protocol_version or mt.LATEST_PROTOCOL_VERSION)
        try:
            await t.post(initialized)
        except (TransportError, HTTPStatusError, SessionExpired) as exc:
            raise HandshakeError(f"{self.name}: notifications/initialized failed: {exc}"
                                 ) from None
        self.generation += 1
        self.reinitialize = True
        self.liveness.heard(time.monotonic())
        caps = s.capabilities
        self.log.info("mcp.handshake", protocol_version=s.protocol_version,
                      negotiated_by=mt.INITIALIZE, stateless=False,
                      server_info=msgspec.to_builtins(s.server_info),
                      capabilities=dict(caps.raw), session=bool(t.session_id),
                      instructions=(s.instructions or "")[:MAX_AUDIT_TEXT])  # untrusted
