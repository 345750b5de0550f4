"""``MCPClient``: one declared MCP server, over Streamable HTTP.

An async context manager.  Entering it connects and runs the handshake (spec
§1.3) within ``init_timeout``; a failure raises :class:`HandshakeError`.  Inside
it the client owns a ``TaskGroup`` with its background work (the standalone GET
stream or the 2026-07-28 listen stream, the idle pinger, re-listing on
``list_changed``, reconnection, sending ``notifications/cancelled``); leaving
it stops them, DELETEs the session and closes the connections.  Nothing it
starts outlives it.

The client is the policy over sans-IO units and one thin connection:
:mod:`agentd.mcp.connection` (transport, session, the one dispatcher, the
handshake), :mod:`agentd.mcp.client_session` (the protocol rules),
:mod:`agentd.mcp.liveness` (when to ping, when a server is stale),
:mod:`agentd.mcp.listen` / :mod:`agentd.mcp.listening` (the 2026-07-28 listen
stream), :class:`agentd.mcp.catalogue.Freshness` (the catalogue's ttl), and
the fault policy of :mod:`agentd.mcp.faults`.  See ``docs/client.md``.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec
import orjson
from msgspec import UNSET, UnsetType

import agentd
from agentd.config import (
    DEFAULT_INIT_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    ServerSpec,
    StreamBounds,
    resolve_headers,
)
from agentd.errors import ToolFault
from agentd.log import log
from agentd.mcp.arguments import wire_arguments
from agentd.mcp.call_limits import ToolLimits, server_limits
from agentd.mcp.call_watch import LIMIT_CAUSE, CallWatch, CallWatches
from agentd.mcp.catalogue import Excluded, Freshness, admit
from agentd.mcp.channel import UpdateChannel
from agentd.mcp.client_2026 import traceparent_for, ttl_ms
from agentd.mcp.client_session import (
    Capabilities,
    ClientSession,
    Notified,
)
from agentd.mcp.connection import MAX_AUDIT_TEXT, Connection
from agentd.mcp.content import render_content, render_item
from agentd.mcp.faults import (
    IDEMPOTENT_METHODS,
    HTTPStatusError,
    RetryPolicy,
    RPCError,
    SessionExpired,
    TransportError,
    classify,
)
from agentd.mcp.listen import Listener
from agentd.mcp.oauth.errors import OAuthError
from agentd.mcp.param_headers import encode_value
from agentd.mcp.schema import input_validator, output_validator
from agentd.mcp.subscribing import Subscribing
from agentd.mcp.tasks import Tasks
from agentd.mcp.tool_calls import ToolCalling
from agentd.obs.calls import McpCall
from agentd.secrets import DEFAULT_SECRETS_DIR
from agentd.wire import codec
from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt
from agentd.wire.shapes import Observation, ResourceInfo, ToolInfo

if TYPE_CHECKING:  # imported when connecting: the tool types need no HTTP stack
    pass

__all__ = [
    "DEFAULT_PING_TIMEOUT",
    "MAX_LIST_PAGES",
    "MCPClient",
    "Observation",
    "ResourceInfo",
    "ToolFault",
    "ToolInfo",
]

MAX_LIST_PAGES: Final = 1024
DEFAULT_PING_TIMEOUT: Final = 10.0
RUN_ID_META: Final = "io.modelcontextprotocol/run-id"
_EXPIRED: Final = "mcp.session.expired"  # the server no longer knows our session


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ""



class MCPClient(UpdateChannel, Subscribing, ToolCalling):
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
        self._watches = CallWatches(server_limits(tool_limits or ToolLimits(), spec), self.log,
                                    spec.name)
        self._session = ClientSession(client_version=agentd.__version__)
        self._conn = Connection(spec.name, self.log, self._session, spawn=self._spawn,
                                on_notified=self._on_notification, ping_interval=ping_interval)
        self._tasks = Tasks(self.log, self._task_failed)  # the one owner of the TaskGroup
        self._connected = asyncio.Event()
        self._closing = False
        self._recovering: asyncio.Task | None = None
        self._kick = asyncio.Event()  # set by a call waiting on a reconnect
        self._listener: asyncio.Task | None = None  # the GET stream's or the listen stream's
        self._relist: dict[str, asyncio.Task] = {}
        self._meta_json = orjson.dumps({RUN_ID_META: run_id})
        # W3C trace context of the run (SEP-414, sent in every 2026-07-28 _meta): the
        # trace id follows from the run id, so every server of one run sees one trace
        self.traceparent = traceparent or traceparent_for(run_id)
        self._session.set_meta({RUN_ID_META: run_id, "traceparent": self.traceparent})
        self.subscriptions: set[str] = set()
        self._listen = Listener(self._conn, self.log, subscriptions=self.subscriptions,
                                policy=self.policy, init_timeout=init_timeout,
                                spawn=self._spawn, closing=lambda: self._closing,
                                on_unreachable=lambda why: self._trigger_recover(
                                    expired=True, reason=why),
                                on_resync=self._listen_resync)
        self.legacy_refused = False  # renegotiating at 2025-11-25 failed: stay at 2026-07-28
        self._renegotiating = asyncio.Lock()
        self._fresh = Freshness()  # when the tools / resources may be re-listed (ttlMs)
        self.rejected_tools: dict[str, str] = {}  # name -> why it is left out (catalogue)
        self.tools: dict[str, ToolInfo] = {}
        self.tools_version = 0
        self.resources: list[ResourceInfo] = []
        self.resource_templates: list[mt.ResourceTemplate] = []
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

    @property
    def era(self) -> str | None:
        """"stateless" (2026-07-28) or "session", once known."""
        return self._conn.era

    @property
    def generation(self) -> int:
        """Bumps at every (re)initialize."""
        return self._conn.generation

    @property
    def listening(self) -> frozenset[str]:
        """The URIs the open 2026-07-28 listen stream honours."""
        return self._listen.plan.listening

    @property
    def listen_opens(self) -> int:
        """Listen streams acknowledged (re-opens included)."""
        return self._listen.plan.opens

    # ------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> MCPClient:
        headers = resolve_headers(self.spec, self.secrets_dir)
        spec = self.spec
        from agentd.mcp.http_transport import StreamableHTTPTransport
        from agentd.mcp.oauth import auth_for

        auth = self.auth if self.auth is not None else auth_for(spec, self.secrets_dir, headers)
        self._conn.bind(StreamableHTTPTransport(
            spec.url, headers, on_message=self._conn.receive, ca_file=spec.ca_file,
            client_cert=spec.client_cert, client_key=spec.client_key, auth=auth,
            bounds=self.stream_bounds))
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
            await self._after_connect(first=True)
        except BaseException as exc:
            await self._shutdown()
            try:
                await self._tasks.stop()  # its tasks are cancelled; the error is ours
            except Exception as bug:  # logged (mcp.task.failed) and chained, never lost
                raise exc from bug
            raise
        if self.ping_interval:
            self._spawn(self._pinger(), "pinger")
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._shutdown()
        await self._tasks.stop()  # a background task's bug is raised here

    async def aclose(self) -> None:
        await self.__aexit__(None, None, None)

    async def _shutdown(self) -> None:
        self._closing = True
        self._connected.clear()
        self._listen.closed()  # a subscribe() waiting for a listen acknowledgement
        # cancellation notices and answers already on their way get a moment to leave
        await self._tasks.flush_notices(2)
        self._tasks.cancel_all()
        self._conn.fail_all(lambda: ToolFault(self.name, "client closed", retryable=False))
        await self._tasks.settle(5)  # cancelled tasks unwind before the connector goes away
        if self._transport is not None:
            await self._transport.close()

    def _spawn(self, coro: Coroutine, what: str) -> asyncio.Task | None:
        """Start an owned background task (None once closing)."""
        if self._closing:
            coro.close()
            return None
        return self._tasks.spawn(coro, what, notice=what in ("cancelled", "reply"))

    # ------------------------------------------------------------ inbound

    def _on_notification(self, ev: Notified) -> None:
        m = ev.method
        if m == m26.NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED:
            self._listen.acknowledged(ev.params)
            return
        if m == mt.NOTIFICATION_RESOURCES_UPDATED:
            uri = ClientSession.updated_uri(ev.params)
            if uri is not None and uri in self.subscriptions:
                self.updates.put_nowait((self.name, uri))
        elif m == mt.NOTIFICATION_TOOLS_LIST_CHANGED:
            self._fresh.invalidate("tools")
            self._schedule_relist("tools", self.list_tools)
        elif m == mt.NOTIFICATION_RESOURCES_LIST_CHANGED:
            self._fresh.invalidate("resources")
            self._schedule_relist("resources", self._refresh_resources)
        elif m == mt.NOTIFICATION_PROGRESS:
            self._watches.notified(ev.params)
        elif m == mt.NOTIFICATION_MESSAGE and self.log.enabled("debug"):
            self.log.debug("mcp.server_log", data=bytes(ev.params)[:MAX_AUDIT_TEXT].decode(
                "utf-8", "replace"))

    def _schedule_relist(self, what: str, fn: Callable[[], Coroutine]) -> None:
        task = self._relist.get(what)
        if task is not None and not task.done():
            return  # one re-list in flight already covers this change
        task = self._spawn(fn(), f"relist.{what}")
        if task is not None:
            self._relist[what] = task

    # ------------------------------------------------------------ requests

    async def _send(self, rid: int | str, data: bytes, method: str, time_limit: float | None,
                    headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
                    watch: CallWatch | None = None) -> msgspec.Raw:
        """One send of a request and the wait for its answer (the connection's)."""
        return await self._conn.send(rid, data, method, time_limit, headers, watch)

    async def _request(self, method: str,
                       params: mt.Params | dict[str, Any] | UnsetType = UNSET, *,
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
                    # a reconnect is waited for, not slept on
                    pause = None if d.reconnect else policy.delay(d, attempt)
                    self.log.info("mcp.retry", method=method, attempt=attempt, reason=d.reason,
                                  delay_s=pause)
                    if pause is not None:
                        await policy.sleep(pause)
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
        self._fresh.listing("tools")
        listed, ttl = await self._drain(mt.TOOLS_LIST, mt.ListToolsResult, _tools)
        for t in listed:
            if t.name in tools:
                dupes += 1
                continue
            # x-mcp-header (SEP-2243) counts at 2026-07-28; agentd declares no tasks
            decls = admit(t, headers=stateless, tasks=False,
                          max_depth=self.spec.max_schema_depth)
            if isinstance(decls, Excluded):
                rejected[t.name] = decls.reason
                self.log.warning("mcp.tools.excluded", tool=t.name[:200],
                                 reason=decls.reason[:300])
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
        self._fresh.listed("tools", ttl or 0, time.monotonic())
        self.tools_version += 1
        self.log.info("mcp.tools.audit", count=len(tools), duplicates=dupes, tools=[
            {"name": t.name, "title": t.title, "description": t.description[:MAX_AUDIT_TEXT],
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
            except ToolFault as exc:  # a limit reached is an observation: the server is fine
                r = watch.reached if watch is not None else None
                if exc.cause != LIMIT_CAUSE or r is None:
                    raise
                return rec.done(Observation(r.text, is_error=True), f"{r.limit}_limit")
            finally:
                if watch is not None:
                    watch.release()

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

    async def _drain(self, method: str, type_: type, items_of: Callable[[Any], list]
                     ) -> tuple[list, int | None]:
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
            items.extend(items_of(page))
            cursor = page.nextCursor if page.nextCursor else None
            if cursor is None:
                return items, ttl
        raise ToolFault(self.name, f"{method} of server {self.name!r} did not end after "
                        f"{MAX_LIST_PAGES} pages", retryable=False, method=method)

    async def list_resources(self) -> list[ResourceInfo]:
        """Drain ``resources/list`` into the catalogue (URIs and metadata, never bodies)."""
        res, ttl = await self._drain(mt.RESOURCES_LIST, mt.ListResourcesResult, _resources)
        if ttl is not None:
            self._fresh.listed("resources", ttl, time.monotonic())
        self.resources = [ResourceInfo(
            server=self.name, uri=r.uri, name=r.name,
            description=_s(r.description), mime_type=_s(r.mimeType),
            size=r.size if isinstance(r.size, int) else None) for r in res]
        return self.resources

    async def list_resource_templates(self) -> list[mt.ResourceTemplate]:
        """``resources/templates/list``: kept as information only (never subscribed)."""
        self.resource_templates, _ = await self._drain(
            mt.RESOURCES_TEMPLATES_LIST, mt.ListResourceTemplatesResult, _templates)
        return self.resource_templates

    async def _refresh_resources(self) -> None:
        self._fresh.listing("resources")
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


def _tools(page: mt.ListToolsResult) -> list:
    return page.tools


def _resources(page: mt.ListResourcesResult) -> list:
    return page.resources


def _templates(page: mt.ListResourceTemplatesResult) -> list:
    return page.resourceTemplates
