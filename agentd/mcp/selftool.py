"""The self-tool type: a tool agentd serves to its own loop, and its results.

It lives below the agent, the tree and the reactive layer because all three
build self-tools (`agent/selftools.py` the core set, `tree/graph.py`
`graph.run`, `reactive/awaiting.py` `await_resource`) and none of them may
import another's layer upward. Only data and tiny constructors live here; the
policy of which tools a run gets stays in `agent/selftools.py`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

SERVER = "agentd"
SEP = "__"
PREFIX = SERVER + SEP


class SelfObservation(msgspec.Struct):
    """Same shape as the MCP client's `Observation` (text, is_error, structured)."""

    text: str
    is_error: bool = False
    structured: Any = None


def ok(text: str, structured: Any = None) -> SelfObservation:
    return SelfObservation(text=text, is_error=False, structured=structured)


def error(text: str) -> SelfObservation:
    return SelfObservation(text=text, is_error=True)


SelfHandler = Callable[[dict[str, Any]], Awaitable[Any]]


class SelfTool(msgspec.Struct, frozen=True):
    """One self-tool. `name` is the spec name (`subagent.spawn`); the model sees
    `agentd__subagent_spawn`. The handler returns an object with `text`,
    `is_error` and `structured` (a SelfObservation or the client's Observation)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: SelfHandler

    @property
    def qualified(self) -> str:
        return PREFIX + self.name.replace(".", "_").replace("/", "_")
