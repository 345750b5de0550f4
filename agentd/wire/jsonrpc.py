"""JSON-RPC 2.0 envelopes as msgspec Structs, error codes, and ProtocolError.

Outgoing messages carry a Struct / dict / ``msgspec.Raw`` in ``params`` /
``result``; incoming messages (from :func:`agentd.wire.codec.decode`) carry the
undecoded ``msgspec.Raw`` bytes, typed on demand with ``codec.decode_params`` /
``codec.decode_result``.  ``jsonrpc: "2.0"`` is always emitted.
"""

from __future__ import annotations

from typing import Any, Final

from msgspec import UNSET, Struct

from agentd.errors import PeerError

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
    "ProtocolError",
    "Request",
    "RequestId",
    "Response",
    "ResultDecodeError",
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


class ProtocolError(PeerError):
    """A JSON-RPC level fault, carrying everything needed to answer it.

    ``id`` is the offending request's id when it could be read, else ``None``.
    """

    def __init__(
        self,
        code: int,
        message: str,
        data: Any = UNSET,
        id: RequestId | None = None,
    ) -> None:
        super().__init__(code, message, data)
        self.id = id

    def to_error(self) -> ErrorObject:
        return ErrorObject(self.code, self.message, self.data)

    def to_response(self) -> ErrorResponse:
        return ErrorResponse(self.id, ErrorObject(self.code, self.message, self.data))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, message={self.message!r}, id={self.id!r})"

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class ResultDecodeError(ProtocolError):
    """A peer's *response* did not match the result schema of its method.

    Raised by ``codec.decode_result``.  It is a peer protocol violation, not a
    tool failure: classify it (abort the call), never hand it to the model.
    Its code is ``INTERNAL_ERROR`` (-32603) for logging; nothing is ever sent
    back for it (a response is never answered).
    """

    def __init__(self, message: str, id: RequestId | None = None, data: Any = UNSET) -> None:
        super().__init__(INTERNAL_ERROR, message, data, id)
