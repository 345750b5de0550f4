"""The MCP 2026-07-28 server rules, sans-IO: a request (+ headers) in, bytes or a dispatch out.

A 2026-07-28 request is self-contained: no ``initialize``, no session.  Its
``params._meta`` carries the protocol version and the client's capabilities
(and, SHOULD, its clientInfo); over HTTP the method, version and name are
mirrored into headers.  This module decides, without touching a socket,
awaiting, reading a clock or logging (the driver,
``agentd.mcp.server.handler.ServerSession``, does those for both revisions;
``agentd.mcp.server.rules.revision`` chooses these rules for a request):

* :func:`classify` -- the validation ladder, first failure wins: ``_meta`` is an
  object with both required keys (else -32602); the mirrored headers equal the
  body (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name`` after the
  base64-sentinel decoding; a routing header given twice; else -32020); the
  version is one we serve (else -32022 with ``data.supported``/``requested``;
  :func:`check_version` alone for a notification, which has no ``_meta``);
* :func:`check_param_headers` -- ``Mcp-Param-*`` headers of a tool whose input
  schema declares ``x-mcp-header`` must be present exactly when the argument is
  and equal it (else -32020);
* :func:`route` -- the 2025-11-25 method rules (``agentd.mcp.server.rules.sessions``)
  minus the removed methods (``initialize``, ``ping``, ``logging/setLevel``,
  ``resources/subscribe``/``unsubscribe`` -> -32601), plus ``server/discover``;
  a tool needing a client capability the envelope lacks is -32021.  It answers
  the result, or a :class:`~agentd.mcp.server.rules.sessions.Dispatch` for the handler;
* :func:`answer` / :func:`refuse` / :func:`internal_error` -- the response
  bytes and their HTTP status: every result gets ``resultType: "complete"``
  and ``_meta`` serverInfo, list/read results ``ttlMs`` and ``cacheScope``
  (the handler's ``cache_hint``); resource-not-found becomes -32602 with
  ``data.uri``; ``ERROR_HTTP_STATUS`` gives 400 for the envelope/param errors,
  404 for an unknown method;
* :class:`Listen` -- one ``subscriptions/listen`` stream's rules (held by
  the :class:`~agentd.mcp.server.handler.ServerSession` its ``listening`` factory
  builds, the one connection type): which URIs to
  subscribe through the handler (:meth:`~Listen.requested`), which of
  them were honoured (:meth:`~Listen.subscribed`), the acknowledgement
  (always the first frame), every ``notifications/resources/updated`` tagged
  with the subscription id (the listen request's id), only for what it holds,
  and when nothing it holds can fire any more (then the transport ends the
  stream with :meth:`~Listen.result`).

What the rules read of the server is its catalogue (:class:`Catalogue`),
never its functions.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import deque
from typing import Any, Final

import msgspec
import orjson
from msgspec import UNSET, Raw

from agentd.errors import RPCError
from agentd.mcp.server.rules.sessions import ROUTES as RULES
from agentd.mcp.server.rules.sessions import Catalogue, SessionState
from agentd.wire import codec
from agentd.wire import mcp2026 as m
from agentd.wire import mcp_types as t
from agentd.wire.guard import PEER_FAULTS, fault_text, loads_peer
from agentd.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    Request,
)
from agentd.wire.mcp2026 import missing_client_capability

__all__ = [
    "LIMIT_EXCEEDED",
    "SUPPORTED_VERSIONS",
    "Envelope",
    "Listen",
    "answer",
    "carries_envelope",
    "check_param_headers",
    "check_version",
    "classify",
    "complete",
    "decode_header_value",
    "discover",
    "http_status",
    "internal_error",
    "listen_params",
    "meta_free_params",
    "param_header_decls",
    "refuse",
    "route",
    "served_capabilities",
]

SUPPORTED_VERSIONS: Final = [*m.MODERN_PROTOCOL_VERSIONS, *m.LEGACY_PROTOCOL_VERSIONS]
"""Every revision this engine answers (named in -32022 and ``server/discover``)."""

LIMIT_EXCEEDED: Final = -32000
"""agentd's code (implementation-defined range) for a refused listen stream over its cap."""

_SENTINEL: Final = re.compile(r"^=\?base64\?(.*)\?=$", re.DOTALL)
_HEADER_SAFE: Final = re.compile(r"^[\x20-\x7E]*$")
_ROUTING_HEADERS: Final = (m.MCP_PROTOCOL_VERSION_HEADER, m.MCP_METHOD_HEADER, m.MCP_NAME_HEADER)


def http_status(code: int | None) -> int:
    return 200 if code is None else m.ERROR_HTTP_STATUS.get(code, 200)


# --------------------------------------------------------------------------
# The envelope ladder
# --------------------------------------------------------------------------


class Envelope(msgspec.Struct, frozen=True, gc=False):
    """What a valid 2026-07-28 request declared about itself."""

    version: str
    capabilities: dict[str, Any]
    client_info: t.Implementation | None = None
    traceparent: str | None = None
    name: Any = None  # params.name / params.uri of a name-bearing method (Mcp-Name)


class _Probe(msgspec.Struct, gc=False):
    """One decode of the params for what the ladder reads (other fields skipped)."""

    _meta: Any = UNSET
    name: Any = None
    uri: Any = None


_probe_decoder: Final = msgspec.json.Decoder(_Probe)
_impl_convert: Final = t.Implementation
_EMPTY_PROBE: Final = _Probe()


def _probe(req: Request) -> _Probe:
    if req.params is UNSET:
        return _EMPTY_PROBE
    try:
        return _probe_decoder.decode(req.params)
    except msgspec.ValidationError:  # params not an object
        return _EMPTY_PROBE
    except PEER_FAULTS as exc:  # nested beyond the guard, not UTF-8
        raise RPCError(INVALID_PARAMS, f"Invalid params: {fault_text(exc)}",
                       id=req.id, side="local") from None


def _raw_meta(req: Request) -> Any:
    return _probe(req)._meta


def carries_envelope(req: Request) -> bool:
    """Whether a request carries a 2026-07-28-style envelope (``_meta`` protocolVersion)."""
    meta = _raw_meta(req)
    return isinstance(meta, dict) and m.PROTOCOL_VERSION_META in meta


def decode_header_value(value: str | None) -> str | None:
    """``=?base64?...?=`` -> its UTF-8 text; other values verbatim; a corrupt sentinel -> None."""
    if value is None or not value.startswith("=?base64?"):
        return value
    match = _SENTINEL.match(value)
    if match is None:
        return value
    payload = match.group(1)
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") != payload:
            return None
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def _mismatch(message: str, rid: Any) -> RPCError:
    return RPCError(m.HEADER_MISMATCH, f"Header mismatch: {message}", id=rid, side="local")


def classify(req: Request, headers: Any = None) -> Envelope:
    """Run the ladder over one request; raises the first rung's RPCError.

    ``headers``: a case-insensitive multi-mapping with ``getall`` (aiohttp's
    ``CIMultiDictProxy``), or None off HTTP (the header rung is skipped)."""
    rid = req.id
    probe = _probe(req)
    meta = probe._meta
    key = m.NAME_BEARING_METHODS.get(req.method)
    body_name = (probe.uri if key == "uri" else probe.name) if key is not None else None
    if not isinstance(meta, dict):
        raise RPCError(INVALID_PARAMS, "params._meta must be an object carrying "
                       f"{m.PROTOCOL_VERSION_META!r} and {m.CLIENT_CAPABILITIES_META!r}",
                       id=rid, side="local")
    missing = [k for k in (m.PROTOCOL_VERSION_META, m.CLIENT_CAPABILITIES_META) if k not in meta]
    if missing:
        raise RPCError(INVALID_PARAMS, "params._meta is missing the required key(s): "
                       + ", ".join(missing), id=rid, side="local")
    version = meta[m.PROTOCOL_VERSION_META]
    if headers is not None:
        for name in _ROUTING_HEADERS:
            if len(headers.getall(name, ())) > 1:
                raise _mismatch(f"{name} appears more than once", rid)
        if headers.get(m.MCP_PROTOCOL_VERSION_HEADER) != version:
            raise _mismatch("MCP-Protocol-Version header does not match "
                            f"_meta {m.PROTOCOL_VERSION_META}", rid)
        if headers.get(m.MCP_METHOD_HEADER) != req.method:
            raise _mismatch("Mcp-Method header does not match the request method", rid)
        if body_name is not None and \
                decode_header_value(headers.get(m.MCP_NAME_HEADER)) != body_name:
            raise _mismatch(f"Mcp-Name header does not match params.{key}", rid)
    if not isinstance(version, str):
        raise RPCError(INVALID_PARAMS, f"_meta {m.PROTOCOL_VERSION_META} must be a string",
                       id=rid, side="local")
    check_version(version, rid)
    caps = meta[m.CLIENT_CAPABILITIES_META]
    if not isinstance(caps, dict):
        raise RPCError(INVALID_PARAMS, f"_meta {m.CLIENT_CAPABILITIES_META} must be an "
                       "object", id=rid, side="local")
    info_raw = meta.get(m.CLIENT_INFO_META)
    info = None
    if info_raw is not None:
        try:
            info = msgspec.convert(info_raw, _impl_convert)
        except PEER_FAULTS as exc:
            raise RPCError(INVALID_PARAMS, f"_meta {m.CLIENT_INFO_META}: "
                           f"{fault_text(exc)}", id=rid, side="local") from None
    tp = meta.get("traceparent")
    return Envelope(version=version, capabilities=caps, client_info=info,
                    traceparent=tp if isinstance(tp, str) else None, name=body_name)


def check_version(version: str | None, rid: Any = None) -> None:
    """Raise -32022 (``data.supported``/``requested``) unless ``version`` is a
    2026-07-28 revision we serve."""
    if version not in m.MODERN_PROTOCOL_VERSIONS:
        raise RPCError(m.UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                       m.UnsupportedVersionData(supported=SUPPORTED_VERSIONS,
                                                requested=version), id=rid, side="local")


def meta_free_params(req: Request) -> dict[str, Any]:
    """The request's params as a dict (``{}`` when absent or not an object; -32602
    when they cannot be decoded)."""
    if req.params is UNSET:
        return {}
    out = loads_peer(bytes(req.params), lambda text: RPCError(
        INVALID_PARAMS, f"Invalid params: {text}", id=req.id, side="local"))
    return out if isinstance(out, dict) else {}


# --------------------------------------------------------------------------
# Mcp-Param-* (x-mcp-header) validation
# --------------------------------------------------------------------------


def _annotated(schema: Any) -> dict[tuple[str, ...], str] | None:
    """Property path -> header token for every ``x-mcp-header`` reachable by a pure
    ``properties`` chain; None when the declarations are invalid (conforming
    clients drop such a tool and send no headers, so nothing is validated)."""
    out: dict[tuple[str, ...], str] = {}
    seen: set[str] = set()
    stack: list[tuple[tuple[str, ...], Any]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        token = node.get("x-mcp-header")
        if token is not None:
            if not path or not isinstance(token, str) or not token or \
                    node.get("type") not in ("string", "integer", "boolean") or \
                    token.lower() in seen or not re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+",
                                                              token):
                return None
            seen.add(token.lower())
            out[path] = token
        props = node.get("properties")
        if isinstance(props, dict):
            stack.extend(((*path, k), v) for k, v in props.items())
    if _count_annotations(schema) != len(out):
        return None  # an annotation off the properties chain: the tool is invalid
    return out


def _count_annotations(node: Any) -> int:
    n = 0
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            n += "x-mcp-header" in x
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return n


def _render(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return None


_DECLS: Final[dict[int, tuple[Any, dict[tuple[str, ...], str] | None]]] = {}


def param_header_decls(schema: Any) -> dict[tuple[str, ...], str] | None:
    """The (valid) ``x-mcp-header`` declarations of an input schema, memoised per
    schema object (tool schemas are registered once and never mutated)."""
    if not isinstance(schema, dict):
        return None
    hit = _DECLS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    decl = _annotated(schema) or None
    if len(_DECLS) >= 4096:
        _DECLS.clear()
    _DECLS[id(schema)] = (schema, decl)
    return decl


def check_param_headers(schema: Any, arguments: dict[str, Any], headers: Any) -> None:
    """Raise -32020 unless each declared ``Mcp-Param-{token}`` agrees with its argument."""
    if headers is None:
        return
    decl = param_header_decls(schema)
    if not decl:
        return
    for path, token in decl.items():
        name = m.MCP_PARAM_HEADER_PREFIX + token
        values = headers.getall(name, ())
        if len(values) > 1:
            raise _mismatch(f"{name} appears more than once", None)
        node: Any = arguments
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        rendered = _render(node) if node is not None else None
        if not values:
            if rendered is not None:
                raise _mismatch(f"{name} is missing but the argument is present", None)
            continue
        if rendered is None:
            raise _mismatch(f"{name} is present but the argument is absent", None)
        raw = values[0]
        if not _HEADER_SAFE.match(raw):
            raise _mismatch(f"{name} carries invalid characters", None)
        decoded = decode_header_value(raw)
        if decoded is None:
            raise _mismatch(f"{name} carries a malformed base64 value", None)
        if decoded != rendered:
            try:  # integers compare numerically (42 == 42.0)
                if not isinstance(node, bool) and isinstance(node, int | float) and \
                        float(decoded) == float(node):
                    continue
            except ValueError:
                pass
            raise _mismatch(f"{name} does not match the argument", None)


# --------------------------------------------------------------------------
# Requests: route, answer, refuse
# --------------------------------------------------------------------------


def served_capabilities(handler: Catalogue) -> t.ServerCapabilities:
    """The 2026-07-28 capabilities: the same set the handler declares at 2025-11-25.

    ``resources.subscribe`` still tells a client that per-URI updates are on offer
    (at 2026-07-28 through ``subscriptions/listen``'s ``resourceSubscriptions``), as
    the official SDK's servers say too; the self-MCP's declared set (spec §2.1) is
    one set on both revisions.
    """
    return handler.capabilities


def _info_json(handler: Catalogue) -> bytes:
    return handler.server_info_raw()


def complete(handler: Catalogue, result: Any, cache: tuple[int, str] | None) -> Raw:
    """``result`` with ``resultType: "complete"``, ``_meta`` serverInfo and the cache hint."""
    body = bytes(result) if type(result) is Raw else codec.encode(result)
    info = _info_json(handler)
    head = b'{"resultType":"complete"'
    if cache is not None:
        head += b',"ttlMs":%d,"cacheScope":"%s"' % (cache[0], cache[1].encode())
    if b'"_meta"' in body or b'"resultType"' in body:  # merge by value (rare)
        obj = orjson.loads(body)
        meta = obj.get("_meta") if isinstance(obj.get("_meta"), dict) else {}
        meta.setdefault(m.SERVER_INFO_META, orjson.loads(info))
        obj["_meta"] = meta
        obj["resultType"] = m.RESULT_COMPLETE
        if cache is not None:
            obj["ttlMs"], obj["cacheScope"] = cache
        return Raw(orjson.dumps(obj))
    head += b',"_meta":{"' + m.SERVER_INFO_META.encode() + b'":' + info + b'}'
    rest = body[1:].lstrip()
    return Raw(head + (rest if rest[:1] == b"}" else b"," + rest))


_CACHEABLE: Final = frozenset({t.TOOLS_LIST, t.RESOURCES_LIST, t.RESOURCES_TEMPLATES_LIST,
                               t.RESOURCES_READ})
_ROUTES: Final = {k: v for k, v in RULES.items() if k not in m.REMOVED_METHODS}


def discover(handler: Catalogue) -> m.DiscoverResult:
    """The ``server/discover`` result: versions, capabilities, serverInfo (complete as built)."""
    ttl, scope = handler.cache_hint(m.SERVER_DISCOVER, None)
    return m.DiscoverResult(supportedVersions=SUPPORTED_VERSIONS,
                            capabilities=served_capabilities(handler), ttlMs=ttl,
                            cacheScope=scope, resultType=m.RESULT_COMPLETE,
                            instructions=handler.instructions if handler.instructions else UNSET,
                            _meta={m.SERVER_INFO_META: handler.server_info})


def route(s: SessionState, req: Request, env: Envelope, headers: Any = None) -> Any:
    """The result of one classified request on a per-request session ``s``, or a
    :class:`~agentd.mcp.server.rules.sessions.Dispatch` for the handler; raises the
    ``RPCError`` the rules answer (``headers``: as for :func:`classify`)."""
    method = req.method
    h: Catalogue = s.handler
    if method == m.SERVER_DISCOVER:
        return discover(h)
    rule = _ROUTES.get(method)
    if rule is None:
        hint = " (removed at 2026-07-28)" if method in m.REMOVED_METHODS else ""
        raise RPCError(METHOD_NOT_FOUND, f"Method not found: {method}{hint}", side="local")
    if method == t.TOOLS_CALL and isinstance(env.name, str):
        name = env.name
        required = h.tool_requirements(name)
        if required:
            lacking = {k: v for k, v in required.items() if k not in env.capabilities}
            if lacking:
                raise missing_client_capability(lacking)
        if headers is not None and param_header_decls(h.tool_input_schema(name)):
            args = meta_free_params(req).get("arguments")
            check_param_headers(h.tool_input_schema(name),
                                args if isinstance(args, dict) else {}, headers)
    return rule(s, req)


def answer(handler: Catalogue, req: Request, env: Envelope,
           result: Any) -> tuple[bytes, int]:
    """The response to ``req`` carrying ``result`` (what :func:`route` or the
    handler produced), and its HTTP status."""
    method = req.method
    if method == m.SERVER_DISCOVER:
        return codec.encode_response(req.id, result), 200
    cache = handler.cache_hint(method, env.name if method == t.RESOURCES_READ else None) \
        if method in _CACHEABLE else None
    return codec.encode_response(req.id, complete(handler, result, cache)), 200


def refuse(request_id: Any, exc: RPCError) -> tuple[bytes, int]:
    """The error response for what the rules or the handler refused, and its HTTP status."""
    code, data = exc.code, exc.data
    if code == RESOURCE_NOT_FOUND:
        code = INVALID_PARAMS  # 2026-07-28: resource not found is -32602, uri in data
    return codec.encode_error(request_id, code, exc.message, data), http_status(code)


def internal_error(request_id: Any) -> tuple[bytes, int]:
    """What a client sees of a handler bug (the driver logs the detail)."""
    return SessionState.internal_error(request_id), http_status(INTERNAL_ERROR)


# --------------------------------------------------------------------------
# subscriptions/listen
# --------------------------------------------------------------------------


class Listen:
    """One ``subscriptions/listen`` stream's rules: the state a
    :class:`~agentd.mcp.server.handler.ServerSession` holds when its ``listening``
    factory built it (one connection type: the session is what the handler and
    the hub see, this is what makes it a stream).

    Frames queue in ``frames`` (bounded: ``overflowed`` is set instead of
    growing) until the transport drains them; nothing is queued before the
    acknowledgement is.  Opening is three steps, the middle one the driver's:
    :meth:`requested` names the URIs to subscribe, the driver runs the
    handler's ``subscribe`` for each and reports it with :meth:`subscribed`,
    and :meth:`acknowledge` answers the honoured subset (an update that fired
    during a subscribe -- a run already terminal -- is queued *behind* the
    acknowledgement, which the transport writes first).
    """

    __slots__ = ("_held", "_mark", "_tag", "catalogue", "frames", "honoured", "max_frames",
                 "overflowed", "persistent", "request_id")

    def __init__(self, catalogue: Catalogue, request_id: Any, *, max_frames: int = 256) -> None:
        self.catalogue = catalogue
        self.request_id = request_id
        self.frames: deque[bytes] = deque()
        self.max_frames = max_frames
        self.overflowed = False
        self.honoured = m.SubscriptionFilter()
        self.persistent = False  # holds a subscription that is never consumed
        self._tag = {m.SUBSCRIPTION_ID_META: request_id}
        self._held: list[str] = []
        self._mark = 0

    # -- frames ----------------------------------------------------------
    def queue(self, data: bytes) -> None:
        """Queue one frame, or mark the stream overflowed (a client that stopped reading)."""
        if len(self.frames) >= self.max_frames:
            self.overflowed = True
        else:
            self.frames.append(data)

    def updated(self, uri: str) -> bytes:
        """``notifications/resources/updated {uri}`` tagged with this stream's subscription id."""
        return codec.encode_notification(
            t.NOTIFICATION_RESOURCES_UPDATED, m.ResourceUpdatedParams(uri=uri, _meta=self._tag))

    # -- opening ---------------------------------------------------------
    def requested(self, params: m.ListenParams) -> list[str]:
        """The URIs to subscribe through the handler, de-duplicated, in order
        (none when the server offers no subscriptions)."""
        want = params.notifications
        self._held = []
        self._mark = len(self.frames)
        if want.resourceSubscriptions and self.catalogue.can_subscribe:
            return list(dict.fromkeys(want.resourceSubscriptions))
        return []

    def subscribed(self, uri: str, holds: bool) -> None:
        """The handler's ``subscribe`` of ``uri`` ran: honoured when the stream now
        ``holds`` it, or its update already fired."""
        if holds or len(self.frames) > self._mark:
            self._held.append(uri)
            if self.catalogue.subscription_is_persistent(uri):
                self.persistent = True
        self._mark = len(self.frames)

    def acknowledge(self) -> bytes:
        """The acknowledgement: the honoured subset, tagged (the stream's first frame)."""
        held = self._held
        self.honoured = m.SubscriptionFilter(resourceSubscriptions=held if held else UNSET)
        return codec.encode_notification(m.NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED,
                                         m.AcknowledgedParams(notifications=self.honoured,
                                                              _meta=self._tag))

    # -- the stream ------------------------------------------------------
    def exhausted(self, holding: bool) -> bool:
        """Nothing the stream holds can fire again: no persistent subscription, none
        ``holding`` (every update consumed) and nothing queued."""
        return not self.persistent and not holding and not self.frames

    def result(self) -> bytes:
        """The response that ends the stream gracefully."""
        return codec.encode_response(self.request_id, m.ListenResult(
            _meta={m.SUBSCRIPTION_ID_META: self.request_id,
                   m.SERVER_INFO_META: self.catalogue.server_info},
            resultType=m.RESULT_COMPLETE))


_listen_decoder: Final = msgspec.json.Decoder(m.ListenParams)


def listen_params(req: Request) -> m.ListenParams:
    """Decode ``subscriptions/listen`` params (-32602 when malformed)."""
    if req.params is UNSET:
        raise RPCError(INVALID_PARAMS, "subscriptions/listen requires params", id=req.id,
                       side="local")
    try:
        return _listen_decoder.decode(req.params)
    except PEER_FAULTS as exc:
        raise RPCError(INVALID_PARAMS, "Invalid params for subscriptions/listen: "
                       f"{fault_text(exc)}", id=req.id, side="local") from None
