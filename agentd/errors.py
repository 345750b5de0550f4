"""The error tree: one root, one peer-error type, exit codes on the classes.

Every exception agentd raises on purpose descends from `AgentdError`. The
nodes here name the domains; each layer's own errors live beside the code
that raises them and subclass the right node (an error that needs a layer's
types, like the wire's `ProtocolError` building an `ErrorResponse`, cannot
live below that layer). This module imports nothing of agentd but the exit
codes, so every layer may use it.

A class says how a run that it ends exits: `exit_code` and the log `event`
(`None`: a plain failure, logged `run.failed` with the class name in front of
the text). `classify()` is the one lookup the entry points use.

    AgentdError                          exit 1
    ├── ConfigError                      exit 2 (agentd.config)
    ├── PeerError: a JSON-RPC error object (code, message, data)
    │   ├── ProtocolError                one to answer (agentd.wire.jsonrpc; + id)
    │   ├── RPCError                     the MCP peer answered our request with one
    │   ├── RemoteError                  the control-wire peer answered with one
    │   └── BrokerError                  the broker answers a child with one
    ├── MCPError                         the MCP client, server engine and auth
    │   ├── ToolFault                    a protocol/transport fault of a call
    │   └── RequiredServerLost           exit 1, or 6 at the handshake (agentd.mcp.faults)
    ├── IntelligenceError
    │   └── IntelligenceUnavailable      exit 5 (agentd.intelligence.base)
    ├── TreeError                        subagents, the control wire, spawners
    ├── ReactiveError                    the wake router
    └── A2AFault                         A2A peers and the served A2A agent
"""

from __future__ import annotations

from typing import Any

from agentd.exitcodes import ExitCode

__all__ = [
    "A2AFault",
    "AgentdError",
    "IntelligenceError",
    "MCPError",
    "PeerError",
    "RPCError",
    "ReactiveError",
    "RemoteError",
    "ToolFault",
    "TreeError",
    "classify",
]


class AgentdError(Exception):
    """The root: every error agentd raises on purpose."""

    exit_code: ExitCode = ExitCode.FAILED  # a class's; an instance may narrow it
    event: str | None = None  # None: `run.failed`, "Class: text"


def classify(exc: BaseException) -> tuple[ExitCode, str, str]:
    """(exit code, log event, message) for the exception that ended a run."""
    if not isinstance(exc, AgentdError) or exc.event is None:
        return ExitCode.FAILED, "run.failed", f"{type(exc).__name__}: {exc}"
    return exc.exit_code, exc.event, str(exc)


class PeerError(AgentdError):
    """A JSON-RPC error object as an exception: what a peer sent us, or what we
    answer one. Its text is the message; the wire renderings add the code."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, message={self.message!r})"


class RPCError(PeerError):
    """A top-level JSON-RPC error answering our MCP request."""

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class RemoteError(PeerError):
    """The control-wire peer (parent or child) answered a request with a JSON-RPC error."""


class MCPError(AgentdError):
    """The MCP client, the MCP server engine and their auth."""


class ToolFault(MCPError):
    """A protocol or transport fault: never shown to the model as tool output.

    ``retryable`` follows the documented policy (:mod:`agentd.mcp.faults`);
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
        # the policy's cause (agentd.mcp.faults): "timeout", "closed", "missing"
        # (resources/read: no such resource), "" or an abort cause ("stale",
        # "gone", "refused", "unreachable": the server cannot be used any more)
        self.cause = cause


class IntelligenceError(AgentdError):
    """The model gateway: unreachable, refused by the ledger, a bad playback file."""


class TreeError(AgentdError):
    """Subagents: spawn refusals, unknown handles, the control wire, the broker."""


class ReactiveError(AgentdError):
    """The reactive mode's wake router."""


class A2AFault(AgentdError):
    """A2A: a peer's protocol error or transport fault, or one the served agent answers."""
