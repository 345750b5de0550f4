"""JSON-RPC 2.0 envelopes as msgspec Structs, error codes, and RPCError's renderings.

Outgoing messages carry a Struct / dict / ``msgspec.Raw`` in ``params`` /
``result``; incoming messages (from :func:`agentd.wire.codec.decode`) carry the
undecoded ``msgspec.Raw`` bytes, typed on demand with ``codec.decode_params`` /
``codec.decode_result``.  ``jsonrpc: "2.0"`` is always emitted.
"""

from __future__ import annotations

from typing import Any, Final

from msgspec import UNSET, Struct

from agentd.errors import RPCError

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "JSONRPC_VERSION",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "RESOURCE_NOT_FOUND",
    "ErrorObject",
    "ErrorResponse",
    "Message",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "error_object",
    "error_response",
    "is_subscribe_refusal",
    "resource_not_found",
    "subscribe_refused",
]

JSONRPC_VERSION: Final = "2.0"

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
RESOURCE_NOT_FOUND: Final = -32002  # MCP: resources/read of an unknown URI, data={"uri": ...}

RequestId = int | str


class _Envelope(Struct, kw_only=True, gc=False):
    # kw_only base: lets ``jsonrpc`` have a default while the subclasses'
    # own fields stay positional.  UNSET fields are never emitted.
    jsonrpc: str = JSONRPC_VERSION


class Request(_Envelope):
    id: RequestId
    method: str
    params: Any = UNSET  # Struct | dict | msgspec.Raw | UNSET


class Notification(_Envelope):
    method: str
    params: Any = UNSET  # Struct | dict | msgspec.Raw | UNSET


class Response(_Envelope):
    id: RequestId
    result: Any  # Struct | dict | msgspec.Raw


class ErrorObject(Struct, gc=False):
    code: int
    message: str
    data: Any = UNSET


class ErrorResponse(_Envelope):
    id: RequestId | None  # None encodes as "id": null (id unknown, e.g. parse error)
    error: ErrorObject


Message = Request | Notification | Response | ErrorResponse


def error_object(exc: RPCError) -> ErrorObject:
    """The error object of an :class:`~agentd.errors.RPCError`."""
    return ErrorObject(exc.code, exc.message, exc.data)


def error_response(exc: RPCError) -> ErrorResponse:
    """The error response answering ``exc.id`` with ``exc``."""
    return ErrorResponse(exc.id, ErrorObject(exc.code, exc.message, exc.data))


def resource_not_found(uri: str) -> RPCError:
    """-32002 with ``data.uri`` (MCP: resources/read of a URI the server does not serve)."""
    return RPCError(RESOURCE_NOT_FOUND, "Resource not found", {"uri": uri}, side="local")


def subscribe_refused(uri: str) -> RPCError:
    """-32602 with ``data.uri``: ``resources/subscribe`` of a URI the handler will
    never announce.  A 2025-11-25 session gets it as the answer; a 2026-07-28
    listen stream leaves the URI out of its acknowledgement instead (it tells
    this refusal by :func:`is_subscribe_refusal`)."""
    return RPCError(INVALID_PARAMS, _NOT_SUBSCRIBABLE, {"uri": uri}, side="local")


def is_subscribe_refusal(exc: RPCError) -> bool:
    """Whether `exc` is :func:`subscribe_refused`'s answer (and not another -32602)."""
    return exc.side == "local" and exc.code == INVALID_PARAMS and exc.message == _NOT_SUBSCRIBABLE


_NOT_SUBSCRIBABLE: Final = "Invalid params: not a subscribable resource"
