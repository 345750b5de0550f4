"""The MCP client session: a sans-IO state machine (no sockets, no tasks).

It is fed the bytes of JSON-RPC messages that arrived from a server (a JSON
body or one SSE event's data) and returns *events* for the caller to act on;
it builds the bytes of every message the client sends.  Every protocol rule of
spec §1 that does not need a clock or a socket lives here:

* the handshake (§1.3): ``initialize`` with ``protocolVersion`` 2025-11-25,
  ``capabilities: {}`` and ``clientInfo {name: "agentd", version}``; accepting
  a downgrade to 2025-06-18, 2025-03-26 or 2024-11-05 and refusing any other
  version; then ``notifications/initialized``;
* the negotiated capabilities, frozen, gating every later request (a
  :class:`HandshakeError` naming the ``method`` and what it ``needs``);
* request-id bookkeeping (which id is which method; ``initialize`` is never
  cancelled);
* answering the server's requests: ``ping`` -> ``{}``, ``roots/list`` ->
  ``{"roots": []}``, anything else (sampling, elicitation, ...) -> -32601;
* routing notifications, dropping the ones whose capability was not advertised;
* revision 2026-07-28 (stateless): ``server/discover`` and the fallback rule
  (anything that is not positive evidence of a 2026-07-28 server falls back to
  ``initialize``), the per-request ``_meta`` every request then carries, the
  ``Mcp-Method``/``Mcp-Name``/``Mcp-Param-*`` headers, ``subscriptions/listen``
  and its acknowledgement, and the answers to an ``input_required`` result
  (MRTR: roots -> an empty list, elicitation -> declined, sampling -> refused).

What differs between the revisions (headers, the request's ``_meta``, the
cancel, the listen request, ``input_required``) is answered by the
:class:`~agentd.mcp.client.rules.revision.Revision` the handshake chose, which the session
holds (``revision``), so the transport and the client API stay version-blind.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import msgspec
from msgspec import UNSET, Raw, UnsetType

from agentd.errors import HandshakeError
from agentd.mcp.client.rules.catalogue import prune_deep
from agentd.mcp.client.rules.negotiate import VersionChoice, choose_supported, listen_delivers
from agentd.mcp.client.rules.revision import SESSION, STATELESS, Revision, input_required
from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt
from agentd.wire.guard import PEER_FAULTS, fault_text
from agentd.wire.jsonrpc import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    ErrorObject,
    ErrorResponse,
    Notification,
    Request,
    Response,
)

__all__ = [
    "CLIENT_NAME",
    "STRUCTURED_OUTPUT_SINCE",
    "Capabilities",
    "ClientSession",
    "Failed",
    "Notified",
    "Reply",
    "Resolved",
]

CLIENT_NAME: Final = "agentd"
STRUCTURED_OUTPUT_SINCE: Final = "2025-06-18"  # outputSchema / structuredContent

@dataclass(frozen=True, slots=True)
class Capabilities:
    """The server's negotiated capabilities, frozen at the handshake."""

    tools: bool = False
    tools_list_changed: bool = False
    resources: bool = False
    resources_subscribe: bool = False
    resources_list_changed: bool = False
    prompts: bool = False
    logging: bool = False
    completions: bool = False
    raw: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_wire(cls, caps: mt.ServerCapabilities) -> Capabilities:
        tools, res = caps.tools, caps.resources
        return cls(
            tools=tools is not UNSET,
            tools_list_changed=bool(tools and tools.listChanged),
            resources=res is not UNSET,
            resources_subscribe=bool(res and res.subscribe),
            resources_list_changed=bool(res and res.listChanged),
            prompts=caps.prompts is not UNSET,
            logging=caps.logging is not UNSET,
            completions=caps.completions is not UNSET,
            raw=MappingProxyType(msgspec.to_builtins(caps)),
        )


# ---------------------------------------------------------------- events out


class Resolved(msgspec.Struct, gc=False):
    """The result of our request ``id`` arrived (undecoded)."""

    id: int | str
    method: str
    result: Raw


class Failed(msgspec.Struct, gc=False):
    """Our request ``id`` got a top-level JSON-RPC error."""

    id: int | str
    method: str
    error: ErrorObject


class Reply(msgspec.Struct, gc=False):
    """Bytes to send to the server: the answer to one of its requests."""

    data: bytes
    method: str


class Notified(msgspec.Struct, gc=False):
    """A server notification the client acts on (already capability-gated)."""

    method: str
    params: Raw


# ---------------------------------------------------------------- decoding


class _ErrorIn(msgspec.Struct, gc=False):
    code: int = 0
    message: str = ""
    data: Any = UNSET


class _In(msgspec.Struct, gc=False):
    """Any inbound JSON-RPC message; which one it is follows from its fields."""

    id: int | str | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: Raw = Raw()
    result: Raw = Raw()
    error: _ErrorIn | UnsetType = UNSET


_dec_one = msgspec.json.Decoder(_In)
_dec_batch = msgspec.json.Decoder(list[_In])
_dec_init = msgspec.json.Decoder(mt.InitializeResult)
_dec_uri = msgspec.json.Decoder(mt.ResourceUpdatedParams)
_enc = msgspec.json.Encoder()

_dec_discover = msgspec.json.Decoder(m26.DiscoverResult)
_dec_ack = msgspec.json.Decoder(m26.AcknowledgedParams)


_EMPTY_RESULT: Final = Raw(b"{}")
_ROOTS_RESULT: Final = Raw(b'{"roots":[]}')
_NOTIFIED: Final = frozenset({
    mt.NOTIFICATION_TOOLS_LIST_CHANGED,
    mt.NOTIFICATION_RESOURCES_LIST_CHANGED,
    mt.NOTIFICATION_RESOURCES_UPDATED,
    mt.NOTIFICATION_MESSAGE,
    mt.NOTIFICATION_PROGRESS,
    mt.NOTIFICATION_CANCELLED,
    m26.NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED,
})
# A request method -> the capability it needs (as named on the wire) and its test.
_REQUIRES: Final[dict[str, tuple[str, Callable[[Capabilities], bool]]]] = {
    mt.TOOLS_LIST: ("tools", lambda c: c.tools),
    mt.TOOLS_CALL: ("tools", lambda c: c.tools),
    mt.RESOURCES_LIST: ("resources", lambda c: c.resources),
    mt.RESOURCES_TEMPLATES_LIST: ("resources", lambda c: c.resources),
    mt.RESOURCES_READ: ("resources", lambda c: c.resources),
    mt.RESOURCES_SUBSCRIBE: ("resources.subscribe", lambda c: c.resources_subscribe),
    mt.RESOURCES_UNSUBSCRIBE: ("resources.subscribe", lambda c: c.resources_subscribe),
    mt.PROMPTS_LIST: ("prompts", lambda c: c.prompts),
    mt.PROMPTS_GET: ("prompts", lambda c: c.prompts),
    mt.LOGGING_SET_LEVEL: ("logging", lambda c: c.logging),
    mt.COMPLETION_COMPLETE: ("completions", lambda c: c.completions),
}


class ClientSession:
    """One MCP client session's protocol state.  Not thread-safe; no I/O."""

    __slots__ = (
        "_ids", "_init_id", "_next_id", "_pending", "capabilities", "client_version",
        "garbage", "garbled", "instructions", "listen_delivers", "meta", "meta_json",
        "offered_version",
        "protocol_version", "revision", "server_info", "session_revision", "state",
        "structured_output",
        "supported_versions",
    )

    def __init__(self, *, client_version: str, offered_version: str = mt.LATEST_PROTOCOL_VERSION,
                 session_revision: Revision = SESSION) -> None:
        self.client_version = client_version
        # the revision an initialized session speaks: SESSION, or LEGACY_SSE for a server
        # declared on the HTTP+SSE transport (which also says what initialize offers)
        self.session_revision = session_revision
        self.offered_version = session_revision.offered or offered_version
        self.state = "new"  # new -> initializing -> ready ; any -> closed
        self.protocol_version: str | None = None
        self.capabilities = Capabilities()
        self.server_info: mt.Implementation | None = None
        self.instructions: str | None = None  # untrusted, server-controlled text
        self.structured_output = False
        self.garbage = 0  # undecodable inbound messages seen (peer mistakes)
        self.garbled = ""  # why the last undecodable message was refused (take_garbled)
        self._next_id = 1
        self._pending: dict[int | str, str] = {}  # id -> method
        self._init_id: int | None = None
        # the revision the handshake chose (agentd.mcp.client.rules.revision): every rule that
        # differs between 2025-11-25 and 2026-07-28 is its answer
        self.revision: Revision = session_revision
        self.supported_versions: tuple[str, ...] = ()
        # 2026-07-28: whether discover says listen delivers resource updates (None: unsaid)
        self.listen_delivers: bool | None = None
        self.meta: dict[str, Any] = {}  # the _meta of every 2026-07-28 request
        self.meta_json = b"{}"

    # ------------------------------------------------------------ handshake

    def start_initialize(self) -> tuple[int, bytes]:
        """The ``initialize`` request (exactly §1.3): its id and bytes."""
        if self.state not in ("new", "closed"):
            raise RuntimeError(f"initialize in state {self.state}")
        self.state = "initializing"
        params = mt.InitializeParams(
            protocolVersion=self.offered_version,
            capabilities=mt.ClientCapabilities(),  # {}: agentd services none
            clientInfo=mt.Implementation(name=CLIENT_NAME, version=self.client_version),
        )
        rid = self._take_id()
        self._init_id = rid
        self._pending[rid] = mt.INITIALIZE
        return rid, _enc.encode(Request(rid, mt.INITIALIZE, params))

    def finish_initialize(self, result: Raw) -> bytes:
        """Accept the ``initialize`` result; returns ``notifications/initialized``.

        Raises :class:`HandshakeError` for an undecodable result or a version
        agentd cannot speak.
        """
        if self.state != "initializing":
            raise HandshakeError(f"initialize result in state {self.state}")
        try:
            init = _dec_init.decode(result)
        except PEER_FAULTS as exc:
            self.state = "closed"
            raise HandshakeError(f"malformed initialize result: {fault_text(exc)}") from None
        if init.protocolVersion not in mt.SUPPORTED_PROTOCOL_VERSIONS:
            self.state = "closed"
            raise HandshakeError(
                f"server answered protocolVersion {init.protocolVersion!r}; agentd speaks "
                + ", ".join(mt.SUPPORTED_PROTOCOL_VERSIONS))
        self.protocol_version = init.protocolVersion
        self.capabilities = Capabilities.from_wire(init.capabilities)
        self.server_info = init.serverInfo
        self.instructions = init.instructions or None
        self.structured_output = init.protocolVersion >= STRUCTURED_OUTPUT_SINCE
        self.revision = self.session_revision
        self.state = "ready"
        return _enc.encode(Notification(mt.NOTIFICATION_INITIALIZED))

    # ------------------------------------------------------------ 2026-07-28

    def set_meta(self, extra: Mapping[str, Any]) -> None:
        """The ``_meta`` of every stateless request: the revision's reserved keys
        (version, ``clientInfo``, ``clientCapabilities: {}``) plus ``extra``
        (agentd's run id, the run's ``traceparent``)."""
        meta = {
            m26.PROTOCOL_VERSION_META: m26.LATEST_MODERN_VERSION,
            m26.CLIENT_INFO_META: {"name": CLIENT_NAME, "version": self.client_version},
            m26.CLIENT_CAPABILITIES_META: {},  # agentd services none, in both revisions
        }
        meta.update(extra)
        self.meta = meta
        self.meta_json = _enc.encode(meta)

    def start_discover(self) -> tuple[int, bytes]:
        """The ``server/discover`` probe (sent at the newest revision agentd speaks)."""
        if self.state not in ("new", "closed"):
            raise RuntimeError(f"server/discover in state {self.state}")
        if not self.meta:
            self.set_meta({})
        self.state = "discovering"
        rid = self._take_id()
        self._pending[rid] = m26.SERVER_DISCOVER
        return rid, b"".join((b'{"jsonrpc":"2.0","id":', str(rid).encode(),
                              b',"method":"server/discover","params":{"_meta":',
                              self.meta_json, b"}}"))

    def finish_discover(self, result: Raw) -> str:
        """Adopt a ``server/discover`` result (returns ""), or say why it is not
        positive evidence of a 2026-07-28 server: then the caller falls back to
        ``initialize`` (an expected outcome, not a failure)."""
        try:
            d = _dec_discover.decode(result)
        except PEER_FAULTS as exc:
            self.state = "new"
            return f"undecodable server/discover result: {fault_text(exc)}"
        if not any(v in m26.MODERN_PROTOCOL_VERSIONS for v in d.supportedVersions):
            self.state = "new"
            return ("server/discover lists no 2026-07-28 version: "
                    + ", ".join(map(str, d.supportedVersions[:8])))
        info = None
        if d._meta and isinstance(d._meta.get(m26.SERVER_INFO_META), dict):
            with contextlib.suppress(*PEER_FAULTS):
                info = msgspec.convert(d._meta[m26.SERVER_INFO_META], mt.Implementation)
        self.supported_versions = tuple(d.supportedVersions)
        self.protocol_version = m26.LATEST_MODERN_VERSION
        caps = Capabilities.from_wire(d.capabilities)
        self.listen_delivers = listen_delivers(d.capabilities.resources)
        if caps.resources and not caps.resources_subscribe:
            # subscriptions/listen is core at 2026-07-28: a server with resources may be
            # asked for any URI, and its acknowledgement says which ones it honours
            # (some servers still advertise resources.subscribe, some do not).  One
            # that says `subscribe: false` (listen_delivers False) can still deliver
            # at 2025-11-25: the client renegotiates it there (agentd.mcp.client.rules.negotiate)
            caps = dataclasses.replace(caps, resources_subscribe=True)
        self.capabilities = caps
        self.server_info = info
        self.instructions = d.instructions or None
        self.structured_output = True
        self.revision = STATELESS
        self.state = "ready"
        return ""

    def discover_failed(self, code: int | None, data: Any = None) -> VersionChoice:
        """The probe was refused: what to try next (:mod:`agentd.mcp.client.rules.negotiate`).

        A -32022 naming a version agentd speaks is retried with it (a 2026-era
        one: ``server/discover`` again; an initialize-era one: ``initialize``
        offering it); anything else falls back to ``initialize``.  The one
        verdict that proves incompatibility -- -32022 naming only versions
        agentd speaks none of -- raises :class:`HandshakeError`."""
        self.state = "new"
        if code != m26.UNSUPPORTED_PROTOCOL_VERSION:
            return VersionChoice(None)
        choice = choose_supported(data)
        if choice.incompatible:
            self.state = "closed"
            supported = data.get("supported") if isinstance(data, dict) else None
            named = supported[:8] if isinstance(supported, list) else []
            raise HandshakeError("server speaks only protocol versions "
                                 + ", ".join(str(v)[:40] for v in named)
                                 + "; agentd speaks 2026-07-28 and "
                                 + ", ".join(mt.SUPPORTED_PROTOCOL_VERSIONS))
        if choice.version is not None and not choice.modern:
            self.offered_version = choice.version  # initialize offers what it named
        return choice

    @property
    def stateless(self) -> bool:
        """Whether the adopted revision is 2026-07-28 (a test's or a benchmark's
        shortcut past the handshake sets it; the client asks :attr:`revision`)."""
        return self.revision is STATELESS

    @stateless.setter
    def stateless(self, value: bool) -> None:
        self.revision = STATELESS if value else SESSION

    def headers(self, method: str, name: str | None = None) -> tuple[tuple[str, str], ...]:
        """The standard request headers of one request (``Mcp-Method``, and
        ``Mcp-Name`` for the name-bearing methods; the revision's answer)."""
        return self.revision.headers(method, name)

    def listen(self, notifications: m26.SubscriptionFilter) -> tuple[int, bytes]:
        """A ``subscriptions/listen`` request; its id is the subscription id."""
        if self.state != "ready":
            raise RuntimeError("subscriptions/listen needs an adopted 2026-07-28 server")
        data = self.revision.listen(self._next_id, notifications, self.meta)
        rid = self._take_id()
        self._pending[rid] = m26.SUBSCRIPTIONS_LISTEN
        return rid, data

    @staticmethod
    def acknowledged(params: Raw) -> tuple[Any, m26.SubscriptionFilter] | None:
        """(subscription id, honoured filter) of an acknowledgement, or None."""
        try:
            ack = _dec_ack.decode(params)
        except PEER_FAULTS:
            return None
        sid = ack._meta.get(m26.SUBSCRIPTION_ID_META) if ack._meta else None
        return sid, ack.notifications

    input_required = staticmethod(input_required)

    def handshake_failed(self) -> None:
        """The initialize exchange failed or timed out: forget it (it is never cancelled)."""
        if self._init_id is not None:
            self._pending.pop(self._init_id, None)
        self.state = "closed"

    def reset(self) -> None:
        """Drop everything for a fresh ``initialize`` (reconnect, session expiry)."""
        self._pending.clear()
        self._init_id = None
        self.revision = self.session_revision
        self.listen_delivers = None
        self.state = "new"

    # ------------------------------------------------------------ requests out

    def _take_id(self) -> int:
        rid = self._next_id
        self._next_id = rid + 1
        return rid

    def request(self, method: str, params: mt.Params | dict[str, Any] | UnsetType = UNSET
                ) -> tuple[int, bytes]:
        """A request's id and bytes; gated by the negotiated capabilities."""
        if self.state != "ready":
            raise RuntimeError(f"{method} before the session is ready (state {self.state})")
        need = _REQUIRES.get(method)
        if need is not None and not need[1](self.capabilities):
            raise HandshakeError.not_allowed(method, need[0])
        rid = self._next_id
        data = self.revision.request(rid, method, params, self.meta, self.meta_json)
        self._next_id = rid + 1
        self._pending[rid] = method
        return rid, data

    def call_tool(self, name_json: bytes, arguments_json: bytes, meta_json: bytes,
                  extra: bytes = b"") -> tuple[int, bytes]:
        """The hot path: a ``tools/call`` from pre-encoded pieces.

        ``name_json`` is the tool name as a JSON string, ``arguments_json`` a
        JSON object, ``meta_json`` the ``_meta`` object; the result is the same
        bytes ``request("tools/call", CallToolParams(...))`` would produce.
        ``extra`` (``,"inputResponses":...``) is appended to the params of an MRTR
        retry.
        """
        if self.state != "ready":
            raise RuntimeError(f"tools/call before the session is ready (state {self.state})")
        if not self.capabilities.tools:
            raise HandshakeError.not_allowed(mt.TOOLS_CALL, "tools")
        rid = self._next_id
        self._next_id = rid + 1
        self._pending[rid] = mt.TOOLS_CALL
        return rid, b"".join((
            b'{"jsonrpc":"2.0","id":', str(rid).encode(), b',"method":"tools/call","params":{"name":',
            name_json, b',"arguments":', arguments_json, b',"_meta":', meta_json, extra, b"}}",
        ))

    def notification(self, method: str, params: Any = UNSET) -> bytes:
        return _enc.encode(Notification(method, params))

    def cancel(self, request_id: int | str, reason: str) -> bytes | None:
        """``notifications/cancelled`` for an abandoned request, or None.

        None when the request is not in flight any more or is ``initialize``
        (which is never cancelled).
        """
        method = self._pending.pop(request_id, None)
        if method is None or method == mt.INITIALIZE:
            return None
        return self.revision.cancel(request_id, reason)

    def forget(self, request_id: int | str) -> None:
        self._pending.pop(request_id, None)

    def pending(self, request_id: int | str) -> bool:
        return request_id in self._pending

    # ------------------------------------------------------------ messages in

    def receive(self, data: bytes | bytearray | memoryview | str) -> list:
        """Events for one inbound body or SSE event (a message or a batch).

        A peer's malformed message is counted in ``garbage`` and dropped: it
        never raises.
        """
        stripped = (bytes(data) if isinstance(data, memoryview) else data).lstrip()
        if not stripped:
            return []
        msgs: Sequence[_In]
        try:
            if stripped[:1] in (b"[", "["):
                msgs = _dec_batch.decode(stripped)
            else:
                msgs = (_dec_one.decode(stripped),)
        except RecursionError as exc:  # nested beyond the decoder's guard
            msgs = self._deep_listing(stripped)
            if not msgs:
                self.garbage += 1
                self.garbled = fault_text(exc)
                return []
        except PEER_FAULTS as exc:
            self.garbage += 1
            self.garbled = fault_text(exc)
            return []
        out: list = []
        for m in msgs:
            self._receive_one(m, out)
        return out

    def take_garbled(self) -> str:
        """Why the last inbound message could not be decoded ("" when none was
        refused since the last call): what a request whose one answer was
        undecodable fails with, instead of "no answer"."""
        reason, self.garbled = self.garbled, ""
        return reason

    def _deep_listing(self, data: bytes | bytearray | str) -> tuple[_In, ...]:
        """A ``tools/list`` answer nested too deeply to decode, cut by
        :func:`~agentd.mcp.client.rules.catalogue.prune_deep` so that admission excludes the
        deep tools and serves the rest; any other message stays refused (a cut
        result would be a silently different one)."""
        pruned = prune_deep(data)
        if pruned is None:
            return ()
        try:
            m = _dec_one.decode(pruned)
        except PEER_FAULTS:
            return ()
        if m.method is not UNSET or m.id is UNSET or m.id is None:
            return ()
        return (m,) if self._pending.get(m.id) == mt.TOOLS_LIST else ()

    def _receive_one(self, m: _In, out: list) -> None:
        method = m.method
        if method is UNSET:  # a response
            rid = m.id
            if rid is UNSET or rid is None:
                self.garbage += 1  # e.g. {"id": null, "error": ...} or a 202-ish body
                return
            sent = self._pending.pop(rid, None)
            if sent is None:
                return  # late answer to a cancelled/abandoned request, or a stray
            if m.error is not UNSET:
                e = m.error
                out.append(Failed(rid, sent, ErrorObject(e.code, e.message, e.data)))
            elif m.result:
                out.append(Resolved(rid, sent, m.result))
            else:
                self.garbage += 1
                out.append(Failed(rid, sent, ErrorObject(
                    INVALID_REQUEST, "response without result or error")))
            return
        rid = m.id
        if rid is UNSET:  # a notification
            if method in _NOTIFIED:
                self._route(method, m.params, out)
            return
        if rid is None:
            self.garbage += 1
            return
        # a request from the server
        if method == mt.PING:
            out.append(Reply(_enc.encode(Response(rid, _EMPTY_RESULT)), method))
        elif method == mt.ROOTS_LIST:
            out.append(Reply(_enc.encode(Response(rid, _ROOTS_RESULT)), method))
        else:  # sampling/createMessage, elicitation/create, anything else: not serviced
            out.append(Reply(_enc.encode(ErrorResponse(rid, ErrorObject(
                METHOD_NOT_FOUND, f"method not found: {method}"))), method))

    def _route(self, method: str, params: Raw, out: list) -> None:
        caps = self.capabilities
        if method == mt.NOTIFICATION_TOOLS_LIST_CHANGED:
            if caps.tools_list_changed:
                out.append(Notified(method, params))
        elif method == mt.NOTIFICATION_RESOURCES_LIST_CHANGED:
            if caps.resources_list_changed:
                out.append(Notified(method, params))
        elif method == mt.NOTIFICATION_RESOURCES_UPDATED:
            if caps.resources_subscribe:
                out.append(Notified(method, params))
        else:
            out.append(Notified(method, params))

    @staticmethod
    def updated_uri(params: Raw) -> str | None:
        """The URI of a ``notifications/resources/updated`` (None if malformed)."""
        try:
            return _dec_uri.decode(params).uri if params else None
        except PEER_FAULTS:
            return None
