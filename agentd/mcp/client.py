"""``MCPClient``: one declared MCP server, over Streamable HTTP.

An async context manager.  Entering it connects and runs the handshake (spec
§1.3) within ``init_timeout``; a failure raises :class:`HandshakeError`.  Inside
it the client owns a ``TaskGroup`` with its background work (the standalone GET
stream, the idle pinger, re-listing on ``list_changed``, reconnection, sending
``notifications/cancelled``); leaving it stops them, DELETEs the session and
closes the connections.  Nothing it starts outlives it.

The protocol rules live in :mod:`agentd.mcp.client_session` (sans-IO); HTTP
and SSE in :mod:`agentd.mcp.http_transport`; the fault policy in
:mod:`agentd.mcp.retry`.  See ``docs/client.md``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
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
    resolve_headers,
)
from agentd.log import log
from agentd.mcp.client_session import (
    Capabilities,
    CapabilityError,
    ClientSession,
    Failed,
    HandshakeError,
    Notified,
    Reply,
    Resolved,
)
from agentd.mcp.retry import (
    IDEMPOTENT_METHODS,
    HTTPStatusError,
    RetryPolicy,
    RPCError,
    SessionExpired,
    TransportError,
    classify,
)
from agentd.mcp.schema import Validator, schemas
from agentd.wire import codec
from agentd.wire import mcp_types as mt
from agentd.wire.jsonrpc import RESOURCE_NOT_FOUND, ProtocolError

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
_MAX_AUDIT_TEXT: Final = 2000


class ToolFault(Exception):
    """A protocol or transport fault: never shown to the model as tool output.

    ``retryable`` follows the documented policy (:mod:`agentd.mcp.retry`);
    ``code`` is the JSON-RPC error code or HTTP status when there was one.
    """

    def __init__(self, server: str, message: str, *, retryable: bool,
                 code: int | None = None, method: str = "") -> None:
        super().__init__(f"{server}: {message}")
        self.server = server
        self.message = message
        self.retryable = retryable
        self.code = code
        self.method = method


@dataclass(frozen=True, slots=True)
class Observation:
    """What the model sees of a tool call or a resource read.

    ``text`` renders every content block; ``is_error`` is the tool's own
    ``isError`` (or an argument/URI problem the model can fix); ``structured``
    is ``structuredContent`` (validated; None below 2025-06-18); ``content``
    keeps the raw blocks (or resource contents) for richer consumers.
    """

    text: str
    is_error: bool = False
    structured: Any = None
    content: tuple = ()


@dataclass(slots=True)
class ToolInfo:
    """A server's tool as listed.  ``description``/``annotations`` are untrusted."""

    name: str
    input_schema: dict[str, Any]
    description: str = ""
    title: str = ""
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] = field(default_factory=dict)
    name_json: bytes = b""
    _input: Validator | bool | None = False  # False: not compiled yet
    _output: Validator | bool | None = False

    def input_validator(self) -> Validator | None:
        v = self._input
        if v is False:
            v = self._input = schemas.get(self.input_schema, what=f"inputSchema of {self.name}")
        return v  # type: ignore[return-value]

    def output_validator(self) -> Validator | None:
        v = self._output
        if v is False:
            v = self._output = schemas.get(self.output_schema,
                                           what=f"outputSchema of {self.name}")
        return v  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """A catalogue entry (never a body)."""

    server: str
    uri: str
    name: str
    title: str = ""
    description: str = ""
    mime_type: str = ""
    size: int | None = None


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ""


def render_content(blocks: list) -> str:
    """One text for the model from content blocks (Structs, UnknownContent or dicts)."""
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, mt.TextContent):
            parts.append(b.text)
        elif isinstance(b, (mt.ImageContent, mt.AudioContent)):
            kind = "image" if isinstance(b, mt.ImageContent) else "audio"
            parts.append(f"[{kind} {b.mimeType}, {len(b.data) * 3 // 4} bytes]")
        elif isinstance(b, mt.ResourceLink):
            parts.append(f"[resource link {b.uri}" + (f" ({b.name})" if b.name else "") + "]")
        elif isinstance(b, mt.EmbeddedResource):
            parts.append(_render_item(b.resource))
        elif isinstance(b, dict):
            t = b.get("type")
            parts.append(b["text"] if t == "text" and isinstance(b.get("text"), str)
                         else f"[{t} content]")
    return "\n".join(parts)


def _render_item(item: Any) -> str:
    if isinstance(item, mt.TextResourceContents):
        return item.text
    if isinstance(item, mt.BlobResourceContents):
        mime = item.mimeType or "application/octet-stream"
        return f"[binary {mime}, {len(item.blob) * 3 // 4} bytes, {item.uri}]"
    return ""


class MCPClient:
    """A connection to one MCP server (spec §1).  See the module docstring."""

    def __init__(self, spec: ServerSpec, *, run_id: str = "",
                 init_timeout: float = DEFAULT_INIT_TIMEOUT,
                 ping_interval: float | None = DEFAULT_PING_INTERVAL,
                 ping_timeout: float = DEFAULT_PING_TIMEOUT,
                 secrets_dir: str = DEFAULT_SECRETS_DIR,
                 policy: RetryPolicy | None = None,
                 updates: asyncio.Queue | None = None,
                 on_tools_changed: Callable[[MCPClient], None] | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.run_id = run_id
        self.init_timeout = init_timeout
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.secrets_dir = secrets_dir
        self.policy = policy or RetryPolicy()
        self.updates: asyncio.Queue = updates if updates is not None else asyncio.Queue()
        self.on_tools_changed = on_tools_changed
        self.log = log.bind(server=spec.name)
        self._session = ClientSession(client_version=agentd.__version__)
        self._transport: StreamableHTTPTransport | None = None
        self._pending: dict[int | str, asyncio.Future] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._bg: set[asyncio.Task] = set()
        self._notices: set[asyncio.Task] = set()
        self._connected = asyncio.Event()
        self._closing = False
        self._recovering: asyncio.Task | None = None
        self._listener: asyncio.Task | None = None
        self._relist: dict[str, asyncio.Task] = {}
        self._last_inbound = 0.0
        self._meta_json = orjson.dumps({RUN_ID_META: run_id})
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

        self._transport = StreamableHTTPTransport(
            spec.url, headers, on_message=self._on_message, ca_file=spec.ca_file,
            client_cert=getattr(spec, "client_cert", None),
            client_key=getattr(spec, "client_key", None))
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        try:
            await self._transport.open()
            await self._handshake()
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

    async def _handshake(self) -> None:
        t = self._transport
        assert t is not None
        s = self._session
        # Requests of the session being replaced can no longer be answered.
        stale, self._pending = self._pending, {}
        for fut in stale.values():
            if not fut.done():
                fut.set_exception(TransportError("the session was replaced", sent=True))
        s.reset()
        t.forget_session()
        rid, data = s.start_initialize()
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            async with asyncio.timeout(self.init_timeout):
                await t.post(data, fut, initialize=True)
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
        self._last_inbound = time.monotonic()
        caps = s.capabilities
        self.log.info("mcp.handshake", protocol_version=s.protocol_version,
                      server_info=msgspec.to_builtins(s.server_info),
                      capabilities=dict(caps.raw), session=bool(t.session_id),
                      instructions=(s.instructions or "")[:_MAX_AUDIT_TEXT])  # untrusted

    async def _after_connect(self, *, first: bool) -> None:
        """(Re)start the GET stream and list the catalogue; on a reconnect, first
        re-issue every subscription and synthesize one ``updated`` per watched URI."""
        self._connected.set()
        self.stale = False
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

    # ------------------------------------------------------------ inbound

    def _on_message(self, data: bytes | str) -> None:
        self._last_inbound = time.monotonic()
        for ev in self._session.receive(data):
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
                                               None if e.data is UNSET else e.data))
            elif cls is Reply:
                if ev.method not in (mt.PING, mt.ROOTS_LIST):
                    self.log.warning("mcp.server_request.refused", method=ev.method[:100])
                self._spawn(self._send_quiet(ev.data), "reply")
            elif cls is Notified:
                self._on_notification(ev)

    def _on_notification(self, ev: Notified) -> None:
        m = ev.method
        if m == mt.NOTIFICATION_RESOURCES_UPDATED:
            uri = ClientSession.updated_uri(ev.params)
            if uri is not None and uri in self.subscriptions:
                self.updates.put_nowait((self.name, uri))
        elif m == mt.NOTIFICATION_TOOLS_LIST_CHANGED:
            self._schedule_relist("tools", self.list_tools)
        elif m == mt.NOTIFICATION_RESOURCES_LIST_CHANGED:
            self._schedule_relist("resources", self._refresh_resources)
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
        if self._closing:
            raise ToolFault(self.name, "client closed", retryable=False)
        try:
            async with asyncio.timeout(self.policy.reconnect_wait):
                await self._connected.wait()
        except TimeoutError:
            raise ToolFault(self.name, "server unavailable (reconnecting)",
                            retryable=True) from None
        if self._closing:
            raise ToolFault(self.name, "client closed", retryable=False)

    async def _send(self, rid: int | str, data: bytes, method: str, time_limit: float | None
                    ) -> msgspec.Raw:
        """One send of a request and the wait for its answer."""
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        t = self._transport
        assert t is not None
        try:
            if time_limit is None:
                await t.post(data, fut)
                if fut.done():
                    return fut.result()
                if not t.get_offered:  # nowhere else it could come from
                    raise TransportError(f"{method}: the answer held no response", sent=True)
                return await fut
            async with asyncio.timeout(time_limit):
                await t.post(data, fut)
                if not fut.done() and not t.get_offered:
                    raise TransportError(f"{method}: the answer held no response", sent=True)
                return await fut
        except BaseException as exc:
            self._pending.pop(rid, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # retrieved: it is superseded by ``exc``
            if isinstance(exc, (asyncio.CancelledError, TimeoutError)):
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
                       time_limit: float | None = None) -> msgspec.Raw:
        """A request under the retry policy; returns the raw result."""
        idempotent = method in IDEMPOTENT_METHODS
        attempt = 0
        while True:
            attempt += 1
            await self._wait_connected()
            rid, data = self._session.request(method, params)
            gen = self.generation
            try:
                return await self._send(rid, data, method, time_limit)
            except TimeoutError:
                raise ToolFault(self.name, f"{method} timed out after {time_limit:g}s",
                                retryable=True, method=method) from None
            except (TransportError, SessionExpired, HTTPStatusError, RPCError) as exc:
                d = classify(exc, idempotent=idempotent)
                if d.reconnect and gen == self.generation:  # not already reconnected
                    self._trigger_recover(expired=isinstance(exc, SessionExpired),
                                          reason=d.reason)
                if d.resend and attempt < self.policy.max_attempts:
                    self.log.info("mcp.retry", method=method, attempt=attempt, reason=d.reason)
                    if not d.reconnect:
                        await asyncio.sleep(self.policy.backoff(attempt))
                    continue
                code = exc.code if isinstance(exc, RPCError) else (
                    exc.status if isinstance(exc, HTTPStatusError) else None)
                raise ToolFault(self.name, f"{method}: {d.reason}", retryable=d.retryable,
                                code=code, method=method) from None

    def _decode(self, raw: msgspec.Raw, type_: type, method: str) -> Any:
        try:
            return codec.decode_result(raw, type_)
        except ProtocolError as exc:
            raise ToolFault(self.name, f"{method}: {exc.message}", retryable=False,
                            method=method) from None

    # ------------------------------------------------------------ tools

    async def list_tools(self) -> list[ToolInfo]:
        """Drain ``tools/list`` (≤ 1024 pages), replace the catalogue, audit-log it."""
        tools: dict[str, ToolInfo] = {}
        dupes = 0
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params = mt.PaginatedParams(cursor=cursor) if cursor is not None else UNSET
            page = self._decode(await self._request(mt.TOOLS_LIST, params),
                                mt.ListToolsResult, mt.TOOLS_LIST)
            for t in page.tools:
                if t.name in tools:
                    dupes += 1
                    continue
                tools[t.name] = ToolInfo(
                    name=t.name, input_schema=t.inputSchema or {},
                    description=_s(t.description), title=_s(t.title),
                    output_schema=t.outputSchema if isinstance(t.outputSchema, dict) else None,
                    annotations=msgspec.to_builtins(t.annotations) if t.annotations else {},
                    name_json=orjson.dumps(t.name))
            cursor = page.nextCursor if page.nextCursor else None
            if cursor is None:
                break
        else:
            raise ToolFault(self.name, f"tools/list of server {self.name!r} did not end after "
                            f"{MAX_LIST_PAGES} pages", retryable=False, method=mt.TOOLS_LIST)
        self.tools = tools
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
        if arguments is None:
            args: Any = {}
            args_json = b"{}"
        elif isinstance(arguments, (str, bytes)):
            try:
                args = orjson.loads(arguments)
            except orjson.JSONDecodeError as exc:
                return Observation(f"arguments for tool {name} are not valid JSON: {exc}",
                                   is_error=True)
            args_json = arguments.encode() if isinstance(arguments, str) else arguments
        else:
            args = arguments
            args_json = orjson.dumps(arguments)
        if not isinstance(args, dict):
            return Observation(f"arguments for tool {name} must be a JSON object", is_error=True)
        if tool is not None:
            v = tool.input_validator()
            if v is not None and not v.is_valid(args):
                errs = v.errors(args)
                return Observation(f"arguments do not match the input schema of tool {name}: "
                                   + "; ".join(errs), is_error=True)
            name_json = tool.name_json
        else:
            name_json = orjson.dumps(name)
        raw = await self._call(name_json, args_json, time_limit)
        return self._tool_observation(name, tool, raw)

    async def _call(self, name_json: bytes, args_json: bytes, time_limit: float | None
                    ) -> msgspec.Raw:
        attempt = 0
        session = self._session
        while True:
            attempt += 1
            if not self._connected.is_set():
                await self._wait_connected()
            rid, data = session.call_tool(name_json, args_json, self._meta_json)
            gen = self.generation
            try:
                return await self._send(rid, data, mt.TOOLS_CALL, time_limit)
            except TimeoutError:
                raise ToolFault(self.name, f"tools/call timed out after {time_limit:g}s",
                                retryable=True, method=mt.TOOLS_CALL) from None
            except (TransportError, SessionExpired, HTTPStatusError, RPCError) as exc:
                d = classify(exc, idempotent=False)
                if d.reconnect and gen == self.generation:  # not already reconnected
                    self._trigger_recover(expired=isinstance(exc, SessionExpired),
                                          reason=d.reason)
                if d.resend and attempt < self.policy.max_attempts:
                    self.log.info("mcp.retry", method=mt.TOOLS_CALL, attempt=attempt,
                                  reason=d.reason)
                    if not d.reconnect:
                        await asyncio.sleep(self.policy.backoff(attempt))
                    continue
                code = exc.code if isinstance(exc, RPCError) else (
                    exc.status if isinstance(exc, HTTPStatusError) else None)
                raise ToolFault(self.name, f"tools/call: {d.reason}", retryable=d.retryable,
                                code=code, method=mt.TOOLS_CALL) from None

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
                v = tool.output_validator()
                if v is not None and not v.is_valid(sc):
                    raise ToolFault(self.name, f"structuredContent of tool {name} does not "
                                    "match its outputSchema: " + "; ".join(v.errors(sc)),
                                    retryable=False, method=mt.TOOLS_CALL)
            if sc is not UNSET:
                structured = sc
        return Observation(text, False, structured, tuple(r.content))

    # ------------------------------------------------------------ resources

    async def _drain(self, method: str, type_: type, attr: str) -> list:
        items: list = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params = mt.PaginatedParams(cursor=cursor) if cursor is not None else UNSET
            page = self._decode(await self._request(method, params), type_, method)
            items.extend(getattr(page, attr))
            cursor = page.nextCursor if page.nextCursor else None
            if cursor is None:
                return items
        raise ToolFault(self.name, f"{method} of server {self.name!r} did not end after "
                        f"{MAX_LIST_PAGES} pages", retryable=False, method=method)

    async def list_resources(self) -> list[ResourceInfo]:
        """Drain ``resources/list`` into the catalogue (URIs and metadata, never bodies)."""
        res = await self._drain(mt.RESOURCES_LIST, mt.ListResourcesResult, "resources")
        self.resources = [ResourceInfo(
            server=self.name, uri=r.uri, name=r.name, title=_s(r.title),
            description=_s(r.description), mime_type=_s(r.mimeType),
            size=r.size if isinstance(r.size, int) else None) for r in res]
        return self.resources

    async def list_resource_templates(self) -> list[mt.ResourceTemplate]:
        """``resources/templates/list``: kept as information only (never subscribed)."""
        self.resource_templates = await self._drain(
            mt.RESOURCES_TEMPLATES_LIST, mt.ListResourceTemplatesResult, "resourceTemplates")
        return self.resource_templates

    async def _refresh_resources(self) -> None:
        await self.list_resources()
        try:
            await self.list_resource_templates()
        except ToolFault as exc:  # optional for servers; informational anyway
            self.log.info("mcp.templates.unavailable", error=exc.message)

    async def read_resource(self, uri: str, *, time_limit: float | None = None) -> Observation:
        """``resources/read``: text items as text, blobs described (base64 in ``content``).

        A missing resource (-32002) is an ``is_error`` observation naming the URI.
        """
        try:
            raw = await self._request(mt.RESOURCES_READ, mt.ReadResourceParams(uri=uri),
                                      time_limit=time_limit)
        except ToolFault as exc:
            if exc.code == RESOURCE_NOT_FOUND:
                return Observation(f"resource not found: {uri}", is_error=True)
            raise
        r = self._decode(raw, mt.ReadResourceResult, mt.RESOURCES_READ)
        return Observation("\n".join(_render_item(c) for c in r.contents), False, None,
                           tuple(r.contents))

    @staticmethod
    def blob_bytes(item: mt.BlobResourceContents) -> bytes:
        return base64.b64decode(item.blob)

    async def subscribe(self, uri: str) -> bool:
        """``resources/subscribe`` to one concrete URI.

        False (with a warning) when the server did not advertise
        ``resources.subscribe``: the client degrades instead of sending it.
        """
        if not uri or "{" in uri or "}" in uri:
            raise ValueError(f"subscribe needs a concrete URI, not {uri!r}")
        if not self.capabilities.resources_subscribe:
            self.log.warning("mcp.subscribe.unsupported", uri=uri)
            return False
        await self._request(mt.RESOURCES_SUBSCRIBE, mt.SubscribeParams(uri=uri))
        self.subscriptions.add(uri)
        return True

    async def unsubscribe(self, uri: str) -> None:
        if uri not in self.subscriptions:
            return
        self.subscriptions.discard(uri)
        if self.capabilities.resources_subscribe and self._connected.is_set():
            with contextlib.suppress(ToolFault):
                await self._request(mt.RESOURCES_UNSUBSCRIBE, mt.UnsubscribeParams(uri=uri))

    async def ping(self, time_limit: float | None = None) -> None:
        await self._request(mt.PING, time_limit=time_limit or self.ping_timeout)

    # ------------------------------------------------------------ liveness

    async def _pinger(self) -> None:
        interval = self.ping_interval
        assert interval
        misses = 0
        while not self._closing:
            await asyncio.sleep(interval)
            if not self._connected.is_set():
                misses = 0
                continue
            if time.monotonic() - self._last_inbound < interval:
                misses = 0
                continue  # not idle: traffic proves liveness
            try:
                await self._send_ping()
                misses = 0
            except RPCError:
                misses = 0  # it answered, if with an error
            except SessionExpired:
                self._trigger_recover(expired=True, reason="session expired (ping)")
            except TransportError as exc:  # the connection is gone: reconnect now
                misses = 0
                self._trigger_recover(expired=False, reason=f"ping: {exc}")
            except Exception as exc:  # no answer: a miss
                misses += 1
                self.log.warning("mcp.ping.missed", misses=misses, error=str(exc)[:200])
                if misses >= STALE_AFTER_MISSES:
                    misses = 0
                    self.stale = True
                    self.log.warning("mcp.stale", misses=STALE_AFTER_MISSES)
                    self._trigger_recover(expired=True, reason="stale", drop=True)

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
            except SessionExpired:
                self._trigger_recover(expired=True, reason="session expired")
            except (TransportError, HTTPStatusError, RPCError, TimeoutError):
                pass  # the pinger / the next request will find out
            else:
                t.get_offered = False
        except (TransportError, HTTPStatusError) as exc:
            if generation == self.generation:
                self._trigger_recover(expired=False, reason=f"stream lost: {exc}")

    def _trigger_recover(self, *, expired: bool, reason: str, drop: bool = False) -> None:
        if self._closing:
            return
        if self._recovering is not None and not self._recovering.done():
            return
        self._connected.clear()
        self.log.warning("mcp.disconnected", reason=reason[:300])
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
                await asyncio.sleep(self.policy.reconnect_backoff(attempt))
            attempt += 1
            try:
                if not expired and t.session_id:
                    # the session may have survived a network blip: probe it
                    try:
                        await self._send_ping()
                    except SessionExpired:
                        expired = True
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
                self.log.info("mcp.reconnect.failed", attempt=attempt, error=str(exc)[:300])
                expired = expired or isinstance(exc, HandshakeError)

    async def _finish_recover(self) -> None:
        try:
            await self._after_connect(first=False)
        except (ToolFault, CapabilityError) as exc:
            self.log.warning("mcp.restore.failed", error=str(exc)[:300])
