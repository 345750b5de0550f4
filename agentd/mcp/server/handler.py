"""The server's handler framework: tools and resources behind the session rules.

:class:`Handler` is what a server implements (documented in ``docs/server.md``):
subclass or instantiate it, register tools (JSON Schema 2020-12 input schemas,
compiled once with jsonschema-rs) with async call functions and resources with
async read functions, then serve it with ``agentd.mcp.server.http.server.serve``.
``handler.notify_updated(uri)`` pushes ``notifications/resources/updated`` to
every session subscribed to ``uri``.

:class:`ServerSession` is the server's one connection type, built by one
factory per revision (``opening``: a 2025-11-25 session; ``per_request``: one
2026-07-28 exchange, negotiated by its envelope) and driven by one driver
(``serve``): it feeds its revision (``agentd.mcp.server.rules.revision``, which
holds each revision's sans-IO rules) a message, runs the
:class:`~agentd.mcp.server.rules.sessions.Dispatch` they hand back on the handler
(awaiting its functions, with a :class:`CallContext`, through
:func:`run_dispatch`), stamps the session's clock and logs what was served
(``mcp.serve.session``, ``mcp.serve.call``, ``mcp.serve.read``, ...). A handler
bug never kills the server: it is logged and answered -32603.

Result builders (:func:`tool_result`, :func:`resource_result`) turn what a
function returned into the MCP result; a tool that ran and failed returns
:func:`tool_error` (an outcome, not an exception).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Final

import jsonschema_rs
import orjson
from msgspec import UNSET, Raw

from agentd.errors import RPCError
from agentd.log import log
from agentd.mcp.server.rules import stateless
from agentd.mcp.server.rules.revision import SESSION, STATELESS, Revision
from agentd.mcp.server.rules.sessions import (
    ORIGIN_MANAGEMENT,
    ORIGIN_STDIO,
    PRINCIPAL_LOCAL,
    SERVED_METHODS,
    STATELESS_ID,
    Dispatch,
    SessionHub,
    SessionState,
)
from agentd.obs import metrics
from agentd.wire import codec
from agentd.wire import mcp2026 as m
from agentd.wire import mcp_types as t
from agentd.wire.guard import PEER_FAULTS, fault_text
from agentd.wire.jsonrpc import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    Notification,
    Request,
    is_subscribe_refusal,
    resource_not_found,
)

__all__ = [
    "CallContext",
    "Handler",
    "ListenSession",
    "ServerSession",
    "current_principal",
    "resource_result",
    "run_dispatch",
    "tool_error",
    "tool_result",
]

# Who is asking, set per request by the transport's auth guard (agentd.mcp.server.auth):
# ``cert:<subject>``, ``bearer:<name>``, both joined by ``+``, or ``anonymous``.
# A context variable, so it follows the request's own task and never leaks
# into another peer's request (docs/security.md, "Peers kept apart").
current_principal: ContextVar[str | None] = ContextVar("agentd_principal", default=None)

_log = log.bind(component="mcp.server")
_RESULT_EMPTY: Final = Raw(b"{}")
# the methods `agentd_served_requests_total` names (either revision's); others: "other"
_COUNTED: Final = SERVED_METHODS | {m.SERVER_DISCOVER}


# --------------------------------------------------------------------------
# Per-request context
# --------------------------------------------------------------------------

Emit = Callable[[bytes], Awaitable[None]]


class CallContext:
    """What a handler function learns about the call it serves."""

    __slots__ = ("_emit", "admitted", "origin", "principal", "request_id", "session")

    def __init__(self, session: SessionState, request_id: Any, emit: Emit | None = None) -> None:
        self.session = session
        self.origin = session.origin
        self.request_id = request_id
        self._emit = emit
        # what the handler's awaited admit() decided before its subscribe runs, per URI
        self.admitted: dict[str, Any] = {}
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
# The driver: the rules, the handler's functions, the clock and the log
# --------------------------------------------------------------------------


class ServerSession(SessionState):
    """The server's one connection type: a client's state, driven on its handler.

    One factory per revision -- :meth:`opening` (2025-11-25: a session an
    ``initialize`` negotiates, its unsolicited messages to ``outbox``) and
    :meth:`per_request` (2026-07-28: one request, negotiated by its envelope)
    -- and one driver, :meth:`serve`: a request in, the session's
    :attr:`revision` (chosen once, by the factory) routes it, a dispatch runs
    on the handler (:func:`run_dispatch`), the response bytes and HTTP status
    out.  A handler bug is logged and answered -32603, never raised.

    A 2026-07-28 ``subscriptions/listen`` stream is this type holding its
    :class:`~agentd.mcp.server.rules.stateless.Listen` (built by
    :meth:`listening`: see :class:`ListenSession`)."""

    __slots__ = ("envelope", "revision")
    handler: Handler  # the rules read its Catalogue; the driver calls its functions

    def __init__(self, handler: Handler, hub: SessionHub, session_id: str, *,
                 origin: str = ORIGIN_MANAGEMENT, auth: str = "none", client: str = "",
                 outbox: Callable[[bytes], None] | None = None) -> None:
        super().__init__(handler, hub, session_id, origin=origin, auth=auth, client=client,
                         outbox=outbox, now=time.monotonic())
        self.envelope: stateless.Envelope | None = None  # a 2025-11-25 session has none
        self.revision: Revision = SESSION

    def adopt(self, envelope: stateless.Envelope) -> None:
        """Born negotiated at 2026-07-28 by a request's ``envelope``: its version,
        client info and capabilities, and the stateless revision from here on."""
        self.envelope = envelope
        self.revision = STATELESS
        self.protocol_version = envelope.version
        self.client_info = envelope.client_info
        self.client_capabilities = envelope.capabilities
        self.initialized = True

    @classmethod
    def opening(cls, handler: Handler, session_id: str, *, origin: str = ORIGIN_MANAGEMENT,
                auth: str = "none", client: str = "",
                outbox: Callable[[bytes], None] | None = None) -> ServerSession:
        """A 2025-11-25 session, negotiated by the ``initialize`` it serves first."""
        return cls(handler, handler.hub, session_id, origin=origin, auth=auth, client=client,
                   outbox=outbox)

    @classmethod
    def per_request(cls, handler: Handler, envelope: stateless.Envelope, *, auth: str,
                    client: str) -> ServerSession:
        """One 2026-07-28 exchange, negotiated by its request's ``envelope`` (no
        session id is minted or read; its updates have no stream to go to)."""
        s = cls(handler, handler.hub, STATELESS_ID, origin=ORIGIN_MANAGEMENT, auth=auth,
                client=client)
        s.adopt(envelope)
        return s

    @staticmethod
    def listening(handler: Handler, envelope: stateless.Envelope, stream: stateless.Listen,
                  *, listen_id: str, auth: str, client: str,
                  outbox: Callable[[bytes], None] | None = None) -> ListenSession:
        """One 2026-07-28 ``subscriptions/listen`` stream (``stream``: its rules and
        frames); ``listen_id`` never collides with a session id (those are url-safe
        tokens); ``outbox`` is the transport's wake-up on every frame."""
        s = ListenSession(handler, handler.hub, listen_id, stream, auth=auth, client=client,
                          outbox=outbox)
        s.adopt(envelope)
        return s

    async def serve(self, req: Request, emit: Emit | None = None,
                    headers: Any = None) -> tuple[bytes, int]:
        """The driver: answer ``req`` by this session's revision; the encoded
        JSON-RPC response and its HTTP status (``headers``: the 2026-07-28
        request's, which its rules check against the body)."""
        rev = self.revision
        self.last_active = time.monotonic()
        # bounded labels: a peer's made-up method name is "other"
        method = req.method if req.method in _COUNTED else "other"
        try:
            out = rev.route(self, req, self.envelope, headers)
            if type(out) is Dispatch:
                out = await run_dispatch(self, req, out, emit)
            elif req.method == t.INITIALIZE:
                _log.info("mcp.serve.session", session=self.log_id, origin=self.origin,
                          auth=self.auth,
                          client=self.client_info.name if self.client_info else "",
                          version=self.protocol_version, requested=self.requested_version)
            answer = rev.answer(self, req, self.envelope, out)
            metrics.SERVED.inc(method, "ok")
            return answer
        except RPCError as exc:
            if exc.side == "remote":  # a peer's answer to the handler's own request: a bug here
                self._internal(req, exc)
                metrics.SERVED.inc(method, "internal_error")
                return rev.internal_error(req.id)
            if _log.enabled("debug"):
                _log.debug("mcp.serve.error", method=req.method, code=exc.code,
                           origin=self.origin)
            metrics.SERVED.inc(method, "error")
            return rev.refuse(req.id, exc)
        except Exception as exc:  # a handler bug never kills the server
            self._internal(req, exc)
            metrics.SERVED.inc(method, "internal_error")
            return rev.internal_error(req.id)

    async def receive(self, msg: Any, emit: Emit | None = None) -> bytes | None:
        """Handle one decoded message; the encoded response, or None (notification/response)."""
        self.last_active = time.monotonic()
        if type(msg) is Request:
            return (await self.serve(msg, emit))[0]
        if type(msg) is Notification and not self.notification(msg) and _log.enabled("debug"):
            _log.debug("mcp.serve.notification.ignored", method=msg.method, origin=self.origin)
        return None  # a response / error response: we send no requests, ignore

    def _internal(self, req: Request, exc: Exception) -> None:
        """Log a handler bug (the client sees -32603 "Internal error", no detail)."""
        _log.error("mcp.serve.internal_error", method=req.method, origin=self.origin,
                   error=type(exc).__name__, detail=str(exc)[:500])


class ListenSession(ServerSession):
    """A 2026-07-28 ``subscriptions/listen`` stream: the one connection type (what
    the handler and the hub see) holding its
    :class:`~agentd.mcp.server.rules.stateless.Listen` (``listen``, what makes it a
    stream): its updates are tagged and queued there, and :meth:`open_listen`
    drives its opening (the handler's awaited ``admit``, then its ``subscribe``
    per URI)."""

    __slots__ = ("listen",)

    def __init__(self, handler: Handler, hub: SessionHub, listen_id: str,
                 listen: stateless.Listen, *, auth: str, client: str,
                 outbox: Callable[[bytes], None] | None) -> None:
        super().__init__(handler, hub, listen_id, origin=ORIGIN_MANAGEMENT, auth=auth,
                         client=client, outbox=outbox)
        self.listen = listen

    # -- outbound: tagged, queued, bounded ---------------------------------
    def push(self, data: bytes) -> None:
        if not self.closed:
            self.listen.queue(data)
            if self.outbox is not None:
                self.outbox(data)  # the transport's wake-up

    def notify_updated(self, uri: str) -> None:
        self.push(self.listen.updated(uri))

    def updated(self, uri: str, data: bytes) -> None:
        self.push(self.listen.updated(uri))  # re-encoded with the stream's tag

    async def open_listen(self, params: m.ListenParams) -> bytes:
        """Subscribe what the listen asked and is served; the acknowledgement.

        The handler's ``admit`` is awaited first, for every URI at once (the
        pool's fan-in; nothing is subscribed, so nothing is queued, while it
        runs), then its own ``subscribe`` for each (so a handler's admission
        rules apply unchanged); a URI it refuses
        (:func:`~agentd.wire.jsonrpc.subscribe_refused`) is left out of the
        acknowledgement.  Updates that fire during the subscribes (a run that is
        already terminal) are queued *behind* the acknowledgement, which is
        always first."""
        stream = self.listen
        uris = stream.requested(params)
        ctx = CallContext(self, stream.request_id)
        h = self.handler
        if uris:
            ctx.admitted = await h.admit(uris, ctx)
        for uri in uris:
            try:
                h.subscribe(uri, ctx)
            except RPCError as exc:
                if not is_subscribe_refusal(exc):
                    raise
                if _log.enabled("debug"):  # a peer's ask, answered by the ack: no flood
                    _log.debug("mcp.serve.listen.refused", uri=uri[:200])
            stream.subscribed(uri, uri in self.subscriptions)
        return stream.acknowledge()


async def run_dispatch(s: ServerSession, req: Request, d: Dispatch, emit: Emit | None) -> Any:
    """Carry out what the rules dispatched, on the session's handler (both revisions)."""
    p = d.params
    h = s.handler
    if d.method == t.TOOLS_CALL:
        _log.info("mcp.serve.call", origin=s.origin, auth=s.auth, session=s.log_id, tool=p.name)
        return await h.call_tool(p.name, p.arguments or {}, CallContext(s, req.id, emit))
    if d.method == t.RESOURCES_READ:
        _log.info("mcp.serve.read", origin=s.origin, auth=s.auth, session=s.log_id, uri=p.uri)
        return await h.read_resource(p.uri, CallContext(s, req.id, emit))
    if d.method == t.RESOURCES_SUBSCRIBE:
        _log.info("mcp.serve.subscribe", origin=s.origin, auth=s.auth, session=s.log_id,
                  uri=p.uri)
        ctx = CallContext(s, req.id, emit)
        ctx.admitted = await h.admit([p.uri], ctx)
        h.subscribe(p.uri, ctx)
        return _RESULT_EMPTY
    _log.info("mcp.serve.unsubscribe", origin=s.origin, auth=s.auth, session=s.log_id, uri=p.uri)
    h.unsubscribe(p.uri, CallContext(s, req.id, emit))
    return _RESULT_EMPTY


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
    returning :func:`tool_error` gives ``isError: true``.
    ``@handler.resource(uri, name=..., description=..., mime_type=...)`` on
    ``async def read(uri)`` returning ``str`` / ``bytes`` / ``dict`` (JSON) /
    a ``ReadResourceResult``; ``handler.resource_prefix(prefix, read)`` serves
    unlisted URIs under a prefix (``read`` raises :func:`~agentd.wire.jsonrpc.resource_not_found`).
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
        self._info_raw: bytes | None = None
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
            raise RPCError(METHOD_NOT_FOUND, "Method not found: resources/list", side="local")
        raw = self._resources_raw
        if raw is None:
            raw = self._resources_raw = Raw(codec.encode(
                t.ListResourcesResult(resources=[r for r, _ in self._resources.values()])))
        return raw

    def server_info_raw(self) -> bytes:
        """``server_info`` encoded once (2026-07-28 results carry it in ``_meta``)."""
        raw = self._info_raw
        if raw is None:
            raw = self._info_raw = codec.encode(self.server_info)
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
            raise RPCError(METHOD_NOT_FOUND, f"Unknown tool: {name}", side="local")
        if not _valid(entry, arguments):
            raise RPCError(INVALID_PARAMS, f"Invalid arguments for tool {name}: "
                           f"{_first_error(entry.validator, arguments)}", side="local")
        return tool_result(await entry.fn(arguments, ctx))

    async def read_resource(self, uri: str, ctx: CallContext) -> Any:
        entry = self._resources.get(uri)
        if entry is not None:
            res, read = entry
            return resource_result(uri, await read(uri),
                                   res.mimeType if res.mimeType else None)
        for prefix, read in self._prefixes:
            if uri.startswith(prefix):
                return resource_result(uri, await read(uri), None)
        raise resource_not_found(uri)

    async def admit(self, uris: list[str], ctx: CallContext) -> dict[str, Any]:
        """The awaited step before subscribes are answered (a listen's acknowledgement,
        a 2025-11-25 subscribe's ``{}``): a handler whose admission needs IO -- the
        self-MCP in a pool asks the owners of other workers' handles -- does it here,
        for all ``uris`` at once, and returns what it learnt per URI; that is
        ``ctx.admitted`` when its synchronous :meth:`subscribe` then runs for each.
        The default needs no IO: nothing."""
        return {}

    def subscribe(self, uri: str, ctx: CallContext) -> None:
        """Default: track any URI for this session (override to restrict: raise
        :func:`~agentd.wire.jsonrpc.subscribe_refused` for a URI that will never be announced)."""
        ctx.session.subscribe(uri)

    def unsubscribe(self, uri: str, ctx: CallContext) -> None:
        ctx.session.unsubscribe(uri)

    def notify_updated(self, uri: str, *, consume: bool = False) -> int:
        """``notifications/resources/updated {uri}`` to every subscribed session."""
        return self.hub.resource_updated(uri, consume=consume)


def _valid(entry: _ToolEntry, arguments: Any) -> bool:
    try:
        return entry.is_valid(arguments)
    except PEER_FAULTS:  # the client's arguments, not our schema: _first_error says why
        return False


def _first_error(validator: Any, instance: Any) -> str:
    try:
        for err in validator.iter_errors(instance):
            path = "/".join(str(p) for p in err.instance_path)
            return f"{err.message} at /{path}" if path else err.message
    except PEER_FAULTS as exc:  # e.g. nested beyond jsonschema-rs's limit
        return f"the arguments are {fault_text(exc)}"
    return "invalid"


def tool_error(text: str) -> t.CallToolResult:
    """What a tool function returns when it ran and failed: ``isError: true`` with
    ``text`` (the model sees it and may recover; a JSON-RPC error is for calls
    that could not run)."""
    return t.CallToolResult(content=[t.TextContent(text=text)], isError=True)


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
