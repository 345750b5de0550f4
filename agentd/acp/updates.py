"""The loop's `Tracer` hooks -> ACP `session/update` notifications.

The loop (agentd.agent.loop) calls `turn` after each answer of the
intelligence, `call` before a tool call and `result` after it.  They become,
in this order: an `agent_message_chunk` with the model's text (the loop gets
a turn's text whole, so one chunk per turn), one `tool_call` (`pending`, with
its `rawInput`) per call the model asked for, a `tool_call_update`
`in_progress` when it starts and `completed` / `failed` with the result's text
(cut to `--observation-bytes`) as `content` and `rawOutput` when it ends.
Subagents are the `agentd__subagent_*` self-tools, so they show as tool calls
too (titled by their instruction); `agentd__graph_run` also sends a `plan`
(its nodes).

The hooks do not carry the call's id: `call` finds it among the turn's calls
by name and arguments, and keeps it in a context variable, which `result`
(the same coroutine: the loop runs each call in its own task) reads back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from agentd.agent.loop import Tracer
from agentd.intelligence.base import Completion
from agentd.wire.guard import PEER_FAULTS

from .schema import (
    AgentMessageChunk,
    Plan,
    PlanEntry,
    ToolCall,
    ToolCallContent,
    ToolCallUpdate,
    ToolKind,
    Update,
    text,
)

TITLE_MAX: Final = 120

# a tool's kind, by the first word of its own name (`server__word_...`)
_KINDS: Final[dict[str, ToolKind]] = {
    "read": "read", "get": "read", "list": "read", "cat": "read", "view": "read",
    "search": "search", "find": "search", "grep": "search", "query": "search",
    "fetch": "fetch", "download": "fetch", "write": "edit", "edit": "edit",
    "update": "edit", "create": "edit", "delete": "delete", "remove": "delete",
    "move": "move", "rename": "move", "run": "execute", "exec": "execute",
    "execute": "execute", "shell": "execute", "bash": "execute",
}


def kind_of(name: str) -> ToolKind:
    if name.startswith("agentd__"):
        return "think" if name.startswith("agentd__subagent_") else "other"
    bare = name.split("__", 1)[-1].lower()
    return _KINDS.get(bare.replace("-", "_").split("_", 1)[0], "other")


def _short(value: str) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= TITLE_MAX else flat[:TITLE_MAX - 1] + "…"


def title_of(name: str, arguments: Any) -> str:
    if name.startswith("agentd__subagent_") and isinstance(arguments, dict):
        what = arguments.get("instruction") or arguments.get("message") \
            or arguments.get("handle") or ""
        return _short(f"subagent {name[len('agentd__subagent_'):]}: {what}")
    return _short(name)


def _arguments(raw: str) -> Any:
    if not raw.strip():
        return {}
    try:
        return orjson.loads(raw)
    except PEER_FAULTS:  # the model's bytes: shown as written
        return raw


class Updates(Tracer):
    """One prompt's stream: `emit(update)` sends one `session/update`."""

    def __init__(self, emit: Callable[[Update], None], *, observation_bytes: int) -> None:
        self.emit = emit
        self.observation_bytes = observation_bytes
        self.finish_reason: str | None = None  # the last answer's (refusal detection)
        self._plans: dict[str, list[PlanEntry]] = {}

    def turn(self, step: int, completion: Completion) -> None:
        self.finish_reason = completion.finish_reason
        if completion.content:
            self.emit(AgentMessageChunk(text(completion.content)))
        for call in completion.tool_calls:
            name, raw = call.function.name, call.function.arguments
            arguments = _arguments(raw)
            self.emit(ToolCall(call.id, title_of(name, arguments), kind_of(name), "pending",
                               arguments))

    def call(self, step: int, name: str, arguments: str, *, call_id: str = "") -> None:
        if not call_id:
            return
        self.emit(ToolCallUpdate(call_id, "in_progress"))
        if name == "agentd__graph_run":
            entries = self._graph_plan(_arguments(arguments))
            if entries:
                self._plans[call_id] = entries
                self.emit(Plan(entries))

    def result(self, step: int, name: str, text_: str, is_error: bool, size: int,
               duration_ms: float, note: str | None, *, call_id: str = "") -> None:
        if not call_id:
            return
        shown = note or text_
        if len(shown) > self.observation_bytes:
            shown = shown[:self.observation_bytes] + " [cut by agentd]"
        failed = is_error or note is not None
        self.emit(ToolCallUpdate(call_id, "failed" if failed else "completed",
                                 [ToolCallContent("content", text(shown))],
                                 {"text": shown, "isError": failed}))
        entries = self._plans.pop(call_id, None)
        if entries:
            self.emit(Plan([PlanEntry(e.content, e.priority, "completed") for e in entries]))

    @staticmethod
    def _graph_plan(arguments: Any) -> list[PlanEntry]:
        nodes = arguments.get("nodes") if isinstance(arguments, dict) else None
        if not isinstance(nodes, list):
            return []
        return [PlanEntry(_short(f"{n.get('id')}: {n.get('instruction')}"), "medium",
                          "in_progress")
                for n in nodes[:64] if isinstance(n, dict)]
