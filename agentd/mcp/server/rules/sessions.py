"""The MCP server session's rules, sans-IO: messages in, messages or dispatches out.

A :class:`SessionState` is fed decoded JSON-RPC messages (``agentd.wire.codec``)
and answers with encoded bytes, or with a :class:`Dispatch` when only the
server's handler can produce the result (a tool call, a resource read, a
subscription change).  It never touches a socket, never awaits, never reads a
clock and never logs: the driver (``agentd.mcp.server.handler.ServerSession``) does
those, so the same rules serve the Streamable HTTP engine
(``agentd.mcp.server.http.server``), the in-process (Stdio origin) connection and
unit tests.

Protocol rules that live here (MCP 2025-11-25 and its three older revisions):

* lifecycle: ``initialize`` negotiates the version (the client's if we speak
  it, else our latest), answers the handler's capabilities and serverInfo;
  a second ``initialize`` is -32600; ``notifications/initialized`` marks the
  session ready; ``ping`` -> ``{}``;
* routing of ``tools/*`` and ``resources/*``; an unknown method (e.g.
  ``server/discover``, ``prompts/list``) -> -32601; malformed params ->
  -32602; ``resources/*`` without resources, ``resources/(un)subscribe``
  without the subscribe capability -> -32601;
* inbound notifications (``notifications/cancelled`` included) and responses
  are ignored: this server sends no requests and cancels nothing per request;
* subscriptions are per session (:class:`SessionHub` keeps the URI index);
  ``notifications/resources/updated`` is the only unsolicited message a
  session ever emits, and only for a URI it subscribed to.

What the rules read of the server is its catalogue (:class:`Catalogue`:
capabilities, server info, the encoded tool and resource lists), never its
functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

import msgspec
from msgspec import UNSET, Raw

from agentd.errors import RPCError
from agentd.wire import codec
from agentd.wire import mcp_types as t
from agentd.wire.guard import PEER_FAULTS
from agentd.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    Notification,
    Request,
)

__all__ = [
    "ORIGIN_MANAGEMENT",
    "ORIGIN_STDIO",
    "PRINCIPAL_LOCAL",
    "ROUTES",
    "SERVED_METHODS",
    "STATELESS_ID",
    "Catalogue",
    "Dispatch",
    "SessionHub",
    "SessionState",
    "negotiate_version",
]

ORIGIN_STDIO: Final = "stdio"  # the in-process caller (the agent's own loop, tests)
ORIGIN_MANAGEMENT: Final = "management"  # a request that arrived over HTTP(S)
PRINCIPAL_LOCAL: Final = "local"  # the in-process caller's principal

_RESULT_EMPTY: Final = Raw(b"{}")


def negotiate_version(requested: str) -> str:
    """The client's version when we speak it, else our latest (the client decides)."""
    return requested if requested in t.SUPPORTED_PROTOCOL_VERSIONS else t.LATEST_PROTOCOL_VERSION


class Catalogue(Protocol):
    """What the rules of both revisions read of a served handler
    (``agentd.mcp.server.handler.Handler``); the drivers, which also call it, see the
    handler itself."""

    server_info: t.Implementation
    instructions: str | None
    can_subscribe: bool
    hub: SessionHub

    @property
    def has_resources(self) -> bool: ...
    @property
    def capabilities(self) -> t.ServerCapabilities: ...
    def tools_list_raw(self) -> Raw: ...
    def resources_list_raw(self) -> Raw: ...
    # 2026-07-28
    def tool_requirements(self, name: str) -> dict[str, Any] | None: ...
    def tool_input_schema(self, name: str) -> dict[str, Any] | None: ...
    def cache_hint(self, method: str, uri: str | None) -> tuple[int, str]: ...
    def subscription_is_persistent(self, uri: str) -> bool: ...
    def server_info_raw(self) -> bytes: ...


class Dispatch(msgspec.Struct, frozen=True):
    """A valid request only the handler can answer: ``method`` with its decoded ``params``
    (``tools/call``, ``resources/read``, ``resources/subscribe``, ``resources/unsubscribe``)."""

    method: str
    params: Any


# --------------------------------------------------------------------------
# Sessions and the subscription index
# --------------------------------------------------------------------------


STATELESS_ID = "stateless"  # the id of a request's session at 2026-07-28 (no Mcp-Session-Id)


class SessionState:
    """One client's MCP session: negotiated state, subscriptions, an outbox.

    ``outbox(bytes)`` is how the transport delivers unsolicited messages
    (the HTTP engine appends them to the session's SSE event buffer); it must
    never block.  ``last_active`` is the driver's clock reading of the last
    message (the rules never read a clock).  A 2025-11-25 session starts
    unnegotiated (``initialize`` negotiates it); a 2026-07-28 exchange is born
    negotiated: its ``protocol_version``, ``client_info`` and
    ``client_capabilities`` are its request envelope's, which the driver adopts
    (``agentd.mcp.server.handler.ServerSession.adopt``).
    """

    __slots__ = ("__weakref__", "auth", "client", "client_capabilities", "client_info", "closed",
                 "handler", "hub", "id", "initialized", "last_active", "origin", "outbox",
                 "protocol_version", "requested_version", "subscriptions")

    def __init__(self, handler: Catalogue, hub: SessionHub, session_id: str, *,
                 origin: str = ORIGIN_MANAGEMENT, auth: str = "none", client: str = "",
                 outbox: Callable[[bytes], None] | None = None, now: float = 0.0) -> None:
        self.handler = handler  # the drivers' sessions narrow it to the Handler
        self.hub = hub
        self.id = session_id
        self.origin = origin
        self.auth = auth
        self.client = client
        self.outbox = outbox
        self.protocol_version: str | None = None
        self.requested_version: str | None = None
        self.client_info: t.Implementation | None = None
        self.client_capabilities: dict[str, Any] | None = None  # 2026-07-28 envelopes only
        self.initialized = False
        self.closed = False
        self.subscriptions: set[str] = set()
        self.last_active = now

    @property
    def log_id(self) -> str:
        """The session as log lines name it: ``stateless``, or the first 8
        characters of its ``Mcp-Session-Id`` and ``…`` -- the whole id is a
        credential for the session, so it is never logged."""
        return self.id if self.id == STATELESS_ID else self.id[:8] + "…"

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
    def notification(self, msg: Notification) -> bool:
        """Apply an inbound notification; False when it is ignored (all but initialized)."""
        if msg.method == t.NOTIFICATION_INITIALIZED:
            self.initialized = True
            return True
        return False

    @staticmethod
    def answer(request_id: Any, result: Any) -> bytes:
        return codec.encode_response(request_id, result)

    @staticmethod
    def refuse(request_id: Any, exc: RPCError) -> bytes:
        return codec.encode_error(request_id, exc.code, exc.message, exc.data)

    @staticmethod
    def internal_error(request_id: Any) -> bytes:
        """What a client sees of a handler bug (the driver logs the detail)."""
        return codec.encode_error(request_id, INTERNAL_ERROR, "Internal error")


def _updated(uri: str) -> bytes:
    return codec.encode_notification(t.NOTIFICATION_RESOURCES_UPDATED,
                                     t.ResourceUpdatedParams(uri=uri))


class SessionHub:
    """Every live session of one served handler, and the URI -> sessions index."""

    __slots__ = ("_index", "sessions")

    def __init__(self) -> None:
        self.sessions: dict[str, SessionState] = {}
        self._index: dict[str, set[SessionState]] = {}

    def add(self, session: SessionState) -> None:
        self.sessions[session.id] = session

    def remove(self, session: SessionState) -> None:
        self.sessions.pop(session.id, None)
        for uri in session.subscriptions:
            subs = self._index.get(uri)
            if subs is not None:
                subs.discard(session)
                if not subs:
                    del self._index[uri]
        session.subscriptions.clear()

    def subscribe(self, session: SessionState, uri: str) -> None:
        if session.closed:
            return
        session.subscriptions.add(uri)
        self._index.setdefault(uri, set()).add(session)

    def unsubscribe(self, session: SessionState, uri: str) -> None:
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
# Method routes: (session, request) -> result | Dispatch
# --------------------------------------------------------------------------


def _params(method: str, req: Request) -> Any:
    return codec.decode_params(method, req.params, req.id)


def _initialize(s: SessionState, req: Request) -> Any:
    p = _params(t.INITIALIZE, req)
    if s.protocol_version is not None:
        raise RPCError(INVALID_REQUEST, "Invalid Request: the session is already initialized",
                       side="local")
    s.protocol_version = negotiate_version(p.protocolVersion)
    s.requested_version = p.protocolVersion
    s.client_info = p.clientInfo
    h = s.handler
    return t.InitializeResult(protocolVersion=s.protocol_version, capabilities=h.capabilities,
                              serverInfo=h.server_info,
                              instructions=h.instructions if h.instructions else UNSET)


def _ping(s: SessionState, req: Request) -> Any:
    return _RESULT_EMPTY


def _tools_list(s: SessionState, req: Request) -> Any:
    if req.params is not UNSET:
        _params(t.TOOLS_LIST, req)
    return s.handler.tools_list_raw()


_call_decoder: Final = msgspec.json.Decoder(t.CallToolParams)


def _tools_call(s: SessionState, req: Request) -> Any:
    raw = req.params
    try:
        p = _call_decoder.decode(raw) if raw is not UNSET else None
    except PEER_FAULTS:
        p = None
    if p is None:
        p = _params(t.TOOLS_CALL, req)  # explains the problem (-32602)
    return Dispatch(t.TOOLS_CALL, p)


def _resources_list(s: SessionState, req: Request) -> Any:
    if req.params is not UNSET:
        _params(t.RESOURCES_LIST, req)
    return s.handler.resources_list_raw()


def _templates_list(s: SessionState, req: Request) -> Any:
    if not s.handler.has_resources:
        raise RPCError(METHOD_NOT_FOUND, f"Method not found: {req.method}", side="local")
    return t.ListResourceTemplatesResult(resourceTemplates=[])


def _resources_read(s: SessionState, req: Request) -> Any:
    return Dispatch(t.RESOURCES_READ, _params(t.RESOURCES_READ, req))


def _subscription(s: SessionState, req: Request) -> Any:
    if not s.handler.can_subscribe:
        raise RPCError(METHOD_NOT_FOUND, f"Method not found: {req.method}", side="local")
    return Dispatch(req.method, _params(req.method, req))


ROUTES: Final[dict[str, Callable[[SessionState, Request], Any]]] = {
    t.INITIALIZE: _initialize,
    t.PING: _ping,
    t.TOOLS_LIST: _tools_list,
    t.TOOLS_CALL: _tools_call,
    t.RESOURCES_LIST: _resources_list,
    t.RESOURCES_TEMPLATES_LIST: _templates_list,
    t.RESOURCES_READ: _resources_read,
    t.RESOURCES_SUBSCRIBE: _subscription,
    t.RESOURCES_UNSUBSCRIBE: _subscription,
}
SERVED_METHODS: Final = frozenset(ROUTES)
