"""One MCP `tools/call` seen from outside: its span, its count and its latency.

Used by the MCP client around each call (`with McpCall(...) as rec:
return rec.done(observation)`), so the root's own calls and every call it
brokers for a subagent are counted in one place.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal, TypeVar

from agentd.obs import metrics, trace
from agentd.wire.shapes import Observed

_Obs = TypeVar("_Obs", bound=Observed)

__all__ = ["McpCall"]

_UNLISTED = "_unlisted"  # a tool name the server never listed: not a metric label


class McpCall:
    __slots__ = ("_span", "_t0", "outcome", "server", "tool")

    def __init__(self, server: str, tool: str, *, listed: bool = True,
                 revision: str | None = None) -> None:
        self.server = server
        self.tool = tool if listed else _UNLISTED
        self.outcome = "fault"
        self._span: Any = None  # tracing off: no span, one check per use
        if trace.enabled:
            self._span = trace.child("tools/call " + self.tool, "client", {
                "mcp.method.name": "tools/call", "gen_ai.tool.name": self.tool,
                "mcp.protocol.version": revision, "agentd.mcp.server": server})

    def __enter__(self) -> McpCall:
        if self._span is not None:
            self._span.__enter__()
        self._t0 = time.perf_counter()
        return self

    def done(self, observation: _Obs, outcome: str | None = None) -> _Obs:
        """The call answered: record whether the tool said it failed (or, as
        ``outcome``, what else ended it: a tool-call limit)."""
        self.outcome = outcome or (
            "tool_error" if observation.is_error else "ok")
        return observation

    def __exit__(self, tp: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if tp is not None and issubclass(tp, asyncio.CancelledError):
            self.outcome = "cancelled"
        metrics.MCP_CALLS.inc(self.server, self.tool, self.outcome)
        metrics.MCP_SECONDS.observe(time.perf_counter() - self._t0, self.server, self.tool)
        span = self._span
        if span is not None:
            span.attrs["agentd.mcp.outcome"] = self.outcome
            span.__exit__(tp, exc, tb)
        return False
