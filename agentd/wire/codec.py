"""The one JSON-RPC/MCP codec: bytes <-> messages.

* :func:`encode` / ``encode_*`` turn messages into bytes with one shared
  ``msgspec.json.Encoder``.
* :func:`decode` reads one JSON-RPC message into an envelope whose
  ``params`` / ``result`` stay undecoded (``msgspec.Raw``), and classifies it
  by key presence.  Every malformed input raises :class:`RPCError` with the
  JSON-RPC code to answer it with (and the request id when it could be read).
* :func:`decode_params` / :func:`decode_result` type a payload on demand.

Batches (a JSON array at the top level) are rejected with -32600: MCP
2025-06-18 removed JSON-RPC batching and agentd speaks no older batch dialect.
See ``docs/messages.md``.
"""

from __future__ import annotations

from typing import Any, Final, Generic, Literal, TypeVar

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from agentd.errors import RPCError

from . import mcp_types as t
from .guard import PEER_FAULTS, fault_text
from .jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    ErrorObject,
    ErrorResponse,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
)

__all__ = [
    "PARAMS_TYPES",
    "RESULT_TYPES",
    "decode",
    "decode_params",
    "decode_response",
    "decode_result",
    "decoder_for",
    "encode",
    "encode_error",
    "encode_notification",
    "encode_request",
    "encode_response",
    "known_method",
]

T = TypeVar("T")

_encoder: Final = msgspec.json.Encoder()
_encode: Final = _encoder.encode


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------


def encode(msg: Any) -> bytes:
    """Serialise one message (or any Struct / builtin) to JSON bytes."""
    return _encode(msg)


def encode_request(id: RequestId, method: str, params: Any = UNSET) -> bytes:
    """``{"id", "method", "params"?, "jsonrpc":"2.0"}`` -- params: Struct, dict, Raw or UNSET."""
    return _encode(Request(id, method, params))


def encode_notification(method: str, params: Any = UNSET) -> bytes:
    return _encode(Notification(method, params))


def encode_response(id: RequestId, result: Any) -> bytes:
    return _encode(Response(id, result))


def encode_error(id: RequestId | None, code: int, message: str, data: Any = UNSET) -> bytes:
    return _encode(ErrorResponse(id, ErrorObject(code, message, data)))


# --------------------------------------------------------------------------
# Envelope decoding
# --------------------------------------------------------------------------


class _In(Struct, gc=False):
    """Every JSON-RPC key, all optional; payloads stay raw.

    ``jsonrpc``/``id``/``method``/``error`` are ``Any`` so that a wrong type is
    reported as -32600 *with* whatever id could be read, rather than failing the
    whole decode.
    """

    jsonrpc: Any = UNSET
    id: Any = UNSET
    method: Any = UNSET
    params: Raw | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: Any = UNSET


_in_decoder: Final = msgspec.json.Decoder(_In)
_decode_in: Final = _in_decoder.decode


def _valid_id(v: Any) -> RequestId | None:
    tp = type(v)  # bool is an int subclass: compare exact types
    return v if tp is int or tp is str else None


def _json_kind(v: Any) -> str:
    if v is None:
        return "null"
    if type(v) is bool:
        return "a boolean"
    if type(v) is dict:
        return "an object"
    if type(v) is list:
        return "an array"
    if type(v) is str:
        return "a string"
    return "a number"


def _parse_text(e: BaseException) -> str:
    text = fault_text(e)
    return "JSON nested too deeply" if text == "nested too deeply" else text


def _invalid(message: str, id_: Any = None) -> RPCError:
    return RPCError(INVALID_REQUEST, message, id=_valid_id(id_), side="local")


def decode(data: bytes | bytearray | memoryview | str) -> Message:
    """Decode one JSON-RPC 2.0 message.

    Request (method + id) / Notification (method, no id) / Response (result) /
    ErrorResponse (error).  ``params`` and ``result`` are ``msgspec.Raw`` (or
    ``UNSET`` when absent).  Raises :class:`RPCError`: -32700 when the
    bytes are not JSON, -32600 when the JSON is not a valid single message.
    """
    try:
        m = _decode_in(data)
    except msgspec.ValidationError:
        # Not an object.  msgspec stops at the first token, so first make sure
        # the whole input is JSON at all (a truncated batch is a parse error).
        try:
            value = msgspec.json.decode(data)
        except PEER_FAULTS as e:
            raise RPCError(PARSE_ERROR, f"Parse error: {_parse_text(e)}", side="local") from None
        if type(value) is list:
            raise RPCError(
                INVALID_REQUEST,
                "Invalid Request: JSON-RPC batches are not supported (removed in MCP 2025-06-18)",
                side="local",
            ) from None
        raise RPCError(
            INVALID_REQUEST, f"Invalid Request: expected a JSON object, got {_json_kind(value)}",
            side="local"
        ) from None
    except PEER_FAULTS as e:  # incl. msgspec's own nesting guard: hostile input, not a bug
        raise RPCError(PARSE_ERROR, f"Parse error: {_parse_text(e)}", side="local") from None

    id_ = m.id
    if m.jsonrpc != "2.0":
        raise _invalid('Invalid Request: "jsonrpc" must be "2.0"', id_)
    method = m.method
    if method is not UNSET:
        if type(method) is not str:
            raise _invalid('Invalid Request: "method" must be a string', id_)
        if m.result is not UNSET or m.error is not UNSET:
            raise _invalid('Invalid Request: "method" together with "result"/"error"', id_)
        if id_ is UNSET:
            return Notification(method, m.params)
        tp = type(id_)
        if tp is int or tp is str:
            return Request(id_, method, m.params)
        raise _invalid(
            f'Invalid Request: "id" must be a string or an integer, got {_json_kind(id_)}'
        )
    if m.result is not UNSET:
        if m.error is not UNSET:
            raise _invalid('Invalid Request: both "result" and "error"', id_)
        tp = type(id_)
        if tp is int or tp is str:
            return Response(id_, m.result)
        raise _invalid(
            f'Invalid Request: response "id" must be a string or an integer, got {_json_kind(id_)}'
        )
    err = m.error
    if err is not UNSET:
        if id_ is UNSET:
            id_ = None  # 2025-11-25 allows an error response without id
        elif id_ is not None and _valid_id(id_) is None:
            raise _invalid(
                f'Invalid Request: error "id" must be a string, an integer or null, got {_json_kind(id_)}'
            )
        if (
            type(err) is not dict
            or type(err.get("code")) is not int
            or type(err.get("message")) is not str
        ):
            raise _invalid(
                'Invalid Request: "error" must be an object with integer "code" and string "message"',
                id_,
            )
        return ErrorResponse(id_, ErrorObject(err["code"], err["message"], err.get("data", UNSET)))
    raise _invalid('Invalid Request: missing "method"', id_)


# --------------------------------------------------------------------------
# Typed payloads
# --------------------------------------------------------------------------

_decoders: dict[Any, msgspec.json.Decoder] = {}


def decoder_for(type_: Any) -> msgspec.json.Decoder:
    """A cached ``msgspec.json.Decoder`` for ``type_`` (with the MCP ``dec_hook``)."""
    d = _decoders.get(type_)
    if d is None:
        d = _decoders[type_] = msgspec.json.Decoder(type_, dec_hook=t.dec_hook)
    return d


# method -> (params type, params required?)
PARAMS_TYPES: Final[dict[str, tuple[type, bool]]] = {
    # requests agentd serves or answers
    t.INITIALIZE: (t.InitializeParams, True),
    t.PING: (t.RequestParams, False),
    t.TOOLS_LIST: (t.PaginatedParams, False),
    t.TOOLS_CALL: (t.CallToolParams, True),
    t.RESOURCES_LIST: (t.PaginatedParams, False),
    t.RESOURCES_TEMPLATES_LIST: (t.PaginatedParams, False),
    t.RESOURCES_READ: (t.ReadResourceParams, True),
    t.RESOURCES_SUBSCRIBE: (t.SubscribeParams, True),
    t.RESOURCES_UNSUBSCRIBE: (t.UnsubscribeParams, True),
    t.ROOTS_LIST: (t.RequestParams, False),
    # notifications
    t.NOTIFICATION_INITIALIZED: (t.NotificationParams, False),
    t.NOTIFICATION_CANCELLED: (t.CancelledParams, True),
    t.NOTIFICATION_PROGRESS: (t.ProgressParams, True),
    t.NOTIFICATION_MESSAGE: (t.LoggingMessageParams, True),
    t.NOTIFICATION_RESOURCES_UPDATED: (t.ResourceUpdatedParams, True),
    t.NOTIFICATION_RESOURCES_LIST_CHANGED: (t.NotificationParams, False),
    t.NOTIFICATION_TOOLS_LIST_CHANGED: (t.NotificationParams, False),
    t.NOTIFICATION_PROMPTS_LIST_CHANGED: (t.NotificationParams, False),
    t.NOTIFICATION_ROOTS_LIST_CHANGED: (t.NotificationParams, False),
}
"""Methods whose params agentd can type.  Anything else is unknown to agentd:
a request for it is answered -32601, a notification is ignored."""

RESULT_TYPES: Final[dict[str, type]] = {
    t.INITIALIZE: t.InitializeResult,
    t.PING: t.EmptyResult,
    t.TOOLS_LIST: t.ListToolsResult,
    t.TOOLS_CALL: t.CallToolResult,
    t.RESOURCES_LIST: t.ListResourcesResult,
    t.RESOURCES_TEMPLATES_LIST: t.ListResourceTemplatesResult,
    t.RESOURCES_READ: t.ReadResourceResult,
    t.RESOURCES_SUBSCRIBE: t.EmptyResult,
    t.RESOURCES_UNSUBSCRIBE: t.EmptyResult,
    t.ROOTS_LIST: t.ListRootsResult,
}
"""The result type of each request method agentd sends or answers."""

_PARAMS: Final[dict[str, tuple[type, bool, msgspec.json.Decoder]]] = {
    m: (tp, req, decoder_for(tp)) for m, (tp, req) in PARAMS_TYPES.items()
}
for _tp in RESULT_TYPES.values():
    decoder_for(_tp)


def known_method(method: str) -> bool:
    """True when :func:`decode_params` can type this method's params."""
    return method in PARAMS_TYPES


def _is_null(raw: Raw) -> bool:
    return len(raw) == 4 and bytes(raw) == b"null"


def _where(e: Exception, root: str) -> str:
    return str(e).replace("`$", f"`{root}")


def decode_params(method: str, raw: Raw | UnsetType, id: RequestId | None = None) -> Any:
    """Type the ``params`` of a request/notification for ``method``.

    Absent (or ``null``) params of a method whose params are optional decode to
    the params type's empty instance.  Raises ``RPCError`` -32602 (naming
    the problem, e.g. "Object missing required field `name`") when they do not
    match, -32601 for a method not in :data:`PARAMS_TYPES`.  ``id`` is copied
    into the error so ``err.to_response()`` answers the right request.
    """
    entry = _PARAMS.get(method)
    if entry is None:
        raise RPCError(METHOD_NOT_FOUND, f"Method not found: {method}", id=id, side="local")
    tp, required, dec = entry
    if raw is UNSET or _is_null(raw):
        if required:
            raise RPCError(
                INVALID_PARAMS, f"Invalid params for {method}: params are required", id=id,
                side="local"
            )
        return tp()
    try:
        return dec.decode(raw)
    except msgspec.ValidationError as e:
        raise RPCError(
            INVALID_PARAMS, f"Invalid params for {method}: {_where(e, 'params')}", id=id,
            side="local"
        ) from None
    except PEER_FAULTS as e:  # the envelope parsed; params hold e.g. invalid UTF-8, deep nesting
        raise RPCError(
            INVALID_PARAMS, f"Invalid params for {method}: {fault_text(e)}", id=id, side="local"
        ) from None


# -- results: fast typed path, lenient fallback for unknown content blocks ----


class _LenientCallToolResult(Struct, gc=False):
    content: list[t.AnyContent]
    isError: bool = False
    structuredContent: Any = UNSET
    _meta: t.Meta | UnsetType = UNSET


def _lenient_hook(type_: type, obj: Any) -> Any:
    if type_ is t.AnyContent:
        if type(obj) is not dict:
            raise ValueError(f"Expected `object`, got `{type(obj).__name__}`")
        kind = obj.get("type")
        cls = t.CONTENT_TYPES.get(kind) if type(kind) is str else None
        if cls is None:
            if type(kind) is not str:
                raise ValueError("content block without a string `type`")
            return t.UnknownContent(obj)
        return t._convert(obj, cls)
    return t.dec_hook(type_, obj)


_lenient_call_tool: Final = msgspec.json.Decoder(_LenientCallToolResult, dec_hook=_lenient_hook)


def decode_result(raw: Raw | bytes, type_: type[T], id: RequestId | None = None) -> T:
    """Type a response's ``result`` as ``type_`` (e.g. ``RESULT_TYPES[method]``).

    Raises a local :class:`~agentd.errors.RPCError` (code -32603, never
    sent on the wire) naming the problem when the peer's result is malformed.
    A ``CallToolResult`` holding content blocks of a type this revision does not
    know still decodes: those blocks become :class:`UnknownContent`.
    """
    try:
        return decoder_for(type_).decode(raw)
    except msgspec.ValidationError as exc:
        err: Exception = exc
    except PEER_FAULTS as exc:  # not JSON, nested beyond the guard, a number out of range
        raise RPCError(INTERNAL_ERROR, f"Malformed result: {fault_text(exc)}", id=id,
                       side="local") from None
    if type_ is t.CallToolResult:
        # Slow path: maybe only an unknown content-block type failed.
        try:
            r = _lenient_call_tool.decode(raw)
        except msgspec.ValidationError as exc:
            err = exc  # names the real problem (unknown types are accepted here)
        except PEER_FAULTS as exc:
            raise RPCError(INTERNAL_ERROR, f"Malformed result: {fault_text(exc)}", id=id,
                           side="local") from None
        else:
            # the lenient blocks as they came (unknown types kept); type_ is CallToolResult here
            return t.CallToolResult(r.content, r.isError, r.structuredContent,  # type: ignore[arg-type,return-value]
                                    r._meta)
    name = type_.__name__ if isinstance(type_, type) else repr(type_)  # or a typing form
    raise RPCError(INTERNAL_ERROR, f"Malformed {name} result: {_where(err, 'result')}", id=id,
                   side="local")


# -- one-pass typed response decoding (the client's hot path) ----------------


class _TypedIn(Struct, Generic[T], gc=False):
    # Strict where the general path is lenient: any deviation fails the decode
    # and sends the message down the general path, which explains it.
    jsonrpc: Literal["2.0"]
    id: int | str | UnsetType = UNSET
    method: Any = UNSET
    result: T | UnsetType = UNSET
    error: Any = UNSET


_typed_decoders: dict[Any, Any] = {}


def decode_response(data: bytes | bytearray | memoryview | str, result_type: type[T]) -> Message:
    """Decode a message expected to be the response to a request whose result
    type is ``result_type``, in one pass.

    A well-formed success response comes back as ``Response`` whose ``result``
    is already a ``result_type`` instance (not ``Raw``).  Anything else -- an
    error response, a request/notification (e.g. on an SSE stream), malformed
    input, a malformed result -- takes the general path and ends exactly as
    ``decode`` (+ ``decode_result`` for a ``Response``) would: the same
    messages, the same local ``RPCError``.
    """
    dec = _typed_decoders.get(result_type)
    if dec is None:
        dec = _typed_decoders[result_type] = msgspec.json.Decoder(
            _TypedIn[result_type],  # type: ignore[valid-type]  # parametrised at run time, per type
            dec_hook=t.dec_hook
        ).decode
    try:
        m = dec(data)
    except PEER_FAULTS:  # incl. ValidationError and deep nesting: the general path explains
        pass
    else:
        rid = m.id
        if m.method is UNSET and m.error is UNSET and m.result is not UNSET \
                and isinstance(rid, (int, str)):
            return Response(rid, m.result)
    msg = decode(data)
    if type(msg) is Response:
        return Response(msg.id, decode_result(msg.result, result_type, msg.id))
    return msg
