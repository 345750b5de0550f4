"""The MCP server session (sans-IO) and the handler interface servers implement.

A :class:`ServerSession` is fed decoded JSON-RPC messages (``agentd.wire.codec``)
and answers with encoded bytes; it never touches a socket, so the same code
serves the Streamable HTTP engine (``agentd.mcp.http_server``), the in-process
(Stdio origin) connection of :class:`LocalConnection`, and unit tests.

Protocol rules that live here (MCP 2025-11-25 and its three older revisions):

* lifecycle: ``initialize`` negotiates the version (the client's if we speak
  it, else our latest), answers the handler's capabilities and serverInfo;
  ``notifications/initialized`` marks the session ready; ``ping`` -> ``{}``;
* dispatch of ``tools/*`` and ``resources/*`` to a :class:`Handler`; an unknown
  method (e.g. ``server/discover``, ``prompts/list``) -> -32601; malformed
  params -> -32602; an unknown tool -> -32601; arguments that fail the tool's
  JSON Schema -> -32602; an unknown resource -> -32002 with ``data.uri``;
* inbound notifications (``notifications/cancelled`` included) and responses
  are ignored: this server sends no requests and cancels nothing per request;
* subscriptions are per session (:class:`SessionHub` keeps the URI index);
  ``notifications/resources/updated`` is the only unsolicited message a
  session ever emits, and only for a URI it subscribed to.

The handler interface (documented in ``docs/server.md``): subclass or
instantiate :class:`Handler`, register tools (JSON Schema 2020-12 input
schemas, compiled once with jsonschema-rs) with async call functions and
resources with async read functions, then serve it with
``agentd.mcp.http_server.serve``.  ``handler.notify_updated(uri)`` pushes
``notifications/resources/updated`` to every session subscribed to ``uri``.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Final

import jsonschema_rs
import msgspec
import orjson
from msgspec import UNSET, Raw

from agentd.log import log
from agentd.wire import codec
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    ErrorResponse,
    Notification,
    ProtocolError,
    Request,
)

__all__ = [
    "ORIGIN_MANAGEMENT",
    "ORIGIN_STDIO",
    "CallContext",
    "Handler",
    "LocalConnection",
    "ResourceNotFound",
    "ServerSession",
    "SessionHub",
    "ToolError",
    "negotiate_version",
]

ORIGIN_STDIO: Final = "stdio"  # the in-process caller (the agent's own loop, tests)
ORIGIN_MANAGEMENT: Final = "management"  # a request that arrived over HTTP(S)
PRINCIPAL_LOCAL: Final = "local"  # the in-process caller's principal

# Who is asking, set per request by the transport's auth guard (agentd.mcp.auth):
# ``cert:<subject>``, ``bearer:<name>``, both joined by ``+``, or ``anonymous``.
# A context variable, so it follows the request's own task and never leaks
# into another peer's request (docs/security.md, "Peers kept apart").
current_principal: ContextVar[str | None] = ContextVar("agentd_principal", default=None)

_log = log.bind(component="mcp.server")
_RESULT_EMPTY: Final = Raw(b"{}")


def negotiate_version(requested: str) -> str:
    """The client's version when we speak it, else our latest (the client decides)."""
    return requested if requested in t.SUPPORTED_PROTOCOL_VERSIONS else t.LATEST_PROTOCOL_VERSION


class ResourceNotFound(ProtocolError):
    """-32002 with ``data.uri`` (MCP: resources/read of a URI the server does not serve)."""

    def __init__(self, uri: str) -> None:
        super().__init__(RESOURCE_NOT_FOUND, "Resource not found", {"uri": uri})


class ToolError(Exception):
    """Raised by a tool function: the tool ran and failed -> ``isError: true`` with this text."""


# --------------------------------------------------------------------------
# Per-request context
# --------------------------------------------------------------------------

Emit = Callable[[bytes], Awaitable[None]]


class CallContext:
    """What a handler function learns about the call it serves."""

    __slots__ = ("_emit", "origin", "principal", "request_id", "session")

    def __init__(self, session: ServerSession, request_id: Any, emit: Emit | None = None) -> None:
        self.session = session
        self.origin = session.origin
        self.request_id = request_id
        self._emit = emit
        principal = current_principal.get()
        self.principal = principal if principal is not None else (
            PRINCIPAL_LOCAL if session.origin == ORIGIN_STDIO else "anonymous")

    async def notify(self, method: str, params: Any = UNSET) -> None:
        """Send a request-related notification ahead of the response (over HTTP
        the answer then becomes an SSE stream).  Without a request stream it goes
        to the session's own stream."""
        data = codec.encode_notification(method, params)
        if self._emit is not None:
            await self._emit(data)
        else:
            self.session.push(data)


# --------------------------------------------------------------------------
# Sessions and the subscription index
# --------------------------------------------------------------------------


class ServerSession:
    """One client's MCP session: negotiated state, subscriptions, an outbox.

    ``outbox(bytes)`` is how the transport delivers unsolicited messages
    (the HTTP engine appends them to the session's SSE event buffer); it must
    never block.
    """

    __slots__ = ("__weakref__", "auth", "client", "client_capabilities", "client_info", "closed",
                 "handler", "hub", "id", "initialized", "last_active", "origin", "outbox",
                 "protocol_version", "subscriptions")

    def __init__(self, handler: Handler, hub: SessionHub, session_id: str, *,
                 origin: str = ORIGIN_MANAGEMENT, auth: str = "none", client: str = "",
                 outbox: Callable[[bytes], None] | None = None) -> None:
        self.handler = handler
        self.hub = hub
        self.id = session_id
        self.origin = origin
        self.auth = auth
        self.client = client
        self.outbox = outbox
        self.protocol_version: str | None = None
        self.client_info: t.Implementation | None = None
        self.client_capabilities: dict[str, Any] | None = None  # 2026-07-28 envelopes only
        self.initialized = False
        self.closed = False
        self.subscriptions: set[str] = set()
        self.last_active = time.monotonic()

    # -- outbound --------------------------------------------------------
    def push(self, data: bytes) -> None:
        if not self.closed and self.outbox is not None:
            self.outbox(data)

    def notify_updated(self, uri: str) -> None:
        """Emit ``notifications/resources/updated {uri}`` to this session."""
        self.push(_updated(uri))

    def updated(self, uri: str, data: bytes) -> None:
        """The hub's delivery callback (``data`` is the shared encoded update);
        a 2026-07-28 listen stream overrides it to tag the notification."""
        self.push(data)

    # -- subscriptions (bookkeeping lives in the hub's index) ------------
    def subscribe(self, uri: str) -> None:
        self.hub.subscribe(self, uri)

    def unsubscribe(self, uri: str) -> None:
        self.hub.unsubscribe(self, uri)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hub.remove(self)

    # -- inbound ---------------------------------------------------------
    async def receive(self, msg: Any, emit: Emit | None = None) -> bytes | None:
        """Handle one decoded message; the encoded response, or None (notification/response)."""
        self.last_active = time.monotonic()
        if type(msg) is Request:
            return await self.request(msg, emit)
        if type(msg) is Notification:
            self.notification(msg)
        return None  # a response / error response: we send no requests, ignore

    def notification(self, msg: Notification) -> None:
        if msg.method == t.NOTIFICATION_INITIALIZED:
            self.initialized = True
        elif _log.enabled("debug"):
            _log.debug("mcp.serve.notification.ignored", method=msg.method, origin=self.origin)

    async def request(self, req: Request, emit: Emit | None = None) -> bytes:
        method = req.method
        rid = req.id
        try:
            route = _ROUTES.get(method)
            if route is None:
                raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")
            result = await route(self, req, emit)
            return codec.encode_response(rid, result)
        except ProtocolError as exc:
            if _log.enabled("debug"):
                _log.debug("mcp.serve.error", method=method, code=exc.code, origin=self.origin)
            return codec.encode_error(rid, exc.code, exc.message, exc.data)
        except Exception as exc:  # a handler bug never kills the server
            _log.error("mcp.serve.internal_error", method=method, origin=self.origin,
                       error=type(exc).__name__, detail=str(exc)[:500])
            return codec.encode_error(rid, INTERNAL_ERROR, "Internal error")


def _updated(uri: str) -> bytes:
    return codec.encode_notification(t.NOTIFICATION_RESOURCES_UPDATED,
                                     t.ResourceUpdatedParams(uri=uri))


class SessionHub:
    """Every live session of one served handler, and the URI -> sessions index."""

    __slots__ = ("_index", "sessions")

    def __init__(self) -> None:
        self.sessions: dict[str, ServerSession] = {}
        self._index: dict[str, set[ServerSession]] = {}

    def add(self, session: ServerSession) -> None:
        self.sessions[session.id] = session

    def remove(self, session: ServerSession) -> None:
        self.sessions.pop(session.id, None)
        for uri in session.subscriptions:
            subs = self._index.get(uri)
            if subs is not None:
                subs.discard(session)
                if not subs:
                    del self._index[uri]
        session.subscriptions.clear()

    def subscribe(self, session: ServerSession, uri: str) -> None:
        if session.closed:
            return
        session.subscriptions.add(uri)
        self._index.setdefault(uri, set()).add(session)

    def unsubscribe(self, session: ServerSession, uri: str) -> None:
        session.subscriptions.discard(uri)
        subs = self._index.get(uri)
        if subs is not None:
            subs.discard(session)
            if not subs:
                del self._index[uri]

    def subscribers(self, uri: str) -> int:
        return len(self._index.get(uri, ()))

    def resource_updated(self, uri: str, *, consume: bool = False) -> int:
        """Emit ``updated {uri}`` to every subscribed session (once each); with
        ``consume`` the subscriptions are dropped afterwards.  Returns the count."""
        subs = self._index.pop(uri, None) if consume else self._index.get(uri)
        if not subs:
            return 0
        data = _updated(uri)
        targets = list(subs)
        for s in targets:
            if consume:
                s.subscriptions.discard(uri)
            s.updated(uri, data)
        return len(targets)

    def close_all(self) -> None:
        for s in list(self.sessions.values()):
            s.close()


# --------------------------------------------------------------------------
# Method routes
# --------------------------------------------------------------------------


def _params(method: str, req: Request) -> Any:
    return codec.decode_params(method, req.params, req.id)


async def _initialize(s: ServerSession, req: Request, emit: Emit | None) -> Any:
    p = _params(t.INITIALIZE, req)
    if s.protocol_version is not None:
        raise ProtocolError(INVALID_REQUEST, "Invalid Request: the session is already initialized")
    s.protocol_version = negotiate_version(p.protocolVersion)
    s.client_info = p.clientInfo
    h = s.handler
    _log.info("mcp.serve.session", session=s.id[:8], origin=s.origin, auth=s.auth,
              client=p.clientInfo.name, version=s.protocol_version, requested=p.protocolVersion)
    return t.InitializeResult(protocolVersion=s.protocol_version, capabilities=h.capabilities,
                              serverInfo=h.server_info,
                              instructions=h.instructions if h.instructions else UNSET)


async def _ping(s: ServerSession, req: Request, emit: Emit | None) -> Any:
    return _RESULT_EMPTY


async def _tools_list(s: ServerSession, req: Request, emit: Emit | None) -> Any:
    if req.params is not UNSET:
        _params(t.TOOLS_LIST, req)
    return s.handler.tools_list_raw()


_call_decoder: Final = msgspec.json.Decoder(t.CallToolParams)


async def _tools_call(s: ServerSession, req: Request, emit: Emit | None) -> Any:
    raw = req.params
    try:
        p = _call_decoder.decode(raw) if raw is not UNSET else None
    except (msgspec.DecodeError, RecursionError):
        p = None
    if p is None:
        p = _params(t.TOOLS_CALL, req)  # explains the problem (-32602)
    ctx = CallContext(s, req.id, emit)
    _log.info("mcp.serve.call", origin=s.origin, auth=s.auth, session=s.id[:8], tool=p.name)
    return await s.handler.call_tool(p.name, p.arguments or {}, ctx)


async def _resources_list(s: ServerSession, req: Request, emit: Emit | None) -> Any:
    if req.params is not UNSET:
        _params(t.RESOURCES_LIST, req)
    return s.handler.resources_list_raw()


async def _templates_list(s: ServerSession, req: Request, emit: Emit | None) -> Any:
    if not s.handler.has_resources:
        raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {req.method}")
    return t.ListResourceTemplatesResult(resourceTemplates=[])


async def _resources_read(s: ServerSession, req: Request, emit: Emit | None) -> Any:
    p = _params(t.RESOURCES_READ, req)
    _log.info("mcp.serve.read", origin=s.origin, auth=s.auth, session=s.id[:8], uri=p.uri)
    return await s.handler.read_resource(p.uri, CallContext(s, req.id, emit))


async def _resources_subscribe(s: ServerSession, req: Request, emit: Emit | None) -> Any:
    if not s.handler.can_subscribe:
        raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {req.method}")
    p = _params(t.RESOURCES_SUBSCRIBE, req)
    _log.info("mcp.serve.subscribe", origin=s.origin, auth=s.auth, session=s.id[:8], uri=p.uri)
    s.handler.subscribe(p.uri, CallContext(s, req.id, emit))
    return _RESULT_EMPTY


async def _resources_unsubscribe(s: ServerSession, req: Request, emit: Emit | None) -> Any:
    if not s.handler.can_subscribe:
        raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {req.method}")
    p = _params(t.RESOURCES_UNSUBSCRIBE, req)
    _log.info("mcp.serve.unsubscribe", origin=s.origin, auth=s.auth, session=s.id[:8], uri=p.uri)
    s.handler.unsubscribe(p.uri, CallContext(s, req.id, emit))
    return _RESULT_EMPTY


_ROUTES: Final[dict[str, Callable[[ServerSession, Request, Emit | None], Awaitable[Any]]]] = {
    t.INITIALIZE: _initialize,
    t.PING: _ping,
    t.TOOLS_LIST: _tools_list,
    t.TOOLS_CALL: _tools_call,
    t.RESOURCES_LIST: _resources_list,
    t.RESOURCES_TEMPLATES_LIST: _templates_list,
    t.RESOURCES_READ: _resources_read,
    t.RESOURCES_SUBSCRIBE: _resources_subscribe,
    t.RESOURCES_UNSUBSCRIBE: _resources_unsubscribe,
}
SERVED_METHODS: Final = frozenset(_ROUTES)


# --------------------------------------------------------------------------
# The handler
# --------------------------------------------------------------------------

ToolFn = Callable[[dict[str, Any], CallContext], Awaitable[Any]]
ReadFn = Callable[[str], Awaitable[Any]]


class _ToolEntry:
    __slots__ = ("fn", "is_valid", "requires", "tool", "validator")

    def __init__(self, tool: t.Tool, fn: ToolFn, requires: dict[str, Any] | None = None) -> None:
        self.tool = tool
        self.fn = fn
        self.requires = requires
        self.validator = jsonschema_rs.Draft202012Validator(tool.inputSchema)
        self.is_valid = self.validator.is_valid


class Handler:
    """A server's tools and resources, served by the engine.

    ``Handler(name, version)``; ``@handler.tool(name, input_schema, description=...)``
    on ``async def fn(arguments: dict, ctx: CallContext)`` returning a ``str``
    (one text block), a ``dict`` (JSON text + ``structuredContent``), a list of
    content blocks, or a :class:`~agentd.wire.mcp_types.CallToolResult`;
    raising :class:`ToolError` gives ``isError: true``.
    ``@handler.resource(uri, name=..., description=..., mime_type=...)`` on
    ``async def read(uri)`` returning ``str`` / ``bytes`` / ``dict`` (JSON) /
    a ``ReadResourceResult``; ``handler.resource_prefix(prefix, read)`` serves
    unlisted URIs under a prefix (``read`` raises :class:`ResourceNotFound`).
    ``subscribe=True`` advertises ``resources.subscribe``; then
    ``handler.notify_updated(uri)`` reaches every subscribed session.

    Capabilities are frozen at the first ``initialize`` (tools always; resources
    when any resource is registered or subscribe is on).
    """

    def __init__(self, name: str, version: str, *, instructions: str | None = None,
                 subscribe: bool = False, title: str | None = None) -> None:
        self.server_info = t.Implementation(name=name, version=version,
                                            title=title if title else UNSET)
        self.instructions = instructions
        self.can_subscribe = subscribe
        self.hub = SessionHub()
        self._tools: dict[str, _ToolEntry] = {}
        self._resources: dict[str, tuple[t.Resource, ReadFn]] = {}
        self._prefixes: list[tuple[str, ReadFn]] = []
        self._tools_raw: Raw | None = None
        self._resources_raw: Raw | None = None
        self._caps: t.ServerCapabilities | None = None

    # -- registration ----------------------------------------------------
    def add_tool(self, name: str, fn: ToolFn, input_schema: dict[str, Any], *,
                 description: str | None = None, title: str | None = None,
                 output_schema: dict[str, Any] | None = None,
                 annotations: t.ToolAnnotations | None = None,
                 requires: dict[str, Any] | None = None) -> None:
        """``requires``: client capabilities the tool needs (2026-07-28 answers -32021
        when the request's envelope lacks one; a 2025 session is not checked)."""
        if not jsonschema_rs.meta.is_valid(input_schema):
            raise ValueError(f"tool {name!r}: inputSchema is not a valid JSON Schema")
        tool = t.Tool(name=name, inputSchema=input_schema,
                      description=description if description is not None else UNSET,
                      title=title if title else UNSET,
                      outputSchema=output_schema if output_schema is not None else UNSET,
                      annotations=annotations if annotations is not None else UNSET)
        self._tools[name] = _ToolEntry(tool, fn, requires)
        self._tools_raw = None

    def tool(self, name: str, input_schema: dict[str, Any], **kw: Any) -> Callable[[ToolFn], ToolFn]:
        def deco(fn: ToolFn) -> ToolFn:
            self.add_tool(name, fn, input_schema, **kw)
            return fn
        return deco

    def add_resource(self, uri: str, read: ReadFn, *, name: str, description: str | None = None,
                     mime_type: str | None = None, title: str | None = None) -> None:
        res = t.Resource(uri=uri, name=name, title=title if title else UNSET,
                         description=description if description is not None else UNSET,
                         mimeType=mime_type if mime_type else UNSET)
        self._resources[uri] = (res, read)
        self._resources_raw = None

    def resource(self, uri: str, **kw: Any) -> Callable[[ReadFn], ReadFn]:
        def deco(fn: ReadFn) -> ReadFn:
            self.add_resource(uri, fn, **kw)
            return fn
        return deco

    def resource_prefix(self, prefix: str, read: ReadFn) -> None:
        """Serve (unlisted) every URI starting with ``prefix`` through ``read``."""
        self._prefixes.append((prefix, read))

    # -- what the session asks -------------------------------------------
    @property
    def has_resources(self) -> bool:
        return bool(self._resources or self._prefixes or self.can_subscribe)

    @property
    def capabilities(self) -> t.ServerCapabilities:
        if self._caps is None:
            res: Any = UNSET
            if self.has_resources:
                res = t.ResourcesCapability(subscribe=True if self.can_subscribe else UNSET)
            self._caps = t.ServerCapabilities(tools=t.ToolsCapability(), resources=res)
        return self._caps

    def tools_list_raw(self) -> Raw:
        raw = self._tools_raw
        if raw is None:
            raw = self._tools_raw = Raw(codec.encode(
                t.ListToolsResult(tools=[e.tool for e in self._tools.values()])))
        return raw

    def resources_list_raw(self) -> Raw:
        if not self.has_resources:
            raise ProtocolError(METHOD_NOT_FOUND, "Method not found: resources/list")
        raw = self._resources_raw
        if raw is None:
            raw = self._resources_raw = Raw(codec.encode(
                t.ListResourcesResult(resources=[r for r, _ in self._resources.values()])))
        return raw

    def tool_names(self) -> list[str]:
        return list(self._tools)

    def tool_input_schema(self, name: str) -> dict[str, Any] | None:
        entry = self._tools.get(name)
        return entry.tool.inputSchema if entry is not None else None

    def tool_requirements(self, name: str) -> dict[str, Any] | None:
        entry = self._tools.get(name)
        return entry.requires if entry is not None else None

    def cache_hint(self, method: str, uri: str | None) -> tuple[int, str]:
        """``(ttlMs, cacheScope)`` of a 2026-07-28 list/read/discover result.

        The generic engine promises nothing: ``(0, "private")`` (stale at once,
        not shareable across authorization contexts).  A handler that knows its
        catalogue is fixed overrides this (the self-MCP does; docs/server.md)."""
        return 0, "private"

    def subscription_is_persistent(self, uri: str) -> bool:
        """Whether a subscription to ``uri`` stays after an update (the default),
        or is consumed by its one update (the self-MCP's run URIs)."""
        return True

    async def call_tool(self, name: str, arguments: dict[str, Any], ctx: CallContext) -> Any:
        entry = self._tools.get(name)
        if entry is None:
            raise ProtocolError(METHOD_NOT_FOUND, f"Unknown tool: {name}")
        if not entry.is_valid(arguments):
            raise ProtocolError(INVALID_PARAMS, f"Invalid arguments for tool {name}: "
                                f"{_first_error(entry.validator, arguments)}")
        try:
            out = await entry.fn(arguments, ctx)
        except ToolError as exc:
            return t.CallToolResult(content=[t.TextContent(text=str(exc))], isError=True)
        return tool_result(out)

    async def read_resource(self, uri: str, ctx: CallContext) -> Any:
        entry = self._resources.get(uri)
        if entry is not None:
            res, read = entry
            return resource_result(uri, await read(uri),
                                   res.mimeType if res.mimeType else None)
        for prefix, read in self._prefixes:
            if uri.startswith(prefix):
                return resource_result(uri, await read(uri), None)
        raise ResourceNotFound(uri)

    def subscribe(self, uri: str, ctx: CallContext) -> None:
        """Default: track any URI for this session (override to restrict)."""
        ctx.session.subscribe(uri)

    def unsubscribe(self, uri: str, ctx: CallContext) -> None:
        ctx.session.unsubscribe(uri)

    def notify_updated(self, uri: str, *, consume: bool = False) -> int:
        """``notifications/resources/updated {uri}`` to every subscribed session."""
        return self.hub.resource_updated(uri, consume=consume)


def _first_error(validator: Any, instance: Any) -> str:
    for err in validator.iter_errors(instance):
        path = "/".join(str(p) for p in err.instance_path)
        return f"{err.message} at /{path}" if path else err.message
    return "invalid"


def tool_result(out: Any) -> Any:
    """Normalise what a tool function returned into a CallToolResult."""
    if isinstance(out, t.CallToolResult):
        return out
    if isinstance(out, str):
        return t.CallToolResult(content=[t.TextContent(text=out)])
    if isinstance(out, dict):
        return t.CallToolResult(content=[t.TextContent(text=orjson.dumps(out).decode())],
                                structuredContent=out)
    if isinstance(out, list):
        return t.CallToolResult(content=out)
    return t.CallToolResult(content=[t.TextContent(text=orjson.dumps(out, default=str).decode())])


def resource_result(uri: str, out: Any, mime: str | None) -> Any:
    """Normalise what a read function returned into a ReadResourceResult."""
    if isinstance(out, t.ReadResourceResult):
        return out
    if isinstance(out, str):
        item: Any = t.TextResourceContents(uri=uri, text=out, mimeType=mime or "text/plain")
    elif isinstance(out, bytes | bytearray):
        item = t.BlobResourceContents(uri=uri, blob=base64.b64encode(out).decode(),
                                      mimeType=mime or "application/octet-stream")
    else:
        item = t.TextResourceContents(uri=uri, text=orjson.dumps(out, default=str).decode(),
                                      mimeType=mime or "application/json")
    return t.ReadResourceResult(contents=[item])


# --------------------------------------------------------------------------
# The in-process connection (Stdio origin)
# --------------------------------------------------------------------------


class LocalConnection:
    """An in-process client of a handler: the Stdio origin, no transport.

    ``await conn.request(method, params)`` returns the decoded result (plain
    JSON values) or raises ``ProtocolError``; unsolicited notifications land in
    ``conn.notifications`` (a list of decoded messages).
    """

    def __init__(self, handler: Handler, *, session_id: str = "stdio") -> None:
        self.notifications: list[Any] = []
        self.session = ServerSession(handler, handler.hub, session_id, origin=ORIGIN_STDIO,
                                     auth="in-process",
                                     outbox=lambda b: self.notifications.append(orjson.loads(b)))
        handler.hub.add(self.session)
        self._next = 0

    async def request(self, method: str, params: Any = UNSET) -> Any:
        self._next += 1
        raw = UNSET if params is UNSET else Raw(codec.encode(params))
        out = await self.session.receive(Request(self._next, method, raw))
        msg = codec.decode(out)
        if type(msg) is ErrorResponse:
            e = msg.error
            raise ProtocolError(e.code, e.message, e.data, msg.id)
        return orjson.loads(bytes(msg.result))

    async def initialize(self) -> Any:
        result = await self.request(t.INITIALIZE, {
            "protocolVersion": t.LATEST_PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "agentd-local", "version": "0"}})
        await self.session.receive(Notification(t.NOTIFICATION_INITIALIZED))
        return result

    def close(self) -> None:
        self.session.close()
