"""The retry/abort policy for MCP faults, with bounded backoff.

A *fault* is anything that is not an answer from the tool: a transport failure,
an HTTP status, or a top-level JSON-RPC ``error``.  (A ``result`` with
``isError: true`` is not a fault: it is an observation for the model.)  Every
fault is classified by :func:`classify` into a :class:`Decision`:

``retryable``
    whether trying again later may succeed (reported on ``ToolFault``);
``resend``
    whether the client may send the same request again by itself now.  A
    request is re-sent automatically only when that cannot run an operation
    twice: it is idempotent (lists, reads, subscribe, ping), or it provably
    never reached the server (connection refused, session expired/404 before
    processing, HTTP 429/503);
``reconnect``
    whether the connection is suspect and the client should re-establish it
    (reconnect, or re-initialize after a 404 on a known session).

Table (docs/client.md has the same):

=============================================  =========  ==========================  =========
fault                                          retryable  resent automatically        reconnect
=============================================  =========  ==========================  =========
connect refused / DNS / TLS handshake          yes        yes (never sent)            yes
connection lost mid-request, stream cut        yes        idempotent only             yes
session unknown (404, or 400 saying so)        yes        yes (after re-initialize)   re-init
HTTP 429, 502, 503, 504                        yes        yes (not processed)         no
other HTTP 5xx                                 yes        idempotent only             no
HTTP 4xx (400, 401, 403, 405, 413, ...)        no         no                          no
JSON-RPC -32022 unsupported protocol version   yes        yes (never ran)             yes
JSON-RPC -32700/-32600/-32601/-32602/-32002    no         no                          no
JSON-RPC -32603 internal error                 yes        idempotent only             no
JSON-RPC -32000..-32099 server-defined         yes        idempotent only             no
any other JSON-RPC code                        no         no                          no
timeout (call deadline)                        yes        no (cancelled instead)      no
a byte bound crossed (an SSE event too large)  no         no                          no
=============================================  =========  ==========================  =========

Automatic re-sends are bounded: at most ``max_attempts`` sends per request,
sleeping ``backoff(n)`` between them (exponential, full jitter, capped).  The
reconnect loop uses the same shape with its own base and cap and runs until it
succeeds or the client closes; a call waiting on it gives up after
``reconnect_wait`` seconds with a retryable fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import re
import time
from dataclasses import dataclass
from typing import Final

from agentd.errors import MCPError, RPCError
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
    "IDEMPOTENT_METHODS",
    "Decision",
    "HTTPStatusError",
    "PeerLimitExceeded",
    "RPCError",
    "RetryPolicy",
    "SessionExpired",
    "TransportError",
    "classify",
    "no_answer",
    "parse_retry_after",
    "resend_delay",
    "resource_missing",
]

IDEMPOTENT_METHODS: Final = frozenset({
    "ping", "tools/list", "resources/list", "resources/templates/list", "resources/read",
    "resources/subscribe", "resources/unsubscribe", "prompts/list",
})

_NOT_PROCESSED_STATUSES: Final = frozenset({429, 502, 503, 504})
_FATAL_RPC: Final = frozenset({PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS,
                               RESOURCE_NOT_FOUND})


class TransportError(MCPError):
    """The HTTP exchange failed. ``sent`` is False when the request provably
    never reached the server (e.g. connection refused)."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class PeerLimitExceeded(TransportError):
    """The server crossed one of the byte bounds (docs/security.md): its stream
    was dropped at the bound.  Never re-sent (the same server would send the same
    flood again) and no reconnect: the session itself is fine.  ``limit`` names
    the knob, ``size`` what the unit had reached."""

    def __init__(self, message: str, *, limit: str, size: int) -> None:
        super().__init__(message, sent=True)
        self.limit = limit
        self.size = size


class SessionExpired(MCPError):
    """The server does not know our ``Mcp-Session-Id``: initialize again.

    HTTP 404, or a 400 whose body says the session is unknown
    (:func:`agentd.mcp.negotiate.unknown_session`); ``status`` says which."""

    def __init__(self, message: str, *, status: int = 404) -> None:
        super().__init__(message)
        self.status = status


RETRY_AFTER_CAP: Final = 30.0  # seconds: a longer Retry-After is waited this long at most


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


_RETRY_AFTER_MAX_CHARS: Final = 64  # an HTTP-date is 29 characters


class HTTPStatusError(MCPError):
    def __init__(self, status: int, body: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}" + (f": {body}" if body else ""))
        self.status = status
        self.retry_after = retry_after  # seconds from Retry-After (429/503), when sent

    def delay(self, backoff: float) -> float:
        """How long to wait before re-sending: the server's Retry-After, else ``backoff``."""
        return self.retry_after if self.retry_after is not None else backoff


def resend_delay(exc: BaseException, backoff: float) -> float:
    """Before a re-send: the server's Retry-After (429/503) when it sent one."""
    return exc.delay(backoff) if isinstance(exc, HTTPStatusError) else backoff


@dataclass(frozen=True, slots=True)
class Decision:
    retryable: bool
    resend: bool
    reconnect: bool
    reason: str


def classify(exc: BaseException, *, idempotent: bool) -> Decision:
    """The documented disposition of a fault (see the module table)."""
    if isinstance(exc, SessionExpired):
        return Decision(True, True, True, f"session expired (HTTP {exc.status})")
    if isinstance(exc, PeerLimitExceeded):
        return Decision(False, False, False, str(exc))
    if isinstance(exc, TransportError):
        if not exc.sent:
            return Decision(True, True, True, f"unreachable: {exc}")
        return Decision(True, idempotent, True, f"connection lost: {exc}")
    if isinstance(exc, HTTPStatusError):
        s = exc.status
        if s in _NOT_PROCESSED_STATUSES:
            return Decision(True, True, False, f"HTTP {s}")
        if s >= 500:
            return Decision(True, idempotent, False, f"HTTP {s}")
        return Decision(False, False, False, f"HTTP {s}")
    if isinstance(exc, RPCError):
        c = exc.code
        if c == UNSUPPORTED_PROTOCOL_VERSION:  # refused before it ran: negotiate again
            return Decision(True, True, True, f"JSON-RPC {c}: {exc.message}")
        if c in _FATAL_RPC:
            return Decision(False, False, False, f"JSON-RPC {c}: {exc.message}")
        if c == INTERNAL_ERROR or -32099 <= c <= -32000:
            return Decision(True, idempotent, False, f"JSON-RPC {c}: {exc.message}")
        return Decision(False, False, False, f"JSON-RPC {c}: {exc.message}")
    if isinstance(exc, TimeoutError):
        return Decision(True, False, False, "timed out")
    return Decision(False, False, False, f"{type(exc).__name__}: {exc}")


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
    """Bounded backoff settings (all seconds)."""

    max_attempts: int = 3  # sends per request, the first included
    base: float = 0.2
    cap: float = 4.0
    reconnect_base: float = 0.25
    reconnect_cap: float = 15.0
    reconnect_wait: float = 10.0  # how long a call waits for a reconnect

    def backoff(self, attempt: int) -> float:
        """Delay before re-send ``attempt`` (1-based): capped exponential, full jitter."""
        return random.uniform(0.5, 1.0) * min(self.cap, self.base * (2 ** (attempt - 1)))

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
                             f"({garbled})")
    return TransportError(f"{method}: the answer held no response", sent=True)
