"""The private control wire between a parent agentd and a subagent: sans-IO.

Each frame is a 4-byte big-endian length and one JSON-RPC 2.0 message (the
native codec `agentd_native`); the maximum frame is 16 MiB unless configured.
This module turns bytes into typed messages and messages into bytes and keeps
the request/response bookkeeping; it never touches a pipe (the transport is
`agentd.child.channel.Channel`).  The wire is never exposed outward: peers only
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
                   (`HandleState`)
child -> parent
  child/progress   notification `{steps, tokens}`: for the tree token ceiling
  child/spans      notification `SpanBatch`: finished spans for the root to export
                   (only while tracing: `ChildConfig.tracing`)
  tree/spawn       request `SpawnParams` -> `HandleState` | error -32010 (refused)
  tree/send        request `{handle, message}` -> `HandleState`
  tree/status      request `{handle}` -> `HandleState` | error -32011 (unknown)
  tree/cancel      request `{handle}` -> `HandleState`
  io/request       request `IoRequest` (a tagged union: complete | call | read |
                   subscribe | unsubscribe | a2a) -> `IoResult`; the parent
                   performs the child's I/O (agentd.tree.broker) | errors
                   -32014..-32017; a -32016 for a fault of the parent's call
                   carries that `ToolFault` in its data (`IoFault`)
parent -> child (brokered I/O)
  io/updated       notification `{server, uri}`: a resource this child
                   subscribed to changed

Bounds: a frame is at most `max_frame` bytes (16 MiB unless configured) on
both sides, and an answer to `io/request` at most `answer_limit(max_frame)`:
the frame less `ENVELOPE_HEADROOM`, so that what a child makes of it (its
result, wrapped in `RunOutcome`, then in `HandleState` on its parent's wire)
still fits a frame. An answer past that bound is not sent: `ControlSession.fitted`
returns its `Oversize` instead, and the parent answers `IO_OVERSIZE` and fails
that run (agentd.tree.supervisor).

A frame that is oversized, not JSON, not a single JSON-RPC message, a response
to no pending request, or carries params of the wrong shape makes `feed()`
raise `TreeError` (the only error it raises: the peer broke the wire, which
cannot continue): the transport ends the child through the kill ladder.
"""

from __future__ import annotations

import itertools
from types import UnionType
from typing import Any, Final

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from agentd.agent.spawn_tools import HandleArgs, SendArgs
from agentd.agent.subagents import HandleState, SpawnRequest
from agentd.config.model import RunLimits
from agentd.errors import RPCError, ToolFault, TreeError
from agentd.intelligence.base import Completion, Message, ToolDef
from agentd.trajectory.atif import Trajectory
from agentd.wire import codec
from agentd.wire.guard import decode_peer
from agentd.wire.jsonrpc import (
    METHOD_NOT_FOUND,
    ErrorObject,
    ErrorResponse,
    Notification,
    Request,
    Response,
)
from agentd.wire.shapes import Observed, ResourceInfo, ToolEntry
from agentd_native import MAX_FRAME, FrameDecoder, FrameTooLarge, encode_frame

__all__ = [
    "BUSY",
    "ENVELOPE_HEADROOM",
    "IO_CEILING",
    "IO_FAULT",
    "IO_OVERSIZE",
    "IO_SCOPE",
    "IO_UNAVAILABLE",
    "SPAWN_REFUSED",
    "UNKNOWN_HANDLE",
    "Catalogue",
    "ChildConfig",
    "ControlSession",
    "Incoming",
    "IoAnswer",
    "IoCall",
    "IoComplete",
    "IoCompletion",
    "IoDelegate",
    "IoDone",
    "IoFault",
    "IoRead",
    "IoRequest",
    "IoResult",
    "IoSubscribe",
    "IoUnsubscribe",
    "IoUpdated",
    "MessageParams",
    "Oversize",
    "Progress",
    "Reply",
    "RunOutcome",
    "SpawnParams",
    "answer_limit",
    "fault_error",
    "fault_of",
    "io_error",
]

# JSON-RPC error codes private to the control wire.
SPAWN_REFUSED: Final = -32010  # message is the refusal text, "spawn refused: ..."
UNKNOWN_HANDLE: Final = -32011
BUSY: Final = -32012  # a warm session is already running a turn
CHILD_ERROR: Final = -32013  # the child's run raised
# Brokered I/O (io/request): what the parent's broker answers instead of a result.
IO_UNAVAILABLE: Final = -32014  # the intelligence is unavailable (the child exits 5-style)
IO_CEILING: Final = -32015  # the tree's token ledger refused the call (budget_exhausted)
IO_FAULT: Final = -32016  # an MCP protocol/transport fault (never tool output)
IO_SCOPE: Final = -32017  # the server/tool/resource is outside the child's tool_scope
IO_OVERSIZE: Final = -32018  # the answer does not fit the wire (`Oversize`): the run fails

# What an answer to a child leaves of a frame for the envelopes it is wrapped in next
# (a child's result goes up as `RunOutcome`, then to a grandparent as `HandleState`).
ENVELOPE_HEADROOM: Final = 64 * 1024


def answer_limit(max_frame: int) -> int:
    """The most bytes one io/request answer may take on a wire of `max_frame`."""
    return max_frame - ENVELOPE_HEADROOM


ANSWER_FIX: Final = ("ask for less (a smaller page or range) or make the call from the root "
                     "run; --intelligence-max-bytes and --mcp-max-bytes refuse such answers "
                     "at the read")


class Oversize(Struct, frozen=True):
    """A message that was not sent because it does not fit its bound (a return
    value of `ControlSession.fitted`: the caller answers with an error instead)."""

    size: int
    limit: int

    def words(self, what: str, fix: str = ANSWER_FIX) -> str:
        """Why the run fails, naming the bound and what to do about it."""
        return (f"{what} of {self.size} bytes exceeds the {self.limit} bytes a subagent's "
                f"control wire carries (its frame less {ENVELOPE_HEADROOM} bytes of "
                f"envelope), so the subagent's run failed; {fix}")


class Catalogue(Struct, kw_only=True, frozen=True):
    """The MCP side of a brokered child: passed down, never re-listed by the child.
    Its tools and resources are the parent toolbox's own entries, as they are."""

    tools: tuple[ToolEntry, ...] = ()
    resources: tuple[ResourceInfo, ...] = ()
    instructions: dict[str, str] = msgspec.field(default_factory=dict)
    a2a_peers: tuple[str, ...] = ()  # A2A peers in scope: a2a.delegate goes up as IoDelegate


class ChildConfig(RunLimits, kw_only=True, frozen=True):
    """The first frame: what a child needs to run (child/configure params), and
    nothing its parent fixes for every child.

    The run's limits are the root's `RunLimits`, embedded (flat on the wire);
    `token_ceiling` is what is left of the tree's ceiling at spawn time. Every
    child is brokered: its intelligence and MCP calls go up `io/request`, so it
    holds no server spec, no gateway URL, no model name and no secret, only the
    `catalogue` of the servers in its scope (the parent enforces the scope). The
    instruction comes with `child/run`."""

    handle: str
    depth: int
    output_contract: str | None = None
    mode: str = "sync"  # sync | async | warm | detach
    max_frame: int = MAX_FRAME
    # a child logs to its parent's pipe: JSON, which the parent relays (agentd.tree.procs)
    log_format: str = "json"
    log_level: str = "info"
    run_id: str = ""
    tracing: bool = False  # record spans and relay them up (`child/spans`, agentd.obs.trace)
    catalogue: Catalogue | None = None
    # Record the run as an ATIF trajectory and return it in `RunOutcome.trajectory`.
    trajectory: bool = False
    # A served run's: the serving worker's own --instruction, in its system message
    # (agentd.agent.prompt.system_prompt, docs/server.md); None for the others.
    framing: str | None = None


class MessageParams(Struct, frozen=True):
    message: str
    traceparent: str | None = None  # W3C trace context of the spawn (agentd.obs.trace)


class RunOutcome(Struct, kw_only=True):
    """A child's answer to child/run or child/send."""

    status: str  # completed | failed | cancelled | budget_exhausted | deadline
    partial: bool = False
    result: Any = None
    steps: int = 0
    tokens: int = 0
    reason: str | None = None
    # With `ChildConfig.trajectory`: the run's ATIF trajectory (agentd.trajectory),
    # absent from the frame otherwise.
    trajectory: Trajectory | UnsetType = UNSET


class Progress(Struct, frozen=True):
    steps: int = 0
    tokens: int = 0


class SpawnParams(SpawnRequest, kw_only=True, frozen=True):
    """`tree/spawn`: the spawn tool's own request (`SpawnRequest`, declared once
    with the subagent tools) and the asking child's span. `tree/send` and
    `tree/status`/`tree/cancel` take the tools' `SendArgs` and `HandleArgs` as
    they are."""

    traceparent: str | None = None  # the asking child's span (agentd.obs.trace)


class Empty(Struct, frozen=True):
    pass


class SpanRecord(Struct, array_like=True, frozen=True):
    """One finished span of a subagent, relayed for its parent to export."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: str
    start: int
    end: int
    attrs: dict[str, Any]
    error: str | None = None


class SpanBatch(Struct, frozen=True):
    """`child/spans` notification: a subagent's finished spans (only while tracing)."""

    spans: list[SpanRecord]


# --- brokered I/O: a tagged union of what a child may ask its parent to do -------------

class IoComplete(Struct, tag="complete", tag_field="kind", frozen=True):
    """One intelligence call: the parent's provider answers (through the tree's ledger)."""

    messages: list[Message]
    tools: list[ToolDef] = []
    traceparent: str | None = None  # the asking child's span (agentd.obs.trace)


class IoCall(Struct, tag="call", tag_field="kind", frozen=True):
    """tools/call of a catalogue tool by its qualified name."""

    name: str
    arguments: Any = None
    time_limit: float | None = None
    traceparent: str | None = None  # the asking child's span (agentd.obs.trace)


class IoRead(Struct, tag="read", tag_field="kind", frozen=True):
    uri: str
    server: str | None = None


class IoSubscribe(Struct, tag="subscribe", tag_field="kind", frozen=True):
    uri: str
    server: str | None = None


class IoUnsubscribe(Struct, tag="unsubscribe", tag_field="kind", frozen=True):
    uri: str
    server: str | None = None


class IoDelegate(Struct, tag="a2a", tag_field="kind", frozen=True):
    """`a2a.delegate` of a subagent: performed by the root's A2A peers (docs/a2a.md)."""

    peer: str
    message: str
    mode_async: bool = False
    task_id: str | None = None
    context_id: str | None = None


IoRequest = IoComplete | IoCall | IoRead | IoSubscribe | IoUnsubscribe | IoDelegate


class IoCompletion(Struct, tag="completion", tag_field="kind"):
    completion: Completion


class IoDone(Struct, tag="done", tag_field="kind"):
    ok: bool = True


IoResult = IoCompletion | Observed | IoDone  # Observed: a tool result or a resource read


class IoFault(Struct, frozen=True, omit_defaults=True):
    """The `data` of an `IO_FAULT` error: the `ToolFault` the parent's call raised,
    field for field, so the child raises the same fault the root would have
    (its server, its words, whether trying again may help, its code and cause)."""

    server: str
    message: str
    retryable: bool
    code: int | None = None
    method: str = ""
    cause: str = ""


# What the broker answers an io/request with: a result, or the error object.
IoAnswer = IoResult | ErrorObject


def io_error(code: int, message: str) -> ErrorObject:
    """A refusal of an io/request (codes IO_*): the child is answered with it."""
    return ErrorObject(code, message)


def fault_error(exc: ToolFault) -> ErrorObject:
    """A fault of the parent's call as the child's answer: the message the wire
    has always carried, and the fault itself in `data` (`IoFault`)."""
    return ErrorObject(IO_FAULT, str(exc), IoFault(exc.server, exc.message, exc.retryable,
                                                   exc.code, exc.method, exc.cause))


def fault_of(code: int, message: str, data: Any) -> ToolFault:
    """The child's side of `fault_error`: the parent's `ToolFault` again when
    `data` carries one; else (a refusal: out of scope, a replay that diverged) a
    fault of the broker's own, which trying again cannot cure."""
    if code == IO_FAULT and data is not None and data is not UNSET:
        try:
            f = msgspec.convert(data, IoFault)
        except msgspec.ValidationError:
            pass
        else:
            return ToolFault(f.server, f.message, retryable=f.retryable, code=f.code,
                             method=f.method, cause=f.cause)
    return ToolFault("broker", message, retryable=False, code=code)


class IoUpdated(Struct, frozen=True):
    server: str
    uri: str


# Inbound requests/notifications each side accepts, with their params type.
# What msgspec decodes a frame's params or result into: a Struct (or dict), or a
# tagged union of Structs (`IoRequest`, `IoResult`).
Decodable = type | UnionType

_TO_CHILD: Final[dict[str, Decodable]] = {
    "child/configure": ChildConfig,
    "child/run": MessageParams,
    "child/send": MessageParams,
    "child/cancel": Empty,
    "child/shutdown": Empty,
    "child/terminal": HandleState,
    "io/updated": IoUpdated,
}
_TO_PARENT: Final[dict[str, Decodable]] = {
    "child/progress": Progress,
    "child/spans": SpanBatch,
    "tree/spawn": SpawnParams,
    "tree/send": SendArgs,
    "tree/status": HandleArgs,
    "tree/cancel": HandleArgs,
    "io/request": IoRequest,
}
# Result type of each request a side sends (decoded when the answer arrives).
_RESULTS: Final[dict[str, Decodable]] = {
    "child/configure": dict,
    "child/run": RunOutcome,
    "child/send": RunOutcome,
    "child/cancel": dict,
    "child/shutdown": dict,
    "tree/spawn": HandleState,
    "tree/send": HandleState,
    "tree/status": HandleState,
    "tree/cancel": HandleState,
    "io/request": IoResult,
}
_decoders: dict[Decodable, msgspec.json.Decoder] = {}


def _decoder(tp: Decodable) -> msgspec.json.Decoder:
    d = _decoders.get(tp)
    if d is None:
        d = _decoders[tp] = msgspec.json.Decoder(tp)
    return d


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
    malformed raises `TreeError`.
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
        try:
            return encode_frame(codec.encode(msg), self.max_frame)
        except FrameTooLarge as exc:  # nothing sent: the caller's own message is too big
            raise TreeError(f"a control-wire message of {exc.size} bytes exceeds the frame "
                            f"maximum of {exc.limit} bytes (docs/subagents.md, the control "
                            "wire's bounds)") from None

    def request(self, method: str, params: Any = UNSET) -> tuple[int, bytes]:
        """A new request: its id (to match the `Reply`) and its frame."""
        rid = next(self._ids)
        self._pending[rid] = method
        return rid, self._frame(Request(rid, method, params))

    def notification(self, method: str, params: Any = UNSET) -> bytes:
        return self._frame(Notification(method, params))

    def response(self, rid: int | str, result: Any) -> bytes:
        return self._frame(Response(rid, result))

    def fitted(self, rid: int | str, result: Any, limit: int) -> bytes | Oversize:
        """The response's frame, or its `Oversize` when its body is over `limit`
        (at most `max_frame`): an expected outcome for an answer a peer sized."""
        try:
            return encode_frame(codec.encode(Response(rid, result)), min(limit, self.max_frame))
        except FrameTooLarge as exc:
            return Oversize(exc.size, exc.limit)

    def error(self, rid: int | str | None, code: int, message: str,
              data: Any = UNSET) -> bytes:
        return self._frame(ErrorResponse(rid, ErrorObject(code, message, data)))

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
            raise TreeError(
                f"oversized frame: {exc.size} bytes exceeds the maximum of {exc.limit}") from None
        return [ev for body in bodies if (ev := self._message(body)) is not None]

    def _message(self, body: bytes) -> Incoming | Reply | None:
        try:
            msg = codec.decode(body)
        except RPCError as exc:
            raise TreeError(f"malformed frame: {exc.message}") from None
        if isinstance(msg, Response | ErrorResponse):
            rid = msg.id
            if not isinstance(rid, int) or (method := self._pending.pop(rid, None)) is None:
                raise TreeError(f"malformed frame: a response to no request (id {rid!r})")
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
    def _typed(tp: Decodable, raw: Raw | UnsetType, method: str) -> Any:
        if raw is UNSET:
            raw = Raw(b"{}")
        return decode_peer(_decoder(tp).decode, raw,
                           lambda text: TreeError(f"malformed frame: {method}: {text}"))
