"""``MCPClient``: one declared MCP server, over Streamable HTTP.

An async context manager.  Entering it connects and runs the handshake (spec
§1.3) within ``init_timeout``; a failure raises :class:`HandshakeError`.  Inside
it the client owns a ``TaskGroup`` with its background work (the standalone GET
stream, the idle pinger, re-listing on ``list_changed``, reconnection, sending
``notifications/cancelled``); leaving it stops them, DELETEs the session and
closes the connections.  Nothing it starts outlives it.

The protocol rules live in :mod:`agentd.mcp.client_session` (sans-IO); HTTP
and SSE in :mod:`agentd.mcp.http_transport`; the fault policy in
:mod:`agentd.mcp.faults`.  See ``docs/client.md``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec
import orjson
from msgspec import UNSET

import agentd
from agentd.config import (
    DEFAULT_INIT_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    DEFAULT_SECRETS_DIR,
    ServerSpec,
    StreamBounds,
    resolve_headers,
)
from agentd.errors import ToolFault
from agentd.log import log
from agentd.log_bridge import throttled
from agentd.mcp.arguments import wire_arguments
from agentd.mcp.call_limits import ToolLimits, server_limits
from agentd.mcp.call_watch import CallLimitReached, CallWatch, CallWatches
from agentd.mcp.catalogue import ToolExcluded, admit
from agentd.mcp.channel import UpdateChannel
from agentd.mcp.client_2026 import traceparent_for, ttl_ms
from agentd.mcp.client_session import (
    Capabilities,
    CapabilityError,
    ClientSession,
    DiscoverDeclined,
    Failed,
    HandshakeError,
    InputRequired,
    Notified,
    Reply,
    Resolved,
)
from agentd.mcp.content import render_content, render_item
from agentd.mcp.faults import (
    IDEMPOTENT_METHODS,
    HTTPStatusError,
    RetryPolicy,
    RPCError,
    SessionExpired,
    TransportError,
    classify,
    no_answer,
)
from agentd.mcp.negotiate import renegotiate_for_updates
from agentd.mcp.oauth.errors import OAuthError
from agentd.mcp.param_headers import encode_value, param_headers
from agentd.mcp.schema import input_validator, output_validator
from agentd.obs import trace
from agentd.obs.calls import McpCall
from agentd.wire import codec
from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt
from agentd.wire.jsonrpc import METHOD_NOT_FOUND
from agentd.wire.shapes import Observation, ResourceInfo, ToolInfo

if TYPE_CHECKING:  # imported when connecting: the tool types need no HTTP stack
    from agentd.mcp.http_transport import StreamableHTTPTransport

__all__ = [
    "DEFAULT_PING_TIMEOUT",
    "MAX_LIST_PAGES",
    "CapabilityError",
    "HandshakeError",
    "MCPClient",
    "Observation",
    "ResourceInfo",
    "ToolFault",
    "ToolInfo",
]

MAX_LIST_PAGES: Final = 1024
DEFAULT_PING_TIMEOUT: Final = 10.0
STALE_AFTER_MISSES: Final = 3
RUN_ID_META: Final = "io.modelcontextprotocol/run-id"
DISCOVER_TIMEOUT: Final = 3.0  # the server/discover probe: a server that cannot say is legacy
MAX_INPUT_ROUNDS: Final = 10  # MRTR: input_required answers per request before giving up
_MAX_AUDIT_TEXT: Final = 2000
_EXPIRED: Final = "mcp.session.expired"  # the server no longer knows our session


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ""


class MCPClient(UpdateChannel):
    """A connection to one MCP server (spec §1).  See the module docstring."""

    def __init__(self, spec: ServerSpec, *, run_id: str = "",
                 init_timeout: float = DEFAULT_INIT_TIMEOUT,
                 ping_interval: float | None = DEFAULT_PING_INTERVAL,
                 ping_timeout: float = DEFAULT_PING_TIMEOUT,
                 secrets_dir: str = DEFAULT_SECRETS_DIR,
                 policy: RetryPolicy | None = None,
                 updates: asyncio.Queue | None = None,
                 on_tools_changed: Callable[[MCPClient], None] | None = None,
                 reconnect_stale: bool = True,
                 on_gone: Callable[[MCPClient, str], None] | None = None,
                 traceparent: str | None = None, tool_limits: ToolLimits | None = None,
                 stream_bounds: StreamBounds | None = None) -> None:
        self.spec = spec
        self.stream_bounds = stream_bounds  # every SSE stream's bounds (None: the defaults)
        self.name = spec.name
        self.auth: Any = None  # an agentd.mcp.oauth.OAuth to use instead of the default
        self.run_id = run_id
        self.init_timeout = init_timeout
        self.ping_interval = ping_interval
        # a ping cannot take longer than the interval it is sent at (docs/faults.md)
        self.ping_timeout = min(ping_timeout, ping_interval) if ping_interval else ping_timeout
        self.reconnect_stale = reconnect_stale  # False: a stale server is left gone (task mode)
        self.on_gone = on_gone
        self.gone: str | None = None  # why the connection was given up for good
        self.last_error = ""  # the last reconnect failure (named in faults)
        self.secrets_dir = secrets_dir
        self.policy = policy or RetryPolicy()
        self.updates: asyncio.Queue = updates if updates is not None else asyncio.Queue()
        self.on_tools_changed = on_tools_changed
        self.log = log.bind(server=spec.name)
        # every tools/call's idle deadline and cap (agentd.mcp.call_limits)
        self._watches = CallWatches(server_limits(tool_limits or ToolLimits(), spec), self.log)
        self._session = ClientSession(client_version=agentd.__version__)
        self._transport: StreamableHTTPTransport | None = None
        self._pending: dict[int | str, asyncio.Future] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._bg: set[asyncio.Task] = set()
        self._notices: set[asyncio.Task] = set()
        self._connected = asyncio.Event()
        self._closing = False
        self._recovering: asyncio.Task | None = None
        self._kick = asyncio.Event()  # set by a call waiting on a reconnect
        self._listener: asyncio.Task | None = None
        self._relist: dict[str, asyncio.Task] = {}
        self._last_inbound = 0.0
        self._meta_json = orjson.dumps({RUN_ID_META: run_id})
        # W3C trace context of the run (SEP-414, sent in every 2026-07-28 _meta): the
        # trace id follows from the run id, so every server of one run sees one trace
        self.traceparent = traceparent or traceparent_for(run_id)
        self._session.set_meta({RUN_ID_META: run_id, "traceparent": self.traceparent})
        self.era: str | None = None  # "stateless" (2026-07-28) or "session", once known
        self._acks: dict[int | str, asyncio.Future] = {}
        self._listen_changed = asyncio.Event()
        self._listen_acked = asyncio.Event()
        self._listening: frozenset[str] = frozenset()  # URIs the open listen stream honours
        self._listen_asked: frozenset[str] = frozenset()  # URIs its request named
        # subscription id -> (ended gracefully, why) of a stream that ended by itself
        self._listen_ends: dict[int | str, tuple[bool, BaseException | None]] = {}
        self._ended: set[str] = set()  # watched URIs a re-opened stream no longer honours
        self.listen_unsupported = False  # a 2026-07-28 server answered listen with -32601
        self.legacy_refused = False  # renegotiating at 2025-11-25 failed: stay at 2026-07-28
        self._renegotiating = asyncio.Lock()
        self._filter_epoch = 0  # bumped by every subscribe/unsubscribe at 2026-07-28
        self._acked_epoch = -1  # the filter epoch of the open, acknowledged stream
        self.listen_opens = 0  # listen streams acknowledged (re-opens included)
        self._expires: dict[str, float] = {}  # catalogue part -> monotonic expiry (ttlMs)
        self._dirty: set[str] = set()  # catalogue parts a list_changed invalidated
        self.rejected_tools: dict[str, str] = {}  # name -> why it is left out (catalogue)
        self.generation = 0  # bumps at every (re)initialize
        self.tools: dict[str, ToolInfo] = {}
        self.tools_version = 0
        self.resources: list[ResourceInfo] = []
        self.resource_templates: list[mt.ResourceTemplate] = []
        self.subscriptions: set[str] = set()
        self.stale = False

    # ------------------------------------------------------------ properties

    @property
    def protocol_version(self) -> str | None:
        return self._session.protocol_version

    @property
    def capabilities(self) -> Capabilities:
        return self._session.capabilities

    @property
    def server_info(self) -> mt.Implementation | None:
        return self._session.server_info

    @property
    def instructions(self) -> str | None:
        """The server's ``instructions`` -- untrusted text, for fenced prompt material."""
        return self._session.instructions

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    # ------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> MCPClient:
        headers = resolve_headers(self.spec, self.secrets_dir)
        spec = self.spec
        from agentd.mcp.http_transport import StreamableHTTPTransport
        from agentd.mcp.oauth import auth_for

        auth = self.auth if self.auth is not None else auth_for(spec, self.secrets_dir, headers)
        self._transport = StreamableHTTPTransport(
            spec.url, headers, on_message=self._on_message, ca_file=spec.ca_file,
            client_cert=getattr(spec, "client_cert", None),
            client_key=getattr(spec, "client_key", None), auth=auth, bounds=self.stream_bounds)
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        try:
            await self._transport.open()
            try:
                await self._handshake()
            except OAuthError as exc:  # OAuth: log in outside the handshake's timeouts
                if exc.kind != "required":
                    raise
                await exc.resolve()  # (or fail naming `agentd auth login`), retry
                await self._handshake()
            if auth is not None:
                auth.deferred = False  # from now on a 401/403 is handled inline
            await self._after_connect(first=True)
        except BaseException:
            await self._shutdown()
            tg, self._tg = self._tg, None
            await tg.__aexit__(None, None, None)  # its tasks are cancelled; the error is ours
            raise
        if self.ping_interval:
            self._spawn(self._pinger(), "pinger")
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._shutdown()
        tg, self._tg = self._tg, None
        if tg is not None:
            await tg.__aexit__(None, None, None)

    async def aclose(self) -> None:
        await self.__aexit__(None, None, None)

    async def _shutdown(self) -> None:
        self._closing = True
        self._connected.clear()
        self._listen_acked.set()  # a subscribe() waiting for a listen acknowledgement
        # cancellation notices and answers already on their way get a moment to leave
        notices = [t for t in self._notices if not t.done()]
        if notices:
            await asyncio.wait(notices, timeout=2)
        for task in list(self._bg):
            if task is not asyncio.current_task():
                task.cancel()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ToolFault(self.name, "client closed", retryable=False))
                fut.exception()  # retrieved: no "never retrieved" noise
        self._pending.clear()
        # let cancelled tasks unwind before the connector goes away
        others = [t for t in self._bg if t is not asyncio.current_task()]
        if others:
            await asyncio.wait(others, timeout=5)
        if self._transport is not None:
            await self._transport.close()

    def _spawn(self, coro: Coroutine, what: str) -> asyncio.Task | None:
        """Start an owned background task; it never raises into the TaskGroup."""
        if self._tg is None or self._closing:
            coro.close()
            return None
        task = self._tg.create_task(self._guard(coro, what))
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)
        if what in ("cancelled", "reply"):
            self._notices.add(task)
            task.add_done_callback(self._notices.discard)
        return task

    async def _guard(self, coro: Coroutine, what: str) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a peer's mistake never kills the process
            self.log.warning("mcp.task.failed", task=what, error=f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------ handshake

    def _replace_session(self) -> None:
        t = self._transport
        assert t is not None
        # Requests of the session being replaced can no longer be answered.
        stale, self._pending = self._pending, {}
        for fut in stale.values():
            if not fut.done():
                fut.set_exception(TransportError("the session was replaced", sent=True))
        self._session.reset()
        t.forget_session()
        t.stateless = False

    async def _handshake(self) -> None:
        """Version selection, per server and per connect (no flag).

        ``server/discover`` first, within a short timeout: a 2026-07-28 answer
        adopts the server statelessly; anything that is not positive evidence
        of one (an HTTP 4xx, a JSON-RPC error, no answer in time, a result
        listing no 2026-07-28 version) falls back to ``initialize``; a -32022
        is retried with the best version of its ``data.supported``.  The whole
        selection fits in ``init_timeout``.  A server known to be legacy (or
        moved there by need) is re-initialized directly on a reconnect.
        """
        t = self._transport
        assert t is not None
        loop = asyncio.get_running_loop()
        started = loop.time()
        if self.era == "session" and self.generation:
            self._replace_session()
            await self._initialize(self.init_timeout)
            return
        s = self._session
        limit = min(DISCOVER_TIMEOUT, self.init_timeout / 2)
        retried = False
        while True:  # a -32022 naming 2026-07-28 is asked once more (negotiate.py)
            self._replace_session()
            rid, data = s.start_discover()
            t.set_protocol_version(m26.LATEST_MODERN_VERSION)
            t.stateless = True  # a 2026-07-28 request: a 4xx's JSON-RPC error is its answer
            fut = loop.create_future()
            self._pending[rid] = fut
            why = ""
            try:
                async with asyncio.timeout(limit):
                    await t.post(data, fut, headers=(("Mcp-Method", m26.SERVER_DISCOVER),))
                    if not fut.done():
                        raise DiscoverDeclined("server/discover got no JSON-RPC answer")
                    s.finish_discover(await fut)
            except TimeoutError:
                why = f"no answer to server/discover within {limit:g}s"
            except DiscoverDeclined as exc:
                why = str(exc)
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
                why = f"server/discover answered HTTP {exc.status}"
            except TransportError as exc:
                if not exc.sent:  # unreachable: no era verdict, a connect failure
                    s.handshake_failed()
                    raise HandshakeError(f"{self.name}: {exc}") from None
                why = f"server/discover failed: {exc}"
            finally:
                self._pending.pop(rid, None)
            break
        if not why:
            t.stateless = True
            self.era = "stateless"
            self.generation += 1
            self._last_inbound = time.monotonic()
            self.log.info("mcp.handshake", protocol_version=s.protocol_version,
                          negotiated_by=m26.SERVER_DISCOVER, stateless=True,
                          supported_versions=list(s.supported_versions),
                          server_info=msgspec.to_builtins(s.server_info),
                          capabilities=dict(s.capabilities.raw), session=False,
                          instructions=(s.instructions or "")[:_MAX_AUDIT_TEXT])  # untrusted
            return
        self.log.info("mcp.discover.fallback", reason=why[:300])
        self._replace_session()
        await self._initialize(max(self.init_timeout - (loop.time() - started), 0.001))

    async def _initialize(self, limit: float) -> None:
        t = self._transport
        assert t is not None
        s = self._session
        rid, data = s.start_initialize()
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            async with asyncio.timeout(limit):
                await t.post(data, fut, initialize=True)
                if not fut.done():  # its one answer was no message for it: say why, now
                    raise HandshakeError(f"{self.name}: initialize failed: "
                                         f"{no_answer(mt.INITIALIZE, s.take_garbled())}")
                result = await fut
        except TimeoutError:
            s.handshake_failed()  # initialize is never cancelled
            raise HandshakeError(
                f"{self.name}: no answer to initialize within {self.init_timeout:g}s") from None
        except HandshakeError:
            s.handshake_failed()
            raise
        except (TransportError, HTTPStatusError, SessionExpired, ToolFault) as exc:
            s.handshake_failed()
            raise HandshakeError(f"{self.name}: initialize failed: {exc}") from None
        finally:
            self._pending.pop(rid, None)
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
        self.era = "session"
        self._last_inbound = time.monotonic()
        caps = s.capabilities
        self.log.info("mcp.handshake", protocol_version=s.protocol_version,
                      negotiated_by=mt.INITIALIZE, stateless=False,
                      server_info=msgspec.to_builtins(s.server_info),
                      capabilities=dict(caps.raw), session=bool(t.session_id),
                      instructions=(s.instructions or "")[:_MAX_AUDIT_TEXT])  # untrusted

    async def _after_connect(self, *, first: bool) -> None:
        """(Re)start the GET stream and list the catalogue; on a reconnect, first
        re-issue every subscription and synthesize one ``updated`` per watched URI."""
        self._connected.set()
        self.stale = False
        if self._session.stateless:
            await self._after_discover(first=first)
            return
        self._listener = self._spawn(self._listen(self.generation), "listen")
        if not first:
            watched = sorted(self.subscriptions)
            for uri in watched:
                try:
                    await self._request(mt.RESOURCES_SUBSCRIBE, mt.SubscribeParams(uri=uri))
                except (ToolFault, CapabilityError) as exc:
                    self.log.warning("mcp.subscribe.restore_failed", uri=uri, error=str(exc))
            # edge -> level: a change missed while disconnected is not lost
            for uri in watched:
                self.updates.put_nowait((self.name, uri))
            self.log.info("mcp.reconnected", generation=self.generation,
                          resubscribed=len(watched))
        if self.capabilities.tools:
            await self.list_tools()
        if self.capabilities.resources:
            await self._refresh_resources()

    # ------------------------------------------------------------ 2026-07-28: listen

    def _stale_part(self, what: str) -> bool:
        """Whether the ``what`` catalogue may be re-listed: its ``ttlMs`` ran out,
        or a list_changed said so (the ttl is honoured, never outguessed)."""
        return what in self._dirty or time.monotonic() >= self._expires.get(what, 0.0)

    async def _after_discover(self, *, first: bool) -> None:
        """A 2026-07-28 server (re)adopted: the listen stream, then the catalogue.

        On a reconnect the listen manager re-opens the stream and, once it is
        acknowledged, synthesizes one ``updated`` per watched URI (the §1.6 rule);
        the catalogue is re-listed only where its ttl ran out."""
        self.listen_unsupported = False  # asked again of the (re)discovered server
        self._listener = self._spawn(self._listen_modern(self.generation, resync=not first),
                                     "listen")
        if self.capabilities.tools and (first or self._stale_part("tools")):
            await self.list_tools()
        if self.capabilities.resources and (first or self._stale_part("resources")):
            await self._refresh_resources()
        if not first:
            self.log.info("mcp.reconnected", generation=self.generation,
                          resubscribed=len(self.subscriptions))

    def _listen_filter(self) -> m26.SubscriptionFilter | None:
        caps = self.capabilities
        uris = sorted(self.subscriptions - self._ended) if caps.resources_subscribe else []
        tools = caps.tools_list_changed
        resources = caps.resources_list_changed
        if not (uris or tools or resources):
            return None
        return m26.SubscriptionFilter(
            toolsListChanged=True if tools else UNSET,
            resourcesListChanged=True if resources else UNSET,
            resourceSubscriptions=uris if uris else UNSET)

    async def _listen_stream(self, sid: int | str, data: bytes, done: asyncio.Future,
                             ack: asyncio.Future) -> None:
        """One ``subscriptions/listen`` POST, held open until it ends."""
        t = self._transport
        assert t is not None
        err: BaseException | None = None
        graceful = cancelled = False
        try:
            await t.post(data, done, headers=self._session.headers(m26.SUBSCRIPTIONS_LISTEN))
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
            self._pending.pop(sid, None)
            self._session.forget(sid)
            if not done.done():
                done.cancel()
            if not ack.done():
                ack.set_exception(err or TransportError("listen stream cancelled", sent=True))
                ack.exception()
            if not cancelled:
                self._listen_ends[sid] = (graceful, err)

    async def _listen_modern(self, generation: int, *, resync: bool) -> None:
        """Keep one acknowledged ``subscriptions/listen`` stream open for what this
        client watches (list changes the server offers, subscribed URIs).

        A filter change (subscribe/unsubscribe) opens the new stream first and
        closes the old one once the new one is acknowledged, so no update falls
        between the two.  A broken stream is re-opened with backoff and then
        the state is re-read: one synthesized ``updated`` per watched URI, the
        catalogue re-listed where it may have changed.  A stream that cannot be
        re-opened because the server is unreachable is the liveness signal of
        this revision (there is no ping): the connection is recovered.
        """
        loop = asyncio.get_running_loop()
        current: asyncio.Task | None = None
        current_sid: int | str | None = None
        attempt = 0
        reopened = graceful = False
        try:
            while not self._closing and generation == self.generation:
                self._listen_changed.clear()
                epoch = self._filter_epoch
                flt = self._listen_filter()
                if flt is None:
                    if current is not None:
                        current.cancel()
                        current = None
                    self._listening = frozenset()
                    self._acked_epoch = epoch
                    acked, self._listen_acked = self._listen_acked, asyncio.Event()
                    acked.set()
                    await self._listen_changed.wait()
                    continue
                sid, data = self._session.listen(flt)
                ack: asyncio.Future = loop.create_future()
                done: asyncio.Future = loop.create_future()
                self._acks[sid] = ack
                self._pending[sid] = done
                stream = self._spawn(self._listen_stream(sid, data, done, ack), "listen.stream")
                if stream is None:  # closing
                    return
                try:
                    async with asyncio.timeout(self.init_timeout):
                        honoured: m26.SubscriptionFilter = await ack
                except (TimeoutError, TransportError, HTTPStatusError, SessionExpired,
                        RPCError) as exc:
                    stream.cancel()
                    self._listen_ends.pop(sid, None)
                    attempt += 1
                    self.log.warning("mcp.listen.failed", attempt=attempt,
                                     error=f"{type(exc).__name__}: {exc}"[:300])
                    if isinstance(exc, TransportError) and not exc.sent:
                        self._trigger_recover(expired=True, reason=f"listen: {exc}")
                        return
                    if (isinstance(exc, RPCError) and exc.code == METHOD_NOT_FOUND) or (
                            isinstance(exc, HTTPStatusError) and exc.status in (404, 405)):
                        # a server without subscriptions/listen: nothing will ever be
                        # pushed; subscribe() degrades (False) as for a 2025 server
                        # without resources.subscribe
                        self.listen_unsupported = True
                        self.log.warning("mcp.listen.unsupported",
                                         error=f"{type(exc).__name__}: {exc}"[:300])
                        self._listening = frozenset()
                        self._acked_epoch = self._filter_epoch
                        acked, self._listen_acked = self._listen_acked, asyncio.Event()
                        acked.set()
                        return
                    await asyncio.sleep(self.policy.reconnect_backoff(attempt))
                    continue
                finally:
                    self._acks.pop(sid, None)
                if current is not None:
                    assert current_sid is not None  # set with `current`
                    if current.done():  # it ended by itself while this one opened
                        ended_by_server, _ = self._listen_ends.pop(current_sid, (True, None))
                        resync = resync or not ended_by_server
                    current.cancel()  # closing the old stream is its cancellation
                current, current_sid = stream, sid
                got = honoured.resourceSubscriptions
                self._listening = frozenset(got if isinstance(got, list) else ())
                self._listen_asked = frozenset(flt.resourceSubscriptions or ())
                if reopened:  # asked again after a close, and no longer honoured: it has
                    ended = self._listen_asked - self._listening  # nothing left to fire
                    if ended:
                        self._ended |= ended
                        self.log.info("mcp.listen.ended", uris=sorted(ended)[:20])
                self._acked_epoch = epoch
                self.listen_opens += 1
                self.log.info("mcp.listen.open", subscription=sid,
                              uris=len(self._listening), reopen=resync,
                              tools_list_changed=bool(honoured.toolsListChanged),
                              resources_list_changed=bool(honoured.resourcesListChanged))
                acked, self._listen_acked = self._listen_acked, asyncio.Event()
                acked.set()
                if resync:  # edge -> level: whatever changed while we were not listening
                    resync = False
                    for uri in sorted(self.subscriptions - self._ended):
                        self.updates.put_nowait((self.name, uri))
                    # a list change missed meanwhile: re-read where the ttl allows it
                    if honoured.toolsListChanged and self._stale_part("tools"):
                        self._schedule_relist("tools", self.list_tools)
                    if honoured.resourcesListChanged and self._stale_part("resources"):
                        self._schedule_relist("resources", self._refresh_resources)
                if not graceful:  # a server that keeps closing gracefully is not hammered
                    attempt = 0
                changed = loop.create_task(self._listen_changed.wait())
                try:
                    assert current is not None
                    await asyncio.wait((current, changed), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    changed.cancel()
                reopened = graceful = False
                if current.done():  # the stream broke, or the server closed it
                    graceful, why = self._listen_ends.pop(current_sid, (False, None))
                    current = None
                    self._listening = frozenset()
                    attempt += 1
                    reopened = True
                    if graceful:
                        # a graceful close loses nothing: re-open for what may still
                        # fire (the new acknowledgement says what that is), no resync
                        self.log.info("mcp.listen.closed")
                    else:
                        resync = True
                        self.log.warning("mcp.listen.lost", error=str(why)[:300])
                    await asyncio.sleep(self.policy.backoff(attempt))
        finally:
            if current is not None:
                current.cancel()

    async def _subscribe_listen(self, uri: str) -> bool:
        """Add ``uri`` to the listen filter; True once a stream honours it."""
        self._ended.discard(uri)
        if self.listen_unsupported:
            self.log.warning("mcp.subscribe.unsupported", uri=uri,
                             detail="the server does not serve subscriptions/listen")
            return False
        if uri in self.subscriptions and uri in self._listening:
            return True
        self.subscriptions.add(uri)
        self._filter_epoch += 1
        want = self._filter_epoch
        self._listen_changed.set()
        try:
            async with asyncio.timeout(self.init_timeout):
                while self._acked_epoch < want:  # a stream opened with this filter (or later)
                    if self._closing:
                        raise ToolFault(self.name, "client closed", retryable=False,
                                        cause="closed")
                    await self._listen_acked.wait()
            if uri not in self._listening:  # acknowledged, but not honoured
                self.subscriptions.discard(uri)
                self._listen_changed.set()
                self.log.warning("mcp.subscribe.refused", uri=uri)
                return False
        except TimeoutError:
            self.subscriptions.discard(uri)
            self._listen_changed.set()
            raise ToolFault(self.name, f"subscriptions/listen for {uri} was not acknowledged "
                            f"within {self.init_timeout:g}s", retryable=True,
                            method=m26.SUBSCRIPTIONS_LISTEN) from None
        return True

    # ------------------------------------------------------------ inbound

    def _on_message(self, data: bytes | str) -> None:
        self._last_inbound = time.monotonic()
        events = self._session.receive(data)
        if self._session.garbled:  # the server's bytes refused: visible, never silent
            throttled(self.log, "warning", "mcp.garbage", key=self.name,
                      reason=self._session.garbled)
        for ev in events:
            cls = ev.__class__
            if cls is Resolved:
                fut = self._pending.pop(ev.id, None)
                if fut is not None and not fut.done():
                    fut.set_result(ev.result)
            elif cls is Failed:
                fut = self._pending.pop(ev.id, None)
                if fut is not None and not fut.done():
                    e = ev.error
                    fut.set_exception(RPCError(e.code, e.message,
                                               None if e.data is UNSET else e.data, side="remote"))
            elif cls is Reply:
                if ev.method not in (mt.PING, mt.ROOTS_LIST):
                    self.log.warning("mcp.server_request.refused", method=ev.method[:100])
                self._spawn(self._send_quiet(ev.data), "reply")
            elif cls is Notified:
                self._on_notification(ev)

    def _on_notification(self, ev: Notified) -> None:
        m = ev.method
        if m == m26.NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED:
            got = ClientSession.acknowledged(ev.params)
            if got is not None:
                fut = self._acks.get(got[0])
                if fut is not None and not fut.done():
                    fut.set_result(got[1])
            return
        if m == mt.NOTIFICATION_RESOURCES_UPDATED:
            uri = ClientSession.updated_uri(ev.params)
            if uri is not None and uri in self.subscriptions:
                self.updates.put_nowait((self.name, uri))
        elif m == mt.NOTIFICATION_TOOLS_LIST_CHANGED:
            self._dirty.add("tools")
            self._schedule_relist("tools", self.list_tools)
        elif m == mt.NOTIFICATION_RESOURCES_LIST_CHANGED:
            self._dirty.add("resources")
            self._schedule_relist("resources", self._refresh_resources)
        elif m == mt.NOTIFICATION_PROGRESS:
            self._watches.notified(ev.params)
        elif m == mt.NOTIFICATION_MESSAGE and self.log.enabled("debug"):
            self.log.debug("mcp.server_log", data=bytes(ev.params)[:_MAX_AUDIT_TEXT].decode(
                "utf-8", "replace"))

    def _schedule_relist(self, what: str, fn: Callable[[], Coroutine]) -> None:
        task = self._relist.get(what)
        if task is not None and not task.done():
            return  # one re-list in flight already covers this change
        task = self._spawn(fn(), f"relist.{what}")
        if task is not None:
            self._relist[what] = task

    async def _send_quiet(self, data: bytes) -> None:
        t = self._transport
        if t is None:
            return
        with contextlib.suppress(TransportError, HTTPStatusError, SessionExpired):
            await t.post(data)

    # ------------------------------------------------------------ requests

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

    async def _send(self, rid: int | str, data: bytes, method: str, time_limit: float | None,
                    headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
                    watch: CallWatch | None = None) -> msgspec.Raw:
        """One send of a request and the wait for its answer (within ``watch``'s limits)."""
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        t = self._transport
        assert t is not None
        self._session.take_garbled()  # only a refusal of this answer is its reason
        try:
            async with watch if watch is not None else contextlib.nullcontext():
                if time_limit is None:
                    await t.post(data, fut, headers=headers)
                    if fut.done():
                        return fut.result()
                    if not t.get_offered:  # nowhere else it could come from
                        raise no_answer(method, self._session.take_garbled())
                    return await fut
                async with asyncio.timeout(time_limit):
                    await t.post(data, fut, headers=headers)
                    if not fut.done() and not t.get_offered:
                        raise no_answer(method, self._session.take_garbled())
                    return await fut
        except BaseException as exc:
            self._pending.pop(rid, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # retrieved: it is superseded by ``exc``
            if isinstance(exc, CallLimitReached):
                self._abandon(rid, exc.reached.reason)
            elif isinstance(exc, (asyncio.CancelledError, TimeoutError)):
                self._abandon(rid, "timeout" if isinstance(exc, TimeoutError) else "cancelled")
            else:
                self._session.forget(rid)
            raise

    def _abandon(self, rid: int | str, reason: str) -> None:
        """We stop waiting for ``rid``: tell the server (never for initialize)."""
        note = self._session.cancel(rid, reason)
        if note is not None:
            self._spawn(self._send_quiet(note), "cancelled")

    async def _request(self, method: str, params: Any = UNSET, *,
                       time_limit: float | None = None, name: str | None = None
                       ) -> msgspec.Raw:
        """A request under the retry policy; returns the raw result.

        ``name`` is what ``Mcp-Name`` mirrors at 2026-07-28 (a URI, a prompt name)."""
        session = self._session

        def build() -> tuple[int | str, bytes, Any]:
            rid, data = session.request(method, params)
            return rid, data, session.headers(method, name)

        return await self._retrying(method, build, time_limit,
                                    idempotent=method in IDEMPOTENT_METHODS)

    async def _retrying(self, method: str,
                        build: Callable[[], tuple[int | str, bytes, Any]],
                        time_limit: float | None, *, idempotent: bool,
                        watch: CallWatch | None = None) -> msgspec.Raw:
        """THE place the fault policy (:mod:`agentd.mcp.faults`) is applied, to
        every request, the root's and the broker's: ``build`` makes each send
        anew (a fresh JSON-RPC id); ``classify`` decides on a re-send (one wait
        before it), a reconnect, or the ToolFault whose ``cause`` says what the
        run does.  Nothing above this re-sends a request."""
        policy = self.policy
        attempt = 0
        while True:
            attempt += 1
            gen = self.generation
            try:
                if not self._connected.is_set():
                    await self._wait_connected()
                rid, data, headers = build()
                gen = self.generation
                return await self._send(rid, data, method, time_limit, headers, watch)
            except TimeoutError:
                raise ToolFault(self.name, f"{method} timed out after {time_limit:g}s",
                                retryable=True, method=method, cause="timeout") from None
            except (TransportError, SessionExpired, HTTPStatusError, RPCError,
                    ToolFault) as exc:
                d = classify(exc, idempotent=idempotent, method=method)
                if d.reconnect and gen == self.generation:  # not already reconnected
                    expired = isinstance(exc, SessionExpired)
                    self._trigger_recover(expired=expired, reason=f"{method}: {d.reason}",
                                          event=_EXPIRED if expired else "mcp.disconnected")
                if d.resend and attempt < policy.max_attempts:
                    self.log.info("mcp.retry", method=method, attempt=attempt, reason=d.reason)
                    if not d.reconnect:  # a reconnect is waited for, not slept on
                        await policy.sleep(policy.delay(d, attempt))
                    continue
                code = exc.code if isinstance(exc, RPCError) else (
                    exc.status if isinstance(exc, HTTPStatusError) else None)
                raise ToolFault(self.name, f"{method}: {d.reason}", retryable=d.retryable,
                                code=code, method=method, cause=d.cause) from None

    def _decode(self, raw: msgspec.Raw, type_: type, method: str) -> Any:
        try:
            return codec.decode_result(raw, type_)
        except RPCError as exc:
            raise ToolFault(self.name, f"{method}: {exc.message}", retryable=False,
                            method=method) from None

    # ------------------------------------------------------------ tools

    async def list_tools(self) -> list[ToolInfo]:
        """Drain ``tools/list`` (≤ 1024 pages), replace the catalogue, audit-log it."""
        tools: dict[str, ToolInfo] = {}
        dupes = 0
        stateless = self._session.stateless
        rejected: dict[str, str] = {}
        self._dirty.discard("tools")
        listed, ttl = await self._drain(mt.TOOLS_LIST, mt.ListToolsResult, "tools")
        for t in listed:
            if t.name in tools:
                dupes += 1
                continue
            try:  # x-mcp-header (SEP-2243) counts at 2026-07-28; agentd declares no tasks
                decls = admit(t, headers=stateless, tasks=False,
                              max_depth=self.spec.max_schema_depth)
            except ToolExcluded as exc:
                rejected[t.name] = str(exc)
                self.log.warning("mcp.tools.excluded", tool=t.name[:200],
                                 reason=str(exc)[:300])
                continue
            tools[t.name] = ToolInfo(
                name_header=encode_value(t.name) if stateless else "",
                param_headers=decls,
                name=t.name, input_schema=t.inputSchema or {},
                description=_s(t.description), title=_s(t.title),
                output_schema=t.outputSchema if isinstance(t.outputSchema, dict) else None,
                annotations=msgspec.to_builtins(t.annotations) if t.annotations else {},
                name_json=orjson.dumps(t.name))
        self.tools = tools
        self.rejected_tools = rejected
        self._expires["tools"] = time.monotonic() + (ttl or 0) / 1000
        self.tools_version += 1
        self.log.info("mcp.tools.audit", count=len(tools), duplicates=dupes, tools=[
            {"name": t.name, "title": t.title, "description": t.description[:_MAX_AUDIT_TEXT],
             "annotations": t.annotations} for t in tools.values()])
        if self.on_tools_changed is not None:
            self.on_tools_changed(self)
        return list(tools.values())

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | str | bytes | None = None,
                        *, time_limit: float | None = None) -> Observation:
        """Call a tool; the model-facing :class:`Observation`, or :class:`ToolFault`.

        Arguments are validated against the tool's ``inputSchema`` first: a
        mismatch is an ``is_error`` observation and nothing is sent.  ``time_limit``
        abandons the call (``notifications/cancelled``) with a retryable fault;
        so does cancelling the calling task (which then re-raises).
        """
        tool = self.tools.get(name)
        wired = wire_arguments(name, arguments)
        if isinstance(wired, str):
            return Observation(wired, is_error=True)
        args, args_json = wired
        if tool is not None:
            v = input_validator(tool)
            if v is not None and not v.is_valid(args):
                errs = v.errors(args)
                return Observation(f"arguments do not match the input schema of tool {name}: "
                                   + "; ".join(errs), is_error=True)
            name_json = tool.name_json
        else:
            name_json = orjson.dumps(name)
        watch = self._watches.open(name)
        with McpCall(self.name, name, listed=tool is not None,
                     revision=self.protocol_version) as rec:  # span, count, latency
            try:
                if not self._session.stateless:
                    raw = await self._call(name_json, args_json, time_limit, watch=watch)
                    return rec.done(self._tool_observation(name, tool, raw))
                raw = await self._call_stateless(name, args, name_json, args_json, time_limit,
                                                 watch)
                return rec.done(self._tool_observation(name, self.tools.get(name), raw))
            except CallLimitReached as exc:  # an observation: the server stays in use
                r = exc.reached
                return rec.done(Observation(r.text, is_error=True), f"{r.limit}_limit")
            finally:
                if watch is not None:
                    watch.release()

    def _call_headers(self, name: str, args: Mapping[str, Any]) -> list[tuple[str, str]]:
        tool = self.tools.get(name)
        headers = [("Mcp-Method", mt.TOOLS_CALL),
                   ("Mcp-Name", tool.name_header if tool is not None else encode_value(name))]
        if tool is not None and tool.param_headers:
            headers.extend(param_headers(tool.param_headers, args))
        return headers

    async def _call_stateless(self, name: str, args: Mapping[str, Any], name_json: bytes,
                              args_json: bytes, time_limit: float | None,
                              watch: CallWatch | None = None) -> msgspec.Raw:
        """``tools/call`` at 2026-07-28: the standard and ``x-mcp-header`` headers,
        MRTR answered, and one re-list + retry on a header mismatch (-32020), as
        the revision advises (the tool's schema may have changed)."""
        relisted = False
        extra = b""
        rounds = 0
        while True:
            try:
                raw = await self._call(name_json, args_json, time_limit,
                                       self._call_headers(name, args), extra, watch)
            except ToolFault as exc:
                if exc.code != m26.HEADER_MISMATCH or relisted:
                    raise
                relisted = True
                self.log.info("mcp.header_mismatch", tool=name[:200], error=exc.message[:300])
                await self.list_tools()
                if name not in self.tools:
                    raise
                continue
            ir = ClientSession.input_required(raw)
            if ir is None:
                return raw
            rounds += 1
            extra = await self._answer_input(ir, rounds, mt.TOOLS_CALL)

    async def _answer_input(self, ir: InputRequired, rounds: int, method: str) -> bytes:
        """The params to add to the retry of an ``input_required`` request (MRTR)."""
        if ir.refused:
            raise ToolFault(self.name, f"{method}: the server asked for input agentd does not "
                            "provide (declared client capabilities: none): "
                            + ", ".join(ir.refused)[:300], retryable=False, method=method)
        if rounds > MAX_INPUT_ROUNDS:
            raise ToolFault(self.name, f"{method}: still input_required after "
                            f"{MAX_INPUT_ROUNDS} rounds", retryable=False, method=method)
        self.log.info("mcp.input_required", method=method, round=rounds,
                      answered=bool(ir.responses), state=ir.state is not None)
        if not ir.responses:  # state only: give the server a moment, bounded
            await asyncio.sleep(min(0.05 * 2 ** (rounds - 1), 0.25))
        extra = b""
        if ir.responses:
            extra += b',"inputResponses":' + ir.responses
        if ir.state is not None:
            extra += b',"requestState":' + orjson.dumps(ir.state)  # echoed unchanged
        return extra

    async def _call(self, name_json: bytes, args_json: bytes, time_limit: float | None,
                    headers: list[tuple[str, str]] | tuple = (), extra: bytes = b"",
                    watch: CallWatch | None = None) -> msgspec.Raw:
        session = self._session

        def build() -> tuple[int | str, bytes, Any]:
            # the live span's traceparent, when tracing (SEP-414); else the run's
            meta = trace.meta(session.meta_json if session.stateless else self._meta_json)
            if watch is not None:  # a fresh progressToken per send (both revisions)
                meta = watch.meta(meta)
            rid, data = session.call_tool(name_json, args_json, meta, extra)
            return rid, data, headers

        return await self._retrying(mt.TOOLS_CALL, build, time_limit, idempotent=False,
                                    watch=watch)

    def _tool_observation(self, name: str, tool: ToolInfo | None, raw: msgspec.Raw
                          ) -> Observation:
        r = self._decode(raw, mt.CallToolResult, mt.TOOLS_CALL)
        text = render_content(r.content)
        if r.isError:
            return Observation(text, True, None, tuple(r.content))
        structured = None
        if self._session.structured_output:
            sc = r.structuredContent
            if tool is not None and tool.output_schema is not None:
                if sc is UNSET:
                    raise ToolFault(self.name, f"tool {name} declares an outputSchema but "
                                    "returned no structuredContent", retryable=False,
                                    method=mt.TOOLS_CALL)
                v = output_validator(tool)
                if v is not None and not v.is_valid(sc):
                    raise ToolFault(self.name, f"structuredContent of tool {name} does not "
                                    "match its outputSchema: " + "; ".join(v.errors(sc)),
                                    retryable=False, method=mt.TOOLS_CALL)
            if sc is not UNSET:
                structured = sc
        return Observation(text, False, structured, tuple(r.content))

    # ------------------------------------------------------------ resources

    async def _drain(self, method: str, type_: type, attr: str) -> tuple[list, int | None]:
        """Every page of a paginated list (at most ``MAX_LIST_PAGES``): the items in
        order, and at 2026-07-28 the smallest ``ttlMs`` of its pages (None before)."""
        items: list = []
        cursor: str | None = None
        ttl: int | None = None
        stateless = self._session.stateless
        for _ in range(MAX_LIST_PAGES):
            params = mt.PaginatedParams(cursor=cursor) if cursor is not None else UNSET
            raw = await self._request(method, params)
            page = self._decode(raw, type_, method)
            if stateless:
                ttl = ttl_ms(raw) if ttl is None else min(ttl, ttl_ms(raw))
            items.extend(getattr(page, attr))
            cursor = page.nextCursor if page.nextCursor else None
            if cursor is None:
                return items, ttl
        raise ToolFault(self.name, f"{method} of server {self.name!r} did not end after "
                        f"{MAX_LIST_PAGES} pages", retryable=False, method=method)

    async def list_resources(self) -> list[ResourceInfo]:
        """Drain ``resources/list`` into the catalogue (URIs and metadata, never bodies)."""
        res, ttl = await self._drain(mt.RESOURCES_LIST, mt.ListResourcesResult, "resources")
        if ttl is not None:
            self._expires["resources"] = time.monotonic() + ttl / 1000
        self.resources = [ResourceInfo(
            server=self.name, uri=r.uri, name=r.name,
            description=_s(r.description), mime_type=_s(r.mimeType),
            size=r.size if isinstance(r.size, int) else None) for r in res]
        return self.resources

    async def list_resource_templates(self) -> list[mt.ResourceTemplate]:
        """``resources/templates/list``: kept as information only (never subscribed)."""
        self.resource_templates, _ = await self._drain(
            mt.RESOURCES_TEMPLATES_LIST, mt.ListResourceTemplatesResult, "resourceTemplates")
        return self.resource_templates

    async def _refresh_resources(self) -> None:
        self._dirty.discard("resources")
        await self.list_resources()
        try:
            await self.list_resource_templates()
        except ToolFault as exc:  # optional for servers; informational anyway
            self.log.info("mcp.templates.unavailable", error=exc.message)

    async def read_resource(self, uri: str, *, time_limit: float | None = None) -> Observation:
        """``resources/read``: text items as text, blobs described (base64 in ``content``).

        A missing resource (:func:`~agentd.mcp.faults.resource_missing`) is an
        ``is_error`` observation naming the URI, never a fault.
        """
        params: Any = mt.ReadResourceParams(uri=uri)
        rounds = 0
        while True:
            try:
                raw = await self._request(mt.RESOURCES_READ, params, time_limit=time_limit,
                                          name=uri)
            except ToolFault as exc:
                if exc.cause == "missing":  # faults.resource_missing: an answer, not a fault
                    self.log.info("mcp.resource.missing", uri=uri[:300], code=exc.code)
                    return Observation(f"resource not found: {uri}", is_error=True)
                raise
            ir = ClientSession.input_required(raw) if self._session.stateless else None
            if ir is None:
                break
            rounds += 1
            await self._answer_input(ir, rounds, mt.RESOURCES_READ)
            params = {"uri": uri}
            if ir.responses:
                params["inputResponses"] = msgspec.Raw(ir.responses)
            if ir.state is not None:
                params["requestState"] = ir.state
        r = self._decode(raw, mt.ReadResourceResult, mt.RESOURCES_READ)
        return Observation("\n".join(render_item(c) for c in r.contents), False, None,
                           tuple(r.contents))

    @staticmethod
    def blob_bytes(item: mt.BlobResourceContents) -> bytes:
        return base64.b64decode(item.blob)

    async def subscribe(self, uri: str) -> bool:
        """Subscribe one concrete URI: ``resources/subscribe``, or the listen filter
        at 2026-07-28 (a server whose listen cannot deliver is moved to 2025-11-25
        first, :mod:`agentd.mcp.negotiate`).  False (with a warning) when the
        server cannot deliver updates: the client degrades instead of sending it.
        """
        if not uri or "{" in uri or "}" in uri:
            raise ValueError(f"subscribe needs a concrete URI, not {uri!r}")
        if self._needs_legacy() and await self._renegotiate(uri):
            return await self.subscribe(uri)  # now at 2025-11-25 (agentd/mcp/negotiate.py)
        if not self.capabilities.resources_subscribe:
            self.log.warning("mcp.subscribe.unsupported", uri=uri)
            return False
        if self._session.stateless:  # 2026-07-28: a URI of the subscriptions/listen filter
            return await self._subscribe_listen(uri) or (
                self._needs_legacy() and await self.subscribe(uri))  # listen said -32601
        await self._request(mt.RESOURCES_SUBSCRIBE, mt.SubscribeParams(uri=uri))
        self.subscriptions.add(uri)
        return True

    def _needs_legacy(self) -> bool:
        s = self._session
        return renegotiate_for_updates(
            stateless=s.stateless, delivers=s.listen_delivers,
            listen_unsupported=self.listen_unsupported, legacy_refused=self.legacy_refused)

    async def _renegotiate(self, uri: str) -> bool:
        """Negotiation by need: this server's 2026-07-28 surface cannot deliver the
        updates a subscription needs, so speak 2025-11-25 to it from now on (a
        reconnect re-initializes it too).  False, logged, when it will not
        initialize: it is discovered again and the subscription degrades."""
        async with self._renegotiating:
            if not self._session.stateless:
                return True  # another subscribe did it meanwhile
            why = ("subscriptions/listen answered -32601" if self.listen_unsupported
                   else "server/discover says resources.subscribe: false")
            listener = self._listener
            if listener is not None:
                listener.cancel()
            self._connected.clear()
            self.era = "session"  # pinned: _handshake re-initializes from now on
            try:
                await self._handshake()
                if not self.capabilities.resources_subscribe:  # nothing gained there
                    raise HandshakeError("no resources.subscribe at 2025-11-25 either")
            except HandshakeError as exc:
                self.legacy_refused = True
                self.era = None
                self.log.warning("mcp.renegotiate.failed", uri=uri, reason=why,
                                 error=str(exc)[:300])
                self._trigger_recover(expired=True, reason="back to 2026-07-28")
                return False
            self.log.info("mcp.renegotiated", uri=uri, reason=why,
                          protocol_version=self.protocol_version)
            await self._after_connect(first=not self.subscriptions)
            return True

    async def unsubscribe(self, uri: str) -> None:
        if uri not in self.subscriptions:
            return
        self.subscriptions.discard(uri)
        if self._session.stateless:
            self._ended.discard(uri)
            self._filter_epoch += 1
            self._listen_changed.set()  # re-opened without it
            return
        if self.capabilities.resources_subscribe and self._connected.is_set():
            with contextlib.suppress(ToolFault):
                await self._request(mt.RESOURCES_UNSUBSCRIBE, mt.UnsubscribeParams(uri=uri))

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
        misses = 0
        while not self._closing:
            await asyncio.sleep(interval)
            if not self._connected.is_set() or self._session.stateless:
                misses = 0  # 2026-07-28 has no ping: failed requests and listen streams tell
                continue
            if time.monotonic() - self._last_inbound < interval:
                misses = 0
                continue  # not idle: traffic proves liveness
            try:
                await self._send_ping()
                misses = 0
            except RPCError:
                misses = 0  # it answered, if with an error
            except SessionExpired as exc:
                self._trigger_recover(expired=True, reason=f"ping: {exc}", event=_EXPIRED)
            except TransportError as exc:  # the connection is gone: reconnect now
                misses = 0
                self._trigger_recover(expired=False, reason=f"ping: {exc}")
            except Exception as exc:  # no answer: a miss
                misses += 1
                self.log.warning("mcp.ping.missed", misses=misses, error=str(exc)[:200])
                if misses >= STALE_AFTER_MISSES:
                    misses = 0
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
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ToolFault(self.name, f"server gone: {reason}",
                                            retryable=False, cause="stale"))
                fut.exception()
        self._pending.clear()
        if self._transport is not None:
            with contextlib.suppress(Exception):
                await self._transport.close()
        self.log.warning("mcp.gone", reason=reason)
        if self.on_gone is not None:
            self.on_gone(self, reason)

    async def _send_ping(self) -> None:
        rid, data = self._session.request(mt.PING)
        await self._send(rid, data, mt.PING, self.ping_timeout)

    async def _listen(self, generation: int) -> None:
        t = self._transport
        assert t is not None
        try:
            await t.listen()
        except SessionExpired:
            if generation != self.generation:
                return
            # A 404 on GET may only mean "no GET route": ask the session itself.
            try:
                await self._send_ping()
            except SessionExpired as exc:
                self._trigger_recover(expired=True, reason=f"GET stream: {exc}", event=_EXPIRED)
            except (TransportError, HTTPStatusError, RPCError, TimeoutError):
                pass  # the pinger / the next request will find out
            else:
                t.get_offered = False
                self.log.info("mcp.stream.not_offered", status=404)
        except (TransportError, HTTPStatusError) as exc:
            if generation == self.generation:
                self._trigger_recover(expired=False, reason=f"stream lost: {exc}")
        else:
            if generation == self.generation:
                self.log.info("mcp.stream.not_offered", status=t.not_offered)

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
        attempt = 0
        while not self._closing:
            if drop:
                await t.reopen()  # a stale server: new connections, new session
                drop = False
                expired = True
            if attempt:
                await self.policy.reconnect_pause(attempt, self._kick)
            attempt += 1
            try:
                if not expired and t.session_id:
                    # the session may have survived a network blip: probe it
                    try:
                        await self._send_ping()
                    except (SessionExpired, HTTPStatusError) as exc:
                        if isinstance(exc, HTTPStatusError) and not 400 <= exc.status < 500:
                            raise  # a 4xx to our ping: the session is not usable either
                        expired = True
                        self.log.warning(_EXPIRED, reason=f"probe: {exc}"[:300])
                    except RPCError:
                        pass
                    else:
                        self.generation += 1
                        self._spawn(self._finish_recover(), "restore")
                        return
                if expired or not t.session_id:
                    await self._handshake()
                    self._spawn(self._finish_recover(), "restore")
                    return
            except (HandshakeError, TransportError, HTTPStatusError, TimeoutError) as exc:
                self.last_error = str(exc)[:300]
                self.log.info("mcp.reconnect.failed", attempt=attempt, error=str(exc)[:300])
                expired = expired or isinstance(exc, HandshakeError)

    async def _finish_recover(self) -> None:
        try:
            await self._after_connect(first=False)
        except (ToolFault, CapabilityError) as exc:
            self.log.warning("mcp.restore.failed", error=str(exc)[:300])
