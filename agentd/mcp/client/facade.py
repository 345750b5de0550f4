"""``MCPClient``: one declared MCP server, over Streamable HTTP (or, declared so,
the HTTP+SSE transport of 2024-11-05: :mod:`agentd.mcp.client.legacy_sse`).

An async context manager.  Entering it connects and runs the handshake (spec
§1.3) within ``init_timeout``; a failure raises :class:`HandshakeError`.  Inside
it the client owns a ``TaskGroup`` with its background work (the standalone GET
stream or the 2026-07-28 listen stream, the idle pinger, re-listing on
``list_changed``, reconnection, sending ``notifications/cancelled``); leaving
it stops them, DELETEs the session and closes the connections.  Nothing it
starts outlives it.

The client is a facade over parts with their own state, each handed what it
needs: :class:`~agentd.mcp.client.connection.Connection` (transport, session, the one
dispatcher, the handshake), :class:`~agentd.mcp.client.request_loop.RequestLoop`
(every request under the fault policy of :mod:`agentd.mcp.client.rules.faults`),
:class:`~agentd.mcp.client.recovery.Recovery` (the pinger, reconnection, give-up),
:class:`~agentd.mcp.client.subscriptions.Subscriptions` (the update route of the
revision, negotiation by need), :class:`~agentd.mcp.client.listings.Listings` (the
catalogue) and :class:`~agentd.mcp.client.tool_calls.ToolCalls`.  What differs between
the protocol revisions is answered by the :class:`~agentd.mcp.client.rules.revision.Revision`
the handshake chose, which the session holds.  See ``docs/client.md``.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

import msgspec
import orjson

import agentd
from agentd.config.endpoints import resolve_headers
from agentd.config.model import (
    DEFAULT_INIT_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    ServerSpec,
    StreamBounds,
)
from agentd.errors import ToolFault
from agentd.log import log
from agentd.mcp.client.call_watch import CallWatches
from agentd.mcp.client.connection import MAX_AUDIT_TEXT, Connection
from agentd.mcp.client.listings import MAX_LIST_PAGES, Listings
from agentd.mcp.client.oauth.errors import OAuthError
from agentd.mcp.client.recovery import Recovery
from agentd.mcp.client.request_loop import RequestLoop
from agentd.mcp.client.rules.call_limits import ToolLimits, server_limits
from agentd.mcp.client.rules.call_meta import traceparent_for
from agentd.mcp.client.rules.content import render_item
from agentd.mcp.client.rules.faults import RetryPolicy
from agentd.mcp.client.rules.revision import LEGACY_SSE, SESSION, Channel
from agentd.mcp.client.rules.session import Capabilities, ClientSession, Notified
from agentd.mcp.client.subscriptions import Subscriptions
from agentd.mcp.client.tasks import Tasks
from agentd.mcp.client.tool_calls import ToolCalls, answer_input
from agentd.secrets import DEFAULT_SECRETS_DIR
from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt
from agentd.wire.shapes import Observation, ResourceInfo, ToolInfo

__all__ = [
    "DEFAULT_PING_TIMEOUT",
    "MAX_LIST_PAGES",
    "MCPClient",
    "Observation",
    "ResourceInfo",
    "ToolFault",
    "ToolInfo",
]

DEFAULT_PING_TIMEOUT: Final = 10.0
RUN_ID_META: Final = "io.modelcontextprotocol/run-id"


class MCPClient:
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
        self.auth: Any = None  # an agentd.mcp.client.oauth.OAuth to use instead of the default
        self.run_id = run_id
        self.init_timeout = init_timeout
        self.ping_interval = ping_interval
        self.secrets_dir = secrets_dir
        self.policy = policy or RetryPolicy()
        self.updates: asyncio.Queue = updates if updates is not None else asyncio.Queue()
        self.on_tools_changed = on_tools_changed
        self.on_gone = on_gone
        self.log = log.bind(server=spec.name)
        # a server on the HTTP+SSE transport speaks its own revision (no discover, 2024-11-05)
        self._session = ClientSession(
            client_version=agentd.__version__,
            session_revision=LEGACY_SSE if spec.transport == "sse" else SESSION)
        # W3C trace context of the run (SEP-414, sent in every 2026-07-28 _meta): the
        # trace id follows from the run id, so every server of one run sees one trace
        self.traceparent = traceparent or traceparent_for(run_id)
        self._session.set_meta({RUN_ID_META: run_id, "traceparent": self.traceparent})
        self._conn = Connection(spec.name, self.log, self._session, spawn=self._spawn,
                                on_notified=self._on_notification, ping_interval=ping_interval)
        self._tasks = Tasks(self.log, self._task_failed)  # the one owner of the TaskGroup
        self._recovery = Recovery(
            spec.name, self.log, self._conn, self.policy, spawn=self._spawn,
            init_timeout=init_timeout, ping_interval=ping_interval,
            # a ping cannot take longer than the interval it is sent at (docs/faults.md)
            ping_timeout=min(ping_timeout, ping_interval) if ping_interval else ping_timeout,
            reconnect_stale=reconnect_stale, on_connected=self._connected_again,
            stop_stream=self._stop_stream, on_gone=self._gone)
        self._requests = RequestLoop(spec.name, self.log, self._conn, self.policy,
                                     self._recovery)
        self._listings = Listings(spec.name, self.log, self._conn, self._requests,
                                  max_schema_depth=spec.max_schema_depth, spawn=self._spawn,
                                  on_tools_changed=self._tools_changed)
        self._subs = Subscriptions(spec.name, self.log, self._conn, self._requests,
                                   self._recovery, self.updates, self._listings,
                                   policy=self.policy, spawn=self._spawn,
                                   init_timeout=init_timeout)
        # every tools/call's idle deadline and cap (agentd.mcp.client.rules.call_limits)
        self._watches = CallWatches(server_limits(tool_limits or ToolLimits(), spec), self.log,
                                    spec.name)
        self._calls = ToolCalls(spec.name, self.log, self._conn, self._requests,
                                self._listings, self._watches,
                                run_meta=orjson.dumps({RUN_ID_META: run_id}))

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
        return self._recovery.connected

    @property
    def era(self) -> str | None:
        """The name of the revision the server is spoken to at ("stateless":
        2026-07-28, "session": the initialize revisions), once negotiated."""
        s = self._session
        return s.revision.name if s.state == "ready" else None

    @property
    def generation(self) -> int:
        """Bumps at every (re)initialize."""
        return self._conn.generation

    @property
    def gone(self) -> str | None:
        """Why the connection was given up for good (None while it is not)."""
        return self._recovery.gone

    @property
    def stale(self) -> bool:
        return self._recovery.stale

    @property
    def last_error(self) -> str:
        """The last reconnect failure (named in faults)."""
        return self._recovery.last_error

    @property
    def legacy_refused(self) -> bool:
        """Moving this server to 2025-11-25 for a subscription failed: it stays at 2026-07-28."""
        return self._subs.legacy_refused

    @property
    def subscriptions(self) -> set[str]:
        return self._subs.uris

    @property
    def listening(self) -> frozenset[str]:
        """The URIs the open 2026-07-28 listen stream honours."""
        return self._subs.listener.plan.listening

    @property
    def listen_opens(self) -> int:
        """Listen streams acknowledged (re-opens included)."""
        return self._subs.listener.plan.opens

    @property
    def tools(self) -> dict[str, ToolInfo]:
        return self._listings.tools

    @property
    def tools_version(self) -> int:
        return self._listings.tools_version

    @property
    def rejected_tools(self) -> dict[str, str]:
        """Tool name -> why the catalogue left it out."""
        return self._listings.rejected_tools

    @property
    def resources(self) -> list[ResourceInfo]:
        return self._listings.resources

    @property
    def resource_templates(self) -> list[mt.ResourceTemplate]:
        return self._listings.resource_templates

    # ------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> MCPClient:
        headers = resolve_headers(self.spec, self.secrets_dir)
        spec = self.spec
        from agentd.mcp.client.legacy_sse import LegacySSETransport
        from agentd.mcp.client.oauth import auth_for
        from agentd.mcp.client.transport import StreamableHTTPTransport

        auth = self.auth if self.auth is not None else auth_for(spec, self.secrets_dir, headers)
        http: dict[str, Any] = {"ca_file": spec.ca_file, "client_cert": spec.client_cert,
                "client_key": spec.client_key, "auth": auth, "bounds": self.stream_bounds}
        self._conn.bind(
            LegacySSETransport(spec.url, headers, on_message=self._conn.receive,
                               spawn=self._spawn, **http) if spec.transport == "sse"
            else StreamableHTTPTransport(spec.url, headers, on_message=self._conn.receive,
                                         **http))
        t = self._conn.transport
        assert t is not None
        await self._tasks.start()
        try:
            await t.open()
            try:
                await self._conn.handshake(self.init_timeout)
            except OAuthError as exc:  # OAuth: log in outside the handshake's timeouts
                if exc.kind != "required":
                    raise
                await exc.resolve()  # (or fail naming `agentd auth login`), retry
                await self._conn.handshake(self.init_timeout)
            if auth is not None:
                auth.deferred = False  # from now on a 401/403 is handled inline
            await self._recovery.after_connect(first=True)
        except BaseException as exc:
            await self._shutdown()
            try:
                await self._tasks.stop()  # its tasks are cancelled; the error is ours
            except Exception as bug:  # logged (mcp.task.failed) and chained, never lost
                raise exc from bug
            raise
        if self.ping_interval:
            self._spawn(self._recovery.pinger(), "pinger")
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._shutdown()
        await self._tasks.stop()  # a background task's bug is raised here

    async def aclose(self) -> None:
        await self.__aexit__(None, None, None)

    async def _shutdown(self) -> None:
        self._recovery.close()
        self._subs.listener.closed()  # a subscribe() waiting for a listen acknowledgement
        # cancellation notices and answers already on their way get a moment to leave
        await self._tasks.flush_notices(2)
        self._tasks.cancel_all()
        self._conn.fail_all(lambda: ToolFault(self.name, "client closed", retryable=False))
        await self._tasks.settle(5)  # cancelled tasks unwind before the connector goes away
        if self._conn.transport is not None:
            await self._conn.transport.close()

    def _spawn(self, coro: Coroutine, what: str) -> asyncio.Task | None:
        """Start an owned background task (None once closing)."""
        if self._recovery.closing:
            coro.close()
            return None
        return self._tasks.spawn(coro, what, notice=what in ("cancelled", "reply"))

    # ------------------------------------------------------------ the parts' hooks

    async def _connected_again(self, first: bool) -> None:
        """What every (re)connect does: the update stream, the subscriptions, the catalogue."""
        await self._subs.restore(first=first)

    def _stop_stream(self) -> None:
        self._subs.stop_stream()

    def _task_failed(self, exc: BaseException) -> None:
        self._recovery.task_failed(exc)

    def _gone(self, reason: str) -> None:
        if self.on_gone is not None:
            self.on_gone(self, reason)

    def _tools_changed(self) -> None:
        if self.on_tools_changed is not None:
            self.on_tools_changed(self)

    def _on_notification(self, ev: Notified) -> None:
        m = ev.method
        if m == m26.NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED:
            self._subs.listener.acknowledged(ev.params)
            return
        if m == mt.NOTIFICATION_RESOURCES_UPDATED:
            uri = ClientSession.updated_uri(ev.params)
            if uri is not None and uri in self._subs.uris:
                self.updates.put_nowait((self.name, uri))
        elif m == mt.NOTIFICATION_TOOLS_LIST_CHANGED:
            self._listings.changed("tools")
        elif m == mt.NOTIFICATION_RESOURCES_LIST_CHANGED:
            self._listings.changed("resources")
        elif m == mt.NOTIFICATION_PROGRESS:
            self._watches.notified(ev.params)
        elif m == mt.NOTIFICATION_MESSAGE and self.log.enabled("debug"):
            self.log.debug("mcp.server_log", data=bytes(ev.params)[:MAX_AUDIT_TEXT].decode(
                "utf-8", "replace"))

    # ------------------------------------------------------------ requests

    async def ping(self, time_limit: float | None = None) -> None:
        """The revision's probe: ``ping`` (2025-11-25), or ``server/discover`` at
        2026-07-28, which has no ping."""
        await self._requests.request(self._session.revision.probe,
                                     time_limit=time_limit or self._recovery.ping_timeout)

    async def list_tools(self) -> list[ToolInfo]:
        """Drain ``tools/list`` (≤ 1024 pages), replace the catalogue, audit-log it."""
        return await self._listings.list_tools()

    async def list_resources(self) -> list[ResourceInfo]:
        """Drain ``resources/list`` into the catalogue (URIs and metadata, never bodies)."""
        return await self._listings.list_resources()

    async def list_resource_templates(self) -> list[mt.ResourceTemplate]:
        """``resources/templates/list``: kept as information only (never subscribed)."""
        return await self._listings.list_resource_templates()

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | str | bytes | None = None,
                        *, time_limit: float | None = None) -> Observation:
        """Call a tool; the model-facing :class:`Observation`, or :class:`ToolFault`.

        Arguments are validated against the tool's ``inputSchema`` first: a
        mismatch is an ``is_error`` observation and nothing is sent.  ``time_limit``
        abandons the call (``notifications/cancelled``) with a retryable fault;
        so does cancelling the calling task (which then re-raises).
        """
        return await self._calls.call(name, arguments, time_limit)

    async def read_resource(self, uri: str, *, time_limit: float | None = None) -> Observation:
        """``resources/read``: text items as text, blobs described (base64 in ``content``).

        A missing resource (:func:`~agentd.mcp.client.rules.faults.resource_missing`) is an
        ``is_error`` observation naming the URI, never a fault.
        """
        params: Any = mt.ReadResourceParams(uri=uri)
        rounds = 0
        while True:
            try:
                raw = await self._requests.request(mt.RESOURCES_READ, params,
                                                   time_limit=time_limit, name=uri)
            except ToolFault as exc:
                if exc.cause == "missing":  # faults.resource_missing: an answer, not a fault
                    self.log.info("mcp.resource.missing", uri=uri[:300], code=exc.code)
                    return Observation(f"resource not found: {uri}", is_error=True)
                raise
            ir = self._session.revision.input_required(raw)
            if ir is None:
                break
            rounds += 1
            await answer_input(self.name, self.log, ir, rounds, mt.RESOURCES_READ)
            params = {"uri": uri}
            if ir.responses:
                params["inputResponses"] = msgspec.Raw(ir.responses)
            if ir.state is not None:
                params["requestState"] = ir.state
        r = self._requests.decode(raw, mt.ReadResourceResult, mt.RESOURCES_READ)
        return Observation("\n".join(render_item(c) for c in r.contents), False, None,
                           tuple(r.contents))

    @staticmethod
    def blob_bytes(item: mt.BlobResourceContents) -> bytes:
        return base64.b64decode(item.blob)

    # ------------------------------------------------------------ subscriptions

    async def subscribe(self, uri: str) -> bool:
        """Subscribe one concrete URI: ``resources/subscribe``, or the listen filter
        at 2026-07-28 (a server whose listen cannot deliver is moved to 2025-11-25
        first, :mod:`agentd.mcp.client.rules.negotiate`).  False (with a warning) when the
        server cannot deliver updates: the client degrades instead of sending it.
        """
        return await self._subs.subscribe(uri)

    async def unsubscribe(self, uri: str) -> None:
        await self._subs.unsubscribe(uri)

    async def update_channel(self) -> Channel | None:
        """The channel an ``updated`` for a subscribed URI would come on, or None
        (the reactive daemon then polls; :mod:`agentd.mcp.client.subscriptions`)."""
        return await self._subs.channel()
