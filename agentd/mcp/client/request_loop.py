"""The request loop of one MCP client: THE place the fault policy is applied.

Every request of a client -- a tool call, a read, a subscription, a list, a
probe; the root's and the broker's -- is sent here: ``build`` makes each send
anew (a fresh JSON-RPC id), :func:`~agentd.mcp.client.rules.faults.classify` decides on a
re-send (one wait before it), a reconnect, or the ToolFault whose ``cause``
says what the run does.  Nothing above this re-sends a request.

It is handed the connection (one send and its answer), the policy, and the
:class:`Gate` that says whether the connection is up and starts a recovery
(:class:`~agentd.mcp.client.recovery.Recovery`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

import msgspec
from msgspec import UNSET, UnsetType

from agentd.errors import ToolFault
from agentd.log import Logger
from agentd.mcp.client.call_watch import CallWatch
from agentd.mcp.client.connection import Connection
from agentd.mcp.client.rules.faults import (
    IDEMPOTENT_METHODS,
    HTTPStatusError,
    RetryPolicy,
    RPCError,
    SessionExpired,
    TransportError,
    classify,
)
from agentd.wire import codec
from agentd.wire import mcp_types as mt

__all__ = ["EXPIRED", "Build", "Gate", "RequestLoop"]

EXPIRED: Final = "mcp.session.expired"  # the server no longer knows our session
Build = Callable[[], tuple[int | str, bytes, Any]]  # one send: (id, bytes, headers)


class Gate(Protocol):
    """What the loop needs of the connection's lifecycle (the client's recovery)."""

    @property
    def connected(self) -> bool: ...

    async def wait_connected(self) -> None: ...

    def trigger(self, *, expired: bool, reason: str, drop: bool = False,
                event: str = "mcp.disconnected") -> None: ...


class RequestLoop:
    """Requests of one server under the retry policy; see the module docstring."""

    def __init__(self, name: str, log: Logger, conn: Connection, policy: RetryPolicy,
                 gate: Gate) -> None:
        self.name = name
        self.log = log
        self._conn = conn
        self._policy = policy
        self._gate = gate

    async def request(self, method: str,
                      params: mt.Params | dict[str, Any] | UnsetType = UNSET, *,
                      time_limit: float | None = None, name: str | None = None
                      ) -> msgspec.Raw:
        """A request under the retry policy; returns the raw result.

        ``name`` is what ``Mcp-Name`` mirrors at 2026-07-28 (a URI, a prompt name)."""
        session = self._conn.session

        def build() -> tuple[int | str, bytes, Any]:
            rid, data = session.request(method, params)
            return rid, data, session.headers(method, name)

        return await self.retrying(method, build, time_limit,
                                   idempotent=method in IDEMPOTENT_METHODS)

    async def retrying(self, method: str, build: Build, time_limit: float | None, *,
                       idempotent: bool, watch: CallWatch | None = None) -> msgspec.Raw:
        """Send ``build()`` until it is answered or :func:`classify` gives up."""
        policy = self._policy
        conn = self._conn
        attempt = 0
        while True:
            attempt += 1
            gen = conn.generation
            try:
                if not self._gate.connected:
                    await self._gate.wait_connected()
                rid, data, headers = build()
                gen = conn.generation
                return await conn.send(rid, data, method, time_limit, headers, watch)
            except TimeoutError:
                raise ToolFault(self.name, f"{method} timed out after {time_limit:g}s",
                                retryable=True, method=method, cause="timeout") from None
            except (TransportError, SessionExpired, HTTPStatusError, RPCError,
                    ToolFault) as exc:
                d = classify(exc, idempotent=idempotent, method=method)
                if d.reconnect and gen == conn.generation:  # not already reconnected
                    expired = isinstance(exc, SessionExpired)
                    self._gate.trigger(expired=expired, reason=f"{method}: {d.reason}",
                                       event=EXPIRED if expired else "mcp.disconnected")
                if d.resend and attempt < policy.max_attempts:
                    # a reconnect is waited for, not slept on
                    pause = None if d.reconnect else policy.delay(d, attempt)
                    self.log.info("mcp.retry", method=method, attempt=attempt, reason=d.reason,
                                  delay_s=pause)
                    if pause is not None:
                        await policy.sleep(pause)
                    continue
                code = exc.code if isinstance(exc, RPCError) else (
                    exc.status if isinstance(exc, HTTPStatusError) else None)
                raise ToolFault(self.name, f"{method}: {d.reason}", retryable=d.retryable,
                                code=code, method=method, cause=d.cause) from None

    def decode(self, raw: msgspec.Raw, type_: type, method: str) -> Any:
        """A result decoded as ``type_``; a malformed one is a ToolFault naming ``method``."""
        try:
            return codec.decode_result(raw, type_)
        except RPCError as exc:
            raise ToolFault(self.name, f"{method}: {exc.message}", retryable=False,
                            method=method) from None
