"""The error tree: one root, one peer-error type, exit codes on the classes.

Every exception agentd raises on purpose descends from `AgentdError`. The
nodes here name the domains; each layer's own errors live beside the code
that raises them and subclass the right node (an error that needs a layer's
types cannot live below that layer: `RPCError` has plain fields, and the wire
layer renders it, `agentd.wire.jsonrpc.error_response`). This module imports
nothing of agentd but the exit codes, so every layer may use it.

A class says how a run that it ends exits: `exit_code` and the log `event`
(`None`: a plain failure, logged `run.failed` with the class name in front of
the text); where a `kind` decides (the pool, a required server's handshake)
the instance sets them. `classify()` is the one lookup the entry points use. One
class per domain: an outcome callers must tell apart is a `kind` field, and
an outcome that is expected (a replay's divergence, a closed wake router) is
a return value, not an exception.

    AgentdError                          exit 1
    ├── ConfigError                      exit 2 (the config, secrets)
    ├── RPCError                         THE JSON-RPC error object (code, message, data) on
    │                                    every wire; side "remote" (a peer answered us with
    │                                    it) or "local" (we answer a peer with it; + id)
    ├── MCPError                         the MCP client, server engine and auth
    │   ├── ToolFault                    a protocol/transport fault of a call
    │   ├── HandshakeError               the server could not be initialized, or a request
    │   │                                its negotiated capabilities refuse (exit 6 if required)
    │   ├── OAuthError                   kind failed | refused | required (agentd.mcp.client.oauth)
    │   └── RequiredServerLost           exit 1, or 6 at the handshake (agentd.mcp.client.rules.faults)
    ├── IntelligenceError                kind unavailable | ceiling | retry | playback
    │   └── IntelligenceUnavailable      exit 5 (agentd.intelligence.base)
    ├── TreeError                        subagents, the control wire, spawners, cassettes
    ├── ReactiveError                    exit 6: a --subscribe URI the daemon cannot watch
    ├── A2AFault                         kind fault | not_found | card
    └── PoolError                        kind unavailable | auth

The other layers' own classes (the MCP client's transport faults, the
tree's) hang under these nodes beside the code that raises them.
"""

from __future__ import annotations

from asyncio import CancelledError
from typing import Any, Literal

from msgspec import UNSET

from agentd.exitcodes import ExitCode

__all__ = [
    "A2AFault",
    "A2AKind",
    "AgentdError",
    "ConfigError",
    "HandshakeError",
    "IntelligenceError",
    "IntelligenceKind",
    "MCPError",
    "PoolError",
    "PoolKind",
    "RPCError",
    "ReactiveError",
    "Side",
    "ToolFault",
    "TreeError",
    "classify",
]


class AgentdError(Exception):
    """The root: every error agentd raises on purpose."""

    exit_code: ExitCode = ExitCode.FAILED  # a class's; an instance may narrow it
    event: str | None = None  # None: `run.failed`, "Class: text"


class ConfigError(AgentdError):
    """A usage or configuration problem: exit 2, one line on stderr."""

    exit_code = ExitCode.USAGE
    event = "config.invalid"


def leaf_error(exc: BaseException) -> BaseException:
    """The first meaningful exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, CancelledError)]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def classify(exc: BaseException) -> tuple[ExitCode, str, str]:
    """(exit code, log event, message) for the exception that ended a run."""
    if not isinstance(exc, AgentdError) or exc.event is None:
        return ExitCode.FAILED, "run.failed", f"{type(exc).__name__}: {exc}"
    return exc.exit_code, exc.event, str(exc)


Side = Literal["remote", "local"]


class RPCError(AgentdError):
    """THE JSON-RPC error object as an exception, on every wire agentd speaks
    (MCP, the control wire, the broker's answers, the served A2A agent).

    ``side`` says whose it is: ``"remote"`` -- a peer answered our request with
    it (never to be forwarded as our own answer); ``"local"`` -- we answer a
    peer with it, or we refuse what a peer sent (a malformed message or result:
    those are never sent back for a response). ``data`` is ``UNSET`` when the
    object has none; ``id`` is the request it answers when known. The wire
    renderings (``agentd.wire.jsonrpc.error_response``) add nothing of their own.
    """

    def __init__(self, code: int, message: str, data: Any = UNSET, *, side: Side,
                 id: int | str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.side: Side = side
        self.id = id

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def __repr__(self) -> str:
        return (f"RPCError(code={self.code}, message={self.message!r}, side={self.side!r}, "
                f"id={self.id!r})")


class MCPError(AgentdError):
    """The MCP client, the MCP server engine and their auth."""


class ToolFault(MCPError):
    """A protocol or transport fault: never shown to the model as tool output.

    ``retryable`` follows the documented policy (:mod:`agentd.mcp.client.rules.faults`);
    ``code`` is the JSON-RPC error code or HTTP status when there was one.
    """

    def __init__(self, server: str, message: str, *, retryable: bool,
                 code: int | None = None, method: str = "", cause: str = "") -> None:
        super().__init__(f"{server}: {message}")
        self.server = server
        self.message = message
        self.retryable = retryable
        self.code = code
        self.method = method
        # the policy's cause (agentd.mcp.client.rules.faults): "timeout", "closed", "missing"
        # (resources/read: no such resource), "" or an abort cause ("stale",
        # "gone", "refused", "unreachable": the server cannot be used any more)
        self.cause = cause


IntelligenceKind = Literal["unavailable", "ceiling", "retry", "playback"]


class HandshakeError(MCPError):
    """What the handshake settled refuses: the server could not be initialized
    (a connect failure, exit 6 if required), or -- with ``method`` and ``needs``
    set -- a request the negotiated (frozen) capabilities do not allow, never
    sent."""

    def __init__(self, message: str, *, method: str = "", needs: str = "") -> None:
        super().__init__(message)
        self.method = method
        self.needs = needs

    @classmethod
    def not_allowed(cls, method: str, needs: str) -> HandshakeError:
        return cls(f"{method} needs the server capability {needs!r}, "
                   "which it did not advertise", method=method, needs=needs)


class IntelligenceError(AgentdError):
    """The model gateway; `kind` says which outcome (no subclass per outcome):

    * ``"unavailable"``: unreachable or failing after the provider's own retries
      (`agentd.intelligence.base.IntelligenceUnavailable`, exit 5);
    * ``"ceiling"``: the tree's token ledger refused the call -- the run ends
      `budget_exhausted` (exit 3) with its partial result;
    * ``"retry"``: one gateway attempt failed and may be retried, after at least
      ``retry_after`` seconds when the gateway said so (inside the provider);
    * ``"playback"``: the playback file is missing or malformed (exit 2, as a
      `ConfigError` at startup).
    """

    def __init__(self, message: str, *, kind: IntelligenceKind,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind: IntelligenceKind = kind
        self.retry_after = retry_after


class TreeError(AgentdError):
    """Subagents: spawn refusals, unknown handles, the control wire, the broker."""


class ReactiveError(AgentdError):
    """The reactive daemon refuses to start: a `--subscribe` URI it cannot watch
    (its owner can deliver no `updated` for it with polling disabled,
    `--poll-interval 0`, or several servers could own it and it names none --
    `server=URI` says which). Exit 6, like a required server that failed."""

    exit_code = ExitCode.MCP_REQUIRED
    event = "reactive.refused"

    def __init__(self, uri: str, server: str | None, reason: str, *,
                 polling_off: bool = True) -> None:
        where = f" on server {server!r}" if server is not None else ""
        tail = "; polling is disabled (--poll-interval 0)" if polling_off else ""
        super().__init__(f"cannot watch {uri}{where}: {reason}{tail}")
        self.uri = uri
        self.server = server
        self.reason = reason


A2AKind = Literal["fault", "not_found", "card"]


class A2AFault(AgentdError):
    """An A2A peer's protocol error or a transport fault. `kind`: ``"fault"``;
    ``"not_found"`` -- the peer does not know the task (JSON-RPC -32001, REST 404);
    ``"card"`` -- its Agent Card cannot be had or is not acceptable (a required
    peer's: a `RequiredServerLost` at the handshake, exit 6). `retryable`: worth
    another try (connection refused/reset, 5xx); `code`: the A2A/JSON-RPC code
    or HTTP status when there was one."""

    def __init__(self, message: str, *, kind: A2AKind = "fault", code: int | None = None,
                 retryable: bool = False) -> None:
        super().__init__(message)
        self.kind: A2AKind = kind
        self.code = code
        self.retryable = retryable


PoolKind = Literal["unavailable", "auth"]


class PoolError(AgentdError):
    """The worker pool. `kind`: ``"unavailable"`` -- the owner did not answer a
    relayed operation (down, unreachable, a bad answer; logged
    `pool.relay_unavailable` if it ends a run); ``"auth"`` -- a relay request
    whose authentication fails (the relay answers 401)."""

    def __init__(self, message: str, *, kind: PoolKind) -> None:
        super().__init__(message)
        self.kind: PoolKind = kind
        self.event = "pool.relay_unavailable" if kind == "unavailable" else None
