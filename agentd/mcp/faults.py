"""The run-level fault policy: what a protocol or transport fault does to a run.

The client (:mod:`agentd.mcp.retry`) decides what one *request* does about a
fault (re-send now, reconnect).  This module decides what the *run* does once
the client has given up on a request and raised :class:`ToolFault`: every tool
call, resource read and subscription, and the reactive daemon's reads, go
through :func:`classify` — one table, one place (docs/faults.md).

``retry``
    the fault may pass: connection reset or refused, HTTP 5xx, 429, a timed-out
    call on a server that is still connected.  :func:`call_with_policy` tries
    again with bounded backoff (``RETRY_ATTEMPTS`` tries in all), inside the
    run's deadline (it is a cancel scope around all of this).  When the budget
    is spent and the server is still connected, the model gets the
    ``[agentd]`` notice that the call failed (the server is alive; the model
    may take another path); when the server is gone by then, it is ``abort``.
``abort``
    the server cannot be used any more: HTTP 401/403 after the handshake
    (credentials revoked), TLS certificate verification failure, -32601 or
    -32602 for a tool the server itself listed (it contradicts its own
    catalogue), a server that stays gone past the retry budget, a stale server
    (three missed pings).  On a **required** server the run ends: exit 1,
    ``status: "failed"``, a ``result`` naming the server and the fault
    (:class:`RequiredServerLost`).  On an **optional** server its tools leave
    the catalogue and the model is told once, as fenced untrusted data.
``observe``
    the request itself was wrong in a way the model can fix (-32602 or -32601
    for a tool the server never listed, -32002 on a read): an ``[agentd]``
    notice, the run goes on.

Nothing here touches a socket: callers hand in the operation.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from agentd.errors import MCPError
from agentd.log import log

__all__ = [
    "RETRY_ATTEMPTS",
    "RequiredServerLost",
    "Verdict",
    "call_with_policy",
    "classify",
]

T = TypeVar("T")
Kind = Literal["retry", "abort", "observe"]

RETRY_ATTEMPTS: Final = 3  # tries of one operation under the run-level policy
RETRY_BASE: Final = 0.25  # seconds before the first retry (doubles, full jitter)
RETRY_CAP: Final = 4.0
_TLS_MARKERS: Final = ("certificate verify failed", "certificate_verify_failed",
                       "sslcertverificationerror", "certificate has expired",
                       "hostname mismatch")
_GONE_CAUSES: Final = frozenset({"stale", "gone"})  # "closed" is ours (a drain), not the server's


class RequiredServerLost(MCPError):
    """A required server hit an abort-class fault after its handshake: exit 1."""

    event = "mcp.required_lost"

    def __init__(self, server: str, fault: str) -> None:
        super().__init__(f"required MCP server {server!r} failed: {fault}")
        self.server = server
        self.fault = fault


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: Kind
    reason: str


def _is_tls(text: str) -> bool:
    low = text.lower()
    return any(m in low for m in _TLS_MARKERS)


def classify(fault: BaseException, *, listed: bool = True, connected: bool = True) -> Verdict:
    """The run-level disposition of a client fault (see the module docstring).

    ``listed``: the tool was in the server's own ``tools/list`` (a -32601/-32602
    then contradicts the server's catalogue).  ``connected``: the client is
    connected now (a retryable fault on a server that is gone is ``abort``
    once retries are spent; the caller passes the state after its last try).
    """
    code = getattr(fault, "code", None)
    cause = getattr(fault, "cause", "") or ""
    message = getattr(fault, "message", None) or str(fault)
    method = getattr(fault, "method", "") or ""
    if cause in _GONE_CAUSES:
        return Verdict("abort", f"server gone ({cause}): {message}")
    if _is_tls(message):
        return Verdict("abort", f"TLS verification failed: {message}")
    if code in (401, 403):
        return Verdict("abort", f"HTTP {code} after the handshake (credentials refused)")
    if code in (-32601, -32602):
        if method == "tools/call" and listed:
            return Verdict("abort", f"JSON-RPC {code} for a tool the server listed: {message}")
        return Verdict("observe", message)
    if code == -32002:
        return Verdict("observe", message)
    if getattr(fault, "retryable", False):
        if not connected and cause != "timeout":
            return Verdict("abort", f"server gone past the retry budget: {message}")
        return Verdict("retry", message)
    if isinstance(fault, TimeoutError):
        return Verdict("retry", "timed out")
    return Verdict("observe", message)


def _backoff(attempt: int) -> float:
    return random.uniform(0.5, 1.0) * min(RETRY_CAP, RETRY_BASE * (2 ** (attempt - 1)))


async def call_with_policy(op: Callable[[], Awaitable[T]], *, server: str, what: str,
                           fault_type: type[BaseException], listed: bool = True,
                           connected: Callable[[], bool] = lambda: True,
                           on_abort: Callable[[Verdict, BaseException], Awaitable[Any]]
                           ) -> T | Any:
    """Run ``op`` under the policy: retry faults with bounded backoff; an abort
    fault goes to ``on_abort(verdict, fault)`` (which raises
    :class:`RequiredServerLost` for a required server, or drops an optional
    one and returns what the model is told); an observe fault is re-raised."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await op()
        except fault_type as exc:
            verdict = classify(exc, listed=listed, connected=connected())
            log.warning("mcp.fault", server=server, what=what, attempt=attempt,
                        kind=verdict.kind, fault=verdict.reason[:300])
            if verdict.kind == "abort":
                return await on_abort(verdict, exc)
            if verdict.kind == "retry" and attempt < RETRY_ATTEMPTS:
                after = getattr(exc, "retry_after", None)
                await asyncio.sleep(after if after is not None else _backoff(attempt))
                continue
            if verdict.kind == "retry" and not connected():
                gone = Verdict("abort", f"server gone past the retry budget: {verdict.reason}")
                return await on_abort(gone, exc)
            raise
