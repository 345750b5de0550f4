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

from agentd.wire.shapes import Observed, ToolEntry

SERVER = "agentd"
SEP = "__"
PREFIX = SERVER + SEP


def ok(text: str, structured: Any = None) -> Observed:
    return Observed(text, False, structured)


def error(text: str) -> Observed:
    return Observed(text, True)


SelfHandler = Callable[[dict[str, Any]], Awaitable[Observed]]


class SelfTool(msgspec.Struct, frozen=True):
    """One self-tool. `name` is the spec name (`subagent.spawn`); the model sees
    `agentd__subagent_spawn`. The handler returns the observation (`Observed`:
    `ok`/`error` here, or what a toolbox read answered)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: SelfHandler

    @property
    def qualified(self) -> str:
        return PREFIX + self.name.replace(".", "_").replace("/", "_")

    def entry(self) -> ToolEntry:
        """This tool as offered to the model, in the one tool shape."""
        return ToolEntry(qualified=self.qualified, server=SERVER, name=self.name,
                         description=self.description, input_schema=self.input_schema)
