"""THE fault policy of agentd's MCP calls: one table, one ``classify``, applied once.

A *fault* is anything that is not an answer from the tool: a transport failure,
an HTTP status, a top-level JSON-RPC ``error``, a server the client gave up.
(A ``result`` with ``isError: true`` is not a fault: it is an observation.)

Every request -- a tool call, a read, a subscription, a list, a ping; the
root's and every subagent's (the broker calls the same client) -- passes
through :class:`agentd.mcp.client.request_loop.RequestLoop`, the one place this policy is applied.  There
:func:`classify` turns each fault into a :class:`Decision`:

``resend``
    send the same request again now (a fresh JSON-RPC id).  Only when that
    cannot run an operation twice: the request is idempotent, or the fault
    proves the request was not processed (never sent, session unknown, HTTP
    429/502/503/504, -32022).  A request is idempotent when its method is
    (:data:`IDEMPOTENT_METHODS`), or when it is a ``tools/call`` of a tool its
    server declares idempotent (:func:`idempotent_tool`: ``idempotentHint`` or
    ``readOnlyHint``) -- the same rule decides whether a journaled call that
    was in flight at a crash is sent again (docs/faults.md).  At most ``RetryPolicy.max_attempts`` sends in
    all, one sleep before each re-send: the server's ``Retry-After`` when its
    answer carried one, else ``RetryPolicy.backoff``.  Nothing above the
    client re-sends a request: the toolbox, the agent loop, the broker and the
    reactive daemon only read the outcome.
``reconnect``
    the connection is suspect: reconnect (or initialize again).
``retryable``
    reported on the :class:`~agentd.errors.ToolFault` the client raises when it
    gives up (a later, new call may succeed).
``cause``
    what the run does with that ``ToolFault`` (its ``cause`` field): an abort
    cause (:data:`ABORT_CAUSES`) means the server cannot be used any more --
    a required server ends the run (:class:`RequiredServerLost`, exit 1), an
    optional one leaves the catalogue; any other cause is a notice for the
    model and the run goes on.  :func:`kind` reads it for the loggers.

The table of every fault, with what the run does, is docs/faults.md; the
rules below are that table, row by row.

Nothing here touches a socket; the sleep is the policy's (injectable).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

from agentd.errors import MCPError, RPCError, ToolFault
from agentd.exitcodes import ExitCode
from agentd.wire.guard import PEER_FAULTS
from agentd.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RESOURCE_NOT_FOUND,
)
from agentd.wire.mcp2026 import UNSUPPORTED_PROTOCOL_VERSION

__all__ = [
    "ABORT_CAUSES",
    "IDEMPOTENT_METHODS",
    "TABLE",
    "Cause",
    "Decision",
    "HTTPStatusError",
    "RPCError",
    "RequiredServerLost",
    "RetryPolicy",
    "SessionExpired",
    "TransportError",
    "classify",
    "idempotent_tool",
    "kind",
    "no_answer",
    "parse_retry_after",
    "resource_missing",
]

IDEMPOTENT_METHODS: Final = frozenset({
    "ping", "tools/list", "resources/list", "resources/templates/list", "resources/read",
    "resources/subscribe", "resources/unsubscribe", "prompts/list",
})


def idempotent_tool(annotations: Mapping[str, Any]) -> bool:
    """Whether a ``tools/call`` of the tool whose listed ``annotations`` these are
    may be sent twice: THE rule, for the request loop's re-sends and for a
    journaled call in flight at a crash alike.

    True when its server declares it ``idempotentHint: true`` (calling it again
    with the same arguments has no further effect) or ``readOnlyHint: true``
    (it has no effect on its environment at all; MCP 2025-11-25, ToolAnnotations).
    Only a literal ``true`` counts; an absent hint is the spec's default,
    false.  Hints are untrusted server text, but this one is the server's word
    about its own tool: a false one can only make that server run its own tool
    twice, which it said was harmless.  Nothing else is ever trusted from it.
    """
    return annotations.get("idempotentHint") is True or annotations.get("readOnlyHint") is True


# The causes a given-up ToolFault carries when the server cannot be used any
# more: "stale" (missed pings) and "gone" (the client gave the connection up),
# "refused" (credentials or certificate refused, or the server contradicts its
# own catalogue), "unreachable" (no connection within the attempts and the wait).
ABORT_CAUSES: Final = frozenset({"stale", "gone", "refused", "unreachable"})

_NOT_PROCESSED_STATUSES: Final = frozenset({429, 502, 503, 504})
_REFUSED_STATUSES: Final = frozenset({401, 403})
_FATAL_RPC: Final = frozenset({PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS,
                               RESOURCE_NOT_FOUND})
_TLS_MARKERS: Final = ("certificate verify failed", "certificate_verify_failed",
                       "sslcertverificationerror", "certificate has expired",
                       "hostname mismatch")


class TransportError(MCPError):
    """The HTTP exchange failed. ``sent`` is False when the request provably
    never reached the server (e.g. connection refused).

    ``limit`` names the byte bound the server crossed (docs/security.md; "" for
    any other failure) and ``size`` what the unit had reached: its stream was
    dropped at the bound.  Such a fault is never re-sent (the same server would
    send the same flood again) and needs no reconnect (the session is fine)."""

    def __init__(self, message: str, *, sent: bool, limit: str = "", size: int = 0) -> None:
        super().__init__(message)
        self.sent = sent if not limit else True
        self.limit = limit
        self.size = size


class SessionExpired(MCPError):
    """The server does not know our ``Mcp-Session-Id``: initialize again.

    HTTP 404, or a 400 whose body says the session is unknown
    (:func:`agentd.mcp.client.rules.negotiate.unknown_session`); ``status`` says which."""

    def __init__(self, message: str, *, status: int = 404) -> None:
        super().__init__(message)
        self.status = status


class HTTPStatusError(MCPError):
    """An HTTP error status.  ``retry_after``: the server's ``Retry-After`` in
    seconds, parsed once where the answer was read (:func:`parse_retry_after`)."""

    def __init__(self, status: int, body: str = "", *, retry_after: float | None = None,
                 hint: str = "") -> None:  # hint: what fixes it (agentd.mcp.client.http_hints)
        super().__init__(f"HTTP {status}" + (f": {body}" if body else "")
                         + (f": {hint}" if hint else ""))
        self.status = status
        self.retry_after = retry_after


class RequiredServerLost(MCPError):
    """A required server failed, so the run cannot go on.

    ``handshake``: it failed its handshake -- exit 6 (``mcp.required_failed``),
    before the intelligence is called (spec §1.3); else it met an abort cause
    after it -- exit 1 (``mcp.required_lost``), the result naming the server and
    the fault.  ``what`` names the kind of server (an A2A peer's card is the
    same contract)."""

    event = "mcp.required_lost"

    def __init__(self, server: str, fault: str, *, handshake: bool = False,
                 what: str = "MCP server") -> None:
        super().__init__(f"required {what} {server!r} failed: {fault}")
        self.server = server
        self.fault = fault
        self.handshake = handshake
        if handshake:
            self.exit_code = ExitCode.MCP_REQUIRED
            self.event = "mcp.required_failed"


RETRY_AFTER_CAP: Final = 30.0  # seconds: a longer Retry-After is waited this long at most
_RETRY_AFTER_MAX_CHARS: Final = 64  # an HTTP-date is 29 characters


def parse_retry_after(value: str | None, *, cap: float = RETRY_AFTER_CAP,
                      now: float | None = None) -> float | None:
    """``Retry-After`` (RFC 9110 §10.2.3) as seconds to wait, in ``[0, cap]``.

    Delta-seconds or an HTTP-date (``now``: the wall clock, injectable); None
    when absent or unreadable.  The one parser of that header (the MCP client
    and the model gateway both call it): a peer's value never raises, however
    large (``1e999``, ``nan``, a date in year 99999999999) -- it is clamped
    or ignored.
    """
    if not value:
        return None
    value = value.strip()[:_RETRY_AFTER_MAX_CHARS]
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
            seconds = when.timestamp() - (time.time() if now is None else now)
        except (*PEER_FAULTS, IndexError):
            return None
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), cap)


Cause = Literal["", "timeout", "closed", "missing", "limit", "stale", "gone", "refused",
                "unreachable"]
"""What a given-up request's :class:`~agentd.errors.ToolFault` says the run does
(its ``cause``): "" or a notice cause ("timeout", "closed", "missing", "limit")
leaves the run going; an abort cause (:data:`ABORT_CAUSES`) ends the server."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What the client does about one fault (docs/faults.md, the table)."""

    retryable: bool = False
    resend: bool = False
    reconnect: bool = False
    reason: str
    cause: Cause = ""  # the ToolFault's cause when the client gives up on it
    after: float | None = None  # the server's Retry-After, seconds (waited before a re-send)

    @property
    def abort(self) -> bool:
        return self.cause in ABORT_CAUSES


def _is_tls(text: str) -> bool:
    low = text.lower()
    return any(m in low for m in _TLS_MARKERS)


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the table: a fault of type ``fault`` for which ``when(fault,
    method)`` holds gets ``decide(fault, idempotent)``."""

    fault: type[BaseException]
    when: Callable[[Any, str], bool]
    decide: Callable[[Any, bool], Decision]


def _always(_f: Any, _m: str) -> bool:
    return True


def _rpc(c: int) -> str:
    return f"JSON-RPC {c}"


# docs/faults.md, row by row, in the order they are tried: the first row whose
# type and condition match decides.
TABLE: Final[tuple[Row, ...]] = (
    # a ToolFault the client made while waiting on its connection
    Row(ToolFault, lambda f, m: not f.retryable,  # gone, stale or closed: its cause says which
        lambda f, i: Decision(reason=f.message, cause=cast(Cause, f.cause))),
    Row(ToolFault, lambda f, m: _is_tls(f.message),
        lambda f, i: Decision(reason=f"TLS verification failed: {f.message}", cause="refused")),
    Row(ToolFault, _always,
        lambda f, i: Decision(retryable=True, cause="unreachable",
                              reason=f"server gone past the retry budget: {f.message}")),
    Row(SessionExpired, _always,
        lambda f, i: Decision(retryable=True, resend=True, reconnect=True,
                              reason=f"session expired (HTTP {f.status})")),
    Row(TransportError, lambda f, m: bool(f.limit), lambda f, i: Decision(reason=str(f))),
    Row(TransportError, lambda f, m: _is_tls(str(f)),
        lambda f, i: Decision(reason=f"TLS verification failed: {f}", cause="refused")),
    Row(TransportError, lambda f, m: not f.sent,
        lambda f, i: Decision(retryable=True, resend=True, reconnect=True,
                              reason=f"unreachable: {f}", cause="unreachable")),
    Row(TransportError, _always,
        lambda f, i: Decision(retryable=True, resend=i, reconnect=True,
                              reason=f"connection lost: {f}")),
    Row(HTTPStatusError, lambda f, m: f.status in _NOT_PROCESSED_STATUSES,
        lambda f, i: Decision(retryable=True, resend=True, reason=f"HTTP {f.status}",
                              after=f.retry_after)),
    Row(HTTPStatusError, lambda f, m: f.status >= 500,
        lambda f, i: Decision(retryable=True, resend=i, reason=f"HTTP {f.status}",
                              after=f.retry_after)),
    Row(HTTPStatusError, lambda f, m: f.status in _REFUSED_STATUSES,
        lambda f, i: Decision(reason=f"HTTP {f.status} after the handshake (credentials "
                              "refused)", cause="refused")),
    Row(HTTPStatusError, _always, lambda f, i: Decision(reason=f"HTTP {f.status}")),
    # a top-level JSON-RPC error the server answered
    Row(RPCError, lambda f, m: f.side == "remote" and f.code == UNSUPPORTED_PROTOCOL_VERSION,
        # refused before it ran: negotiate again
        lambda f, i: Decision(retryable=True, resend=True, reconnect=True,
                              reason=f"{_rpc(f.code)}: {f.message}")),
    Row(RPCError, lambda f, m: (f.side == "remote" and m == "tools/call"
                                and f.code in (METHOD_NOT_FOUND, INVALID_PARAMS)),
        lambda f, i: Decision(reason=f"{_rpc(f.code)} for a tool the server listed: "
                              f"{f.message}", cause="refused")),
    Row(RPCError, lambda f, m: (f.side == "remote" and m == "resources/read"
                                and resource_missing(f)),
        lambda f, i: Decision(reason=f"{_rpc(f.code)}: {f.message}", cause="missing")),
    Row(RPCError, lambda f, m: f.side == "remote" and f.code in _FATAL_RPC,
        lambda f, i: Decision(reason=f"{_rpc(f.code)}: {f.message}")),
    Row(RPCError, lambda f, m: (f.side == "remote"
                                and (f.code == INTERNAL_ERROR or -32099 <= f.code <= -32000)),
        lambda f, i: Decision(retryable=True, resend=i, reason=f"{_rpc(f.code)}: {f.message}")),
    Row(RPCError, lambda f, m: f.side == "remote",
        lambda f, i: Decision(reason=f"{_rpc(f.code)}: {f.message}")),
    # cancelled on the server, never re-sent
    Row(TimeoutError, _always,
        lambda f, i: Decision(retryable=True, reason="timed out", cause="timeout")),
)


def classify(fault: BaseException, *, idempotent: bool, method: str = "") -> Decision:
    """THE disposition of a fault: the first row of :data:`TABLE` that matches it
    (docs/faults.md); a fault no row names is not retried.

    ``idempotent``: the request may run twice without harm (its method is in
    :data:`IDEMPOTENT_METHODS`, or it calls a tool :func:`idempotent_tool`
    admits).  ``method`` names
    it: a -32601/-32602 answering ``tools/call`` contradicts the server's own
    catalogue (agentd calls only the tools a server listed: the loop and the
    broker refuse any other name), and ``resources/read`` has its own "missing"
    answer.  A :class:`ToolFault` here is one the client itself made while
    waiting on its connection (the server gone or closed, or no reconnect
    within ``reconnect_wait``).
    """
    for row in TABLE:
        if isinstance(fault, row.fault) and row.when(fault, method):
            return row.decide(fault, idempotent)
    return Decision(reason=f"{type(fault).__name__}: {fault}")


Kind = Literal["abort", "retry", "observe"]


def kind(fault: BaseException) -> Kind:
    """The outcome the client's decision gave a fault, for the loggers: ``abort``
    (an abort cause), ``retry`` (a later, new call may pass) or ``observe``."""
    if isinstance(fault, ToolFault):
        if fault.cause in ABORT_CAUSES:
            return "abort"
        return "retry" if fault.retryable else "observe"
    return "observe"


_MISSING: Final = re.compile(r"not[ _]found|unknown|no such|does not exist|doesn't exist",
                             re.IGNORECASE)


def resource_missing(exc: RPCError) -> bool:
    """Whether an error answering ``resources/read`` means "no such resource".

    The one rule, at both revisions: -32002, or -32602 that says so -- its
    ``data.uri`` names the URI (the 2026-07-28 form; the official SDK 2.3, FastMCP
    4 and the TypeScript SDK 2.x send it at 2025-11-25 too) unless a
    ``data.reason`` names another problem (an invalid URI), or its message says
    the resource is unknown / not found (the TypeScript SDK 1.x).  Any other
    -32602 stays a fault: the request itself was wrong.
    """
    if exc.code == RESOURCE_NOT_FOUND:
        return True
    if exc.code != INVALID_PARAMS:
        return False
    data = exc.data
    if isinstance(data, dict) and isinstance(data.get("uri"), str):
        reason = data.get("reason")
        return reason is None or bool(_MISSING.search(str(reason)[:200]))
    return bool(_MISSING.search(exc.message[:300]))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded backoff settings (all seconds) and the sleep they are waited with
    (``sleep``: injectable, so a test observes the delays instead of waiting)."""

    max_attempts: int = 3  # sends per request, the first included
    base: float = 0.2
    cap: float = 4.0
    reconnect_base: float = 0.25
    reconnect_cap: float = 15.0
    reconnect_wait: float = 10.0  # how long a call waits for a reconnect
    sleep: Callable[[float], Awaitable[object]] = field(default=asyncio.sleep, compare=False)

    def backoff(self, attempt: int) -> float:
        """Delay before re-send ``attempt`` (1-based): capped exponential, full jitter."""
        return random.uniform(0.5, 1.0) * min(self.cap, self.base * (2 ** (attempt - 1)))

    def delay(self, decision: Decision, attempt: int) -> float:
        """The one wait before a re-send: the server's Retry-After, else the backoff."""
        return decision.after if decision.after is not None else self.backoff(attempt)

    def reconnect_backoff(self, attempt: int) -> float:
        return random.uniform(0.5, 1.0) * min(
            self.reconnect_cap, self.reconnect_base * (2 ** min(attempt, 16)))

    async def reconnect_pause(self, attempt: int, kick: asyncio.Event) -> None:
        """Sleep ``reconnect_backoff(attempt)``, cut short by ``kick``: a call that
        started waiting for the connection has the next attempt made now (once
        per kick), so a server back after a long outage is not left idle for the
        rest of a grown backoff while calls wait on it."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.reconnect_backoff(attempt)):
                await kick.wait()
        kick.clear()


def no_answer(method: str, garbled: str) -> MCPError | RPCError:
    """What a request fails with when its one answer held no response for it:
    a parse error naming why when the answer was undecodable (the server's
    fault, not retried: -32700 is fatal above), else a lost connection."""
    if garbled:
        return RPCError(PARSE_ERROR, f"{method}: the answer was not a valid message "
                             f"({garbled})", side="remote")
    return TransportError(f"{method}: the answer held no response", sent=True)
