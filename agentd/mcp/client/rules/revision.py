"""The client's protocol revision, as an object chosen once per negotiated peer.

agentd speaks two families of MCP with a server, chosen by the handshake
(:meth:`agentd.mcp.client.connection.Connection.handshake`): the session revisions
(2025-11-25 and its three older revisions: ``initialize``, ``Mcp-Session-Id``,
``ping``, ``resources/subscribe`` over the session's GET stream) and the
stateless one (2026-07-28: ``server/discover``, a ``_meta`` on every request,
the standard headers, ``subscriptions/listen``, ``input_required``).

Every rule that differs between them is answered here, by :data:`SESSION` or
:data:`STATELESS`, held by the :class:`~agentd.mcp.client.rules.session.ClientSession`
from the handshake on; the session, the connection and the client's parts ask
it instead of testing which revision they are at.  Sans-IO: bytes and data in,
bytes and data out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec
from msgspec import UNSET, Raw, UnsetType

from agentd.errors import HandshakeError
from agentd.mcp.client.rules.call_meta import ttl_ms
from agentd.mcp.client.rules.negotiate import renegotiate_for_updates
from agentd.mcp.client.rules.param_headers import encode_value, param_headers
from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt
from agentd.wire.guard import PEER_FAULTS
from agentd.wire.jsonrpc import Notification, Request
from agentd.wire.shapes import ToolInfo

__all__ = ["LEGACY_SSE", "SESSION", "STATELESS", "Channel", "InputRequired", "Revision", "input_required"]

Channel = Literal["subscribe", "listen"]
"""What carries ``notifications/resources/updated``: ``subscribe`` (the
session's ``resources/subscribe`` and its GET stream) or ``listen`` (the
2026-07-28 ``subscriptions/listen`` stream)."""

Headers = tuple[tuple[str, str], ...]
_enc = msgspec.json.Encoder()


class _InputRequest(msgspec.Struct, gc=False):
    method: str = ""
    params: Raw = Raw()


class _InputRequiredIn(msgspec.Struct, gc=False):
    resultType: str = m26.RESULT_COMPLETE
    inputRequests: dict[str, _InputRequest] | None = None
    requestState: str | None = None


_dec_input_required = msgspec.json.Decoder(_InputRequiredIn)


class InputRequired(msgspec.Struct, gc=False):
    """How agentd answers an ``input_required`` result (MRTR, 2026-07-28).

    ``responses`` is the ``inputResponses`` object to send back (JSON bytes;
    empty when the server asked for nothing), ``state`` the ``requestState``
    to echo byte for byte (None: send none), ``refused`` the input requests
    agentd cannot answer at all (sampling, unknown kinds): the call is then
    abandoned instead of retried.
    """

    responses: bytes
    state: str | None
    refused: list[str]


def input_required(result: Raw) -> InputRequired | None:
    """None for a final result; else how to answer the server's input requests.

    agentd declares no client capabilities, so a conforming server never
    asks; if one does anyway: ``roots/list`` gets an empty list (agentd
    exposes no filesystem scope), ``elicitation/create`` is declined
    (``{"action": "decline"}``), and ``sampling/createMessage`` (which has
    no "declined" answer) or anything unknown is refused, so the caller
    abandons the request instead of retrying it.
    """
    if b'"input_required"' not in bytes(memoryview(result)):
        return None
    try:
        r = _dec_input_required.decode(result)
    except PEER_FAULTS:
        return None
    if r.resultType != m26.RESULT_INPUT_REQUIRED:
        return None
    answers: dict[str, Any] = {}
    refused: list[str] = []
    for key, req in (r.inputRequests or {}).items():
        if req.method == mt.ROOTS_LIST:
            answers[key] = {"roots": []}
        elif req.method == "elicitation/create":
            answers[key] = {"action": "decline"}
        else:
            refused.append(f"{key}: {req.method[:100]}")
    return InputRequired(_enc.encode(answers) if answers else b"", r.requestState, refused)


class Revision:
    """The questions the client's code asks of a revision, with the session
    revisions' answers; :class:`_Stateless` overrides what 2026-07-28 changes.

    ``name`` is the family's label in logs and on :attr:`MCPClient.era`;
    ``channel`` what carries resource updates; ``resumable`` and
    ``error_bodies`` how the transport reads an answer (an SSE stream that
    may be resumed with ``Last-Event-ID``; a 4xx whose JSON-RPC error body is
    the answer); ``pings`` whether the idle pinger sends ``ping`` (2026-07-28
    has none: failed requests and the listen stream tell); ``probe`` the
    request that proves a server alive; ``param_headers`` whether a tool's
    ``x-mcp-header`` declarations count (SEP-2243); ``renegotiable`` whether a
    subscription may move the server to a session revision
    (:mod:`agentd.mcp.client.rules.negotiate`); ``discovers`` whether the
    handshake asks ``server/discover`` first, and ``offered`` the version
    ``initialize`` offers (None: the session's own choice).
    """

    __slots__ = ()
    name: str = "session"
    channel: Channel = "subscribe"
    resumable: bool = True
    error_bodies: bool = False
    pings: bool = True
    probe: str = mt.PING
    param_headers: bool = False
    renegotiable: bool = False
    discovers: bool = True
    offered: str | None = None

    def headers(self, method: str, name: str | None = None) -> Headers:
        """The standard request headers of one request (none before 2026-07-28)."""
        return ()

    def name_header(self, tool_name: str) -> str:
        """A listed tool's ``Mcp-Name`` value, encoded once at listing ("" when unsent)."""
        return ""

    def call_headers(self, tool: ToolInfo | None, name: str, args: Mapping[str, Any]
                     ) -> Headers | list[tuple[str, str]]:
        """The headers of one ``tools/call`` send."""
        return ()

    def call_meta(self, revision_meta: bytes, run_meta: bytes) -> bytes:
        """The ``_meta`` a ``tools/call`` carries: the run's id alone, or the
        revision's reserved keys beside it."""
        return run_meta

    def ttl_ms(self, raw: Raw) -> int | None:
        """A list page's ``ttlMs`` (None: the revision has none)."""
        return None

    def input_required(self, raw: Raw) -> InputRequired | None:
        """How to answer an ``input_required`` result (None: a final result)."""
        return None

    def relists_on(self, code: int | None) -> bool:
        """Whether a ``tools/call`` refused with ``code`` is re-listed and retried
        once (2026-07-28's header mismatch: the tool's schema may have changed)."""
        return False

    def needs_renegotiation(self, *, delivers: bool | None, listen_unsupported: bool,
                            legacy_refused: bool) -> bool:
        """Whether a subscription the run needs moves the server to 2025-11-25."""
        return False

    def request(self, rid: int, method: str, params: mt.Params | dict[str, Any] | UnsetType,
                meta: Mapping[str, Any], meta_json: bytes) -> bytes:
        """The bytes of one request (``meta``: the ``_meta`` a stateless request carries)."""
        return _enc.encode(Request(rid, method, params))

    def cancel(self, rid: int | str, reason: str) -> bytes | None:
        """``notifications/cancelled`` for an abandoned request, or None."""
        return _enc.encode(Notification(
            mt.NOTIFICATION_CANCELLED, mt.CancelledParams(requestId=rid, reason=reason)))

    def listen(self, rid: int, notifications: m26.SubscriptionFilter,
               meta: Mapping[str, Any]) -> bytes:
        """A ``subscriptions/listen`` request (2026-07-28 only)."""
        raise RuntimeError("subscriptions/listen needs an adopted 2026-07-28 server")


class _Stateless(Revision):
    """2026-07-28 (see :class:`Revision` for what each answer means)."""

    __slots__ = ()
    name = "stateless"
    channel: Channel = "listen"
    resumable = False
    error_bodies = True
    pings = False
    probe = m26.SERVER_DISCOVER
    param_headers = True
    renegotiable = True

    def headers(self, method: str, name: str | None = None) -> Headers:
        if name is not None and method in m26.NAME_BEARING_METHODS:
            return (("Mcp-Method", method), ("Mcp-Name", encode_value(name)))
        return (("Mcp-Method", method),)

    def name_header(self, tool_name: str) -> str:
        return encode_value(tool_name)

    def call_headers(self, tool: ToolInfo | None, name: str, args: Mapping[str, Any]
                     ) -> list[tuple[str, str]]:
        headers = [("Mcp-Method", mt.TOOLS_CALL),
                   ("Mcp-Name", tool.name_header if tool is not None else encode_value(name))]
        if tool is not None and tool.param_headers:
            headers.extend(param_headers(tool.param_headers, args))
        return headers

    def call_meta(self, revision_meta: bytes, run_meta: bytes) -> bytes:
        return revision_meta

    def ttl_ms(self, raw: Raw) -> int | None:
        return ttl_ms(raw)

    def input_required(self, raw: Raw) -> InputRequired | None:
        return input_required(raw)

    def relists_on(self, code: int | None) -> bool:
        return code == m26.HEADER_MISMATCH

    def needs_renegotiation(self, *, delivers: bool | None, listen_unsupported: bool,
                            legacy_refused: bool) -> bool:
        return renegotiate_for_updates(stateless=True, delivers=delivers,
                                       listen_unsupported=listen_unsupported,
                                       legacy_refused=legacy_refused)

    def request(self, rid: int, method: str, params: mt.Params | dict[str, Any] | UnsetType,
                meta: Mapping[str, Any], meta_json: bytes) -> bytes:
        if method in m26.REMOVED_METHODS:
            raise HandshakeError.not_allowed(method, "a revision before 2026-07-28")
        if params is UNSET or (not isinstance(params, dict) and params._meta is UNSET):
            # the common case, spliced: the params object plus the one _meta
            body = b"{}" if params is UNSET else _enc.encode(params)
            return b"".join((
                b'{"jsonrpc":"2.0","id":', str(rid).encode(), b',"method":',
                _enc.encode(method), b',"params":',
                body[:-1], b',"_meta":' if len(body) > 2 else b'"_meta":', meta_json, b"}}"))
        p = dict(params) if isinstance(params, dict) else msgspec.to_builtins(params)
        p["_meta"] = {**meta, **p["_meta"]} if isinstance(p.get("_meta"), dict) else meta
        return _enc.encode(Request(rid, method, p))

    def cancel(self, rid: int | str, reason: str) -> bytes | None:
        return None  # over HTTP, closing the answer stream IS the cancel

    def listen(self, rid: int, notifications: m26.SubscriptionFilter,
               meta: Mapping[str, Any]) -> bytes:
        return _enc.encode(Request(rid, m26.SUBSCRIPTIONS_LISTEN, {
            "notifications": notifications, "_meta": meta}))


class _LegacySSE(Revision):
    """The HTTP+SSE transport of 2024-11-05 (:mod:`agentd.mcp.client.legacy_sse`): a
    session revision whose server is declared so (``transport = "sse"``); it has
    no ``server/discover`` and is offered 2024-11-05, the revision that defines it."""

    __slots__ = ()
    name = "legacy-sse"
    resumable = False
    discovers = False
    offered = "2024-11-05"


SESSION: Final[Revision] = Revision()
LEGACY_SSE: Final[Revision] = _LegacySSE()
STATELESS: Final[Revision] = _Stateless()
