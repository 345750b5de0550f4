"""The private control wire between a parent agentd and a subagent: sans-IO.

Each frame is a 4-byte big-endian length and one JSON-RPC 2.0 message (the
native codec `agentd_native`); the maximum frame is 16 MiB unless configured.
This module turns bytes into typed messages and messages into bytes and keeps
the request/response bookkeeping; it never touches a pipe (the transport is
`agentd.tree.procs.Channel`).  The wire is never exposed outward: peers only
ever see the `subagent.*` MCP tools.

Methods (docs/subagents.md has the whole table):

parent -> child
  child/configure  request, the first frame: `ChildConfig`; answered `{pid}`
                   before the child imports its runtime
  child/run        request `{message}`: run the instruction; answered `RunOutcome`
  child/send       request `{message}`: another turn of a warm session
  child/cancel     request: cancel the current run (its child/run answers
                   `cancelled`); answered `{}`
  child/shutdown   request: exit now; answered `{}`
  child/terminal   notification: one of the child's own subagents ended
                   (`HandleBody`)
child -> parent
  child/progress   notification `{steps, tokens}`: for the tree token ceiling
  tree/spawn       request `SpawnParams` -> `HandleBody` | error -32010 (refused)
  tree/send        request `{handle, message}` -> `HandleBody`
  tree/status      request `{handle}` -> `HandleBody` | error -32011 (unknown)
  tree/cancel      request `{handle}` -> `HandleBody`

A frame that is oversized, not JSON, not a single JSON-RPC message, a response
to no pending request, or carries params of the wrong shape is a
`ControlProtocolError`: the transport ends the child through the kill ladder.
"""

from __future__ import annotations

import itertools
from typing import Any, Final

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from agentd.config import ServerSpec
from agentd.tree.api import HandleState
from agentd.wire import codec
from agentd.wire.jsonrpc import (
    METHOD_NOT_FOUND,
    ErrorObject,
    ErrorResponse,
    Notification,
    ProtocolError,
    Request,
    Response,
)
from agentd_native import MAX_FRAME, FrameDecoder, FrameTooLarge, encode_frame

__all__ = [
    "BUSY",
    "PROTOCOL",
    "SPAWN_REFUSED",
    "UNKNOWN_HANDLE",
    "ChildConfig",
    "ControlProtocolError",
    "ControlSession",
    "HandleBody",
    "HandleParams",
    "Incoming",
    "MessageParams",
    "Progress",
    "Reply",
    "RunOutcome",
    "SendParams",
    "SpawnParams",
    "TurnState",
]

PROTOCOL: Final = 1

# JSON-RPC error codes private to the control wire.
SPAWN_REFUSED: Final = -32010  # message is the refusal text, "spawn refused: ..."
UNKNOWN_HANDLE: Final = -32011
BUSY: Final = -32012  # a warm session is already running a turn
CHILD_ERROR: Final = -32013  # the child's run raised


class ChildConfig(Struct, kw_only=True, frozen=True):
    """The first frame: everything a child needs to run (child/configure params)."""

    handle: str
    depth: int
    instruction: str
    output_contract: str | None = None
    mode: str = "sync"  # sync | async | warm | detach
    tool_scope: tuple[str, ...] = ()
    mcp: tuple[ServerSpec, ...] = ()  # the declared servers in scope (headers unresolved)
    intelligence: str | None = None
    model: str | None = None
    max_steps: int = 50
    deadline: float | None = None
    token_budget: int | None = None  # what is left of the tree's token ceiling
    max_depth: int = 4
    max_children: int = 16
    max_subagents: int = 256
    observation_bytes: int = 64 * 1024
    init_timeout: float = 10.0
    ping_interval: float = 30.0
    drain_timeout: float = 25.0
    max_frame: int = MAX_FRAME
    log_format: str = "json"
    log_level: str = "info"
    run_id: str = ""
    secrets_dir: str = "/run/secrets/agentd"
    protocol: int = PROTOCOL


class MessageParams(Struct, frozen=True):
    message: str


class RunOutcome(Struct, kw_only=True):
    """A child's answer to child/run or child/send."""

    status: str  # completed | failed | cancelled | budget_exhausted | deadline
    partial: bool = False
    result: Any = None
    steps: int = 0
    tokens: int = 0
    reason: str | None = None


class Progress(Struct, frozen=True):
    steps: int = 0
    tokens: int = 0


class SpawnParams(Struct, kw_only=True, frozen=True):
    instruction: str
    output_contract: str | None = None
    tool_scope: tuple[str, ...] | None = None
    mode: str = "sync"


class HandleParams(Struct, frozen=True):
    handle: str


class SendParams(Struct, frozen=True):
    handle: str
    message: str


class HandleBody(Struct, kw_only=True):
    """A `HandleState` on the wire (running or terminal)."""

    handle: str
    status: str
    partial: bool = False
    result: Any = None


class TurnState(HandleState):
    """A warm session's answer to `send`: still running, but carrying the turn's result."""

    def body(self) -> dict[str, Any]:
        return {"handle": self.handle, "status": self.status, "done": self.done,
                "partial": self.partial, "result": self.result}



class Empty(Struct, frozen=True):
    pass


# Inbound requests/notifications each side accepts, with their params type.
_TO_CHILD: Final[dict[str, type]] = {
    "child/configure": ChildConfig,
    "child/run": MessageParams,
    "child/send": MessageParams,
    "child/cancel": Empty,
    "child/shutdown": Empty,
    "child/terminal": HandleBody,
}
_TO_PARENT: Final[dict[str, type]] = {
    "child/progress": Progress,
    "tree/spawn": SpawnParams,
    "tree/send": SendParams,
    "tree/status": HandleParams,
    "tree/cancel": HandleParams,
}
# Result type of each request a side sends (decoded when the answer arrives).
_RESULTS: Final[dict[str, type]] = {
    "child/configure": dict,
    "child/run": RunOutcome,
    "child/send": RunOutcome,
    "child/cancel": dict,
    "child/shutdown": dict,
    "tree/spawn": HandleBody,
    "tree/send": HandleBody,
    "tree/status": HandleBody,
    "tree/cancel": HandleBody,
}
_decoders: dict[type, msgspec.json.Decoder] = {}


def _decoder(tp: type) -> msgspec.json.Decoder:
    d = _decoders.get(tp)
    if d is None:
        d = _decoders[tp] = msgspec.json.Decoder(tp)
    return d


class ControlProtocolError(Exception):
    """The peer broke the control wire; the connection cannot continue."""


class Incoming(Struct):
    """A request (id set) or notification (id None) from the peer, params typed."""

    method: str
    params: Any
    id: int | str | None = None


class Reply(Struct):
    """The answer to one of our requests: `result` typed, or `error`."""

    id: int
    method: str
    result: Any = None
    error: ErrorObject | None = None


class ControlSession:
    """One end of a control wire: feed it bytes, get events; ask it for bytes to send.

    `role` is "parent" (talks to a child) or "child".  `feed()` returns a list
    of `Incoming` and `Reply`; an inbound request for an unknown method is
    answered -32601 by the session itself (queued in `outbox`), anything else
    malformed raises `ControlProtocolError`.
    """

    def __init__(self, role: str, *, max_frame: int = MAX_FRAME) -> None:
        if role not in ("parent", "child"):
            raise ValueError(role)
        self.role = role
        self.max_frame = max_frame
        self._inbound = _TO_PARENT if role == "parent" else _TO_CHILD
        self._decoder = FrameDecoder(max_frame)
        self._ids = itertools.count(1)
        self._pending: dict[int, str] = {}
        self.outbox: list[bytes] = []  # frames the session itself must send (error answers)

    # ---------------------------------------------------------------- output
    def _frame(self, msg: Any) -> bytes:
        return encode_frame(codec.encode(msg), self.max_frame)

    def request(self, method: str, params: Any = UNSET) -> tuple[int, bytes]:
        """A new request: its id (to match the `Reply`) and its frame."""
        rid = next(self._ids)
        self._pending[rid] = method
        return rid, self._frame(Request(rid, method, params))

    def notification(self, method: str, params: Any = UNSET) -> bytes:
        return self._frame(Notification(method, params))

    def response(self, rid: int | str, result: Any) -> bytes:
        return self._frame(Response(rid, result))

    def error(self, rid: int | str | None, code: int, message: str) -> bytes:
        return self._frame(ErrorResponse(rid, ErrorObject(code, message)))

    def forget(self, rid: int) -> None:
        """Stop expecting an answer (the caller gave up); a late one is ignored."""
        if rid in self._pending:
            self._pending[rid] = ""

    @property
    def pending(self) -> int:
        return sum(1 for m in self._pending.values() if m)

    # ----------------------------------------------------------------- input
    def feed(self, data: bytes) -> list[Incoming | Reply]:
        try:
            bodies = self._decoder.feed(data)
        except FrameTooLarge as exc:
            raise ControlProtocolError(
                f"oversized frame: {exc.size} bytes exceeds the maximum of {exc.limit}") from None
        return [ev for body in bodies if (ev := self._message(body)) is not None]

    def _message(self, body: bytes) -> Incoming | Reply | None:
        try:
            msg = codec.decode(body)
        except ProtocolError as exc:
            raise ControlProtocolError(f"malformed frame: {exc.message}") from None
        if isinstance(msg, Response | ErrorResponse):
            rid = msg.id
            method = self._pending.pop(rid, None) if isinstance(rid, int) else None
            if method is None:
                raise ControlProtocolError(f"malformed frame: a response to no request (id {rid!r})")
            if not method:  # forgotten
                return None
            if isinstance(msg, ErrorResponse):
                return Reply(rid, method, error=msg.error)
            return Reply(rid, method, result=self._typed(_RESULTS[method], msg.result, method))
        tp = self._inbound.get(msg.method)
        if tp is None:
            if isinstance(msg, Request):
                self.outbox.append(self.error(msg.id, METHOD_NOT_FOUND,
                                              f"Method not found: {msg.method}"))
            return None
        params = self._typed(tp, msg.params, msg.method)
        return Incoming(msg.method, params, msg.id if isinstance(msg, Request) else None)

    @staticmethod
    def _typed(tp: type, raw: Raw | UnsetType, method: str) -> Any:
        if raw is UNSET:
            raw = Raw(b"{}")
        try:
            return _decoder(tp).decode(raw)
        except msgspec.ValidationError as exc:
            raise ControlProtocolError(f"malformed frame: {method}: {exc}") from None
