"""The subagent operations, specified once: name, description, input schema,
argument parser and backend call of each, and the words of every refusal.

Two surfaces offer these tools over the one `SubagentBackend`: the agent loop's
self-tools (`agent/selftools.py`; the model sees `agentd__subagent_spawn`, ...)
and the self-MCP served to peers (`served/selfmcp.py` through `served/backend.py`;
spec §2.2: `subagent.spawn`, ...). Both take their table from `tools(modes)` and
answer with the words made here, so the model and a peer are told the same
thing for the same mistake.

The surfaces differ only where the spec makes them differ: `detach` is an
in-loop orchestrator disposition, not offered on the served socket (spec
§2.2), so the self-MCP builds its table with `SERVED_MODES` and its spawn
schema is exactly the spec's. A mode that is not offered, or two modes at once,
is refused in words, never guessed.

It lives in the agent layer beside the tree's contract (`agent/subagents.py`),
which is all it imports of agentd: the agent's self-tools use it, and the tree
above (the self-MCP) takes the same table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

import msgspec

from agentd.agent.subagents import (
    TOOL_SCOPE_SCHEMA,
    HandleState,
    Refusal,
    SpawnRequest,
    SubagentBackend,
    Unknown,
)

R = TypeVar("R")

__all__ = [
    "LOOP_MODES",
    "SERVED_MODES",
    "HandleArgs",
    "SendArgs",
    "SpawnTool",
    "dispatch",
    "scope_arg",
    "str_arg",
    "tools",
    "unknown_handle",
]

LOOP_MODES: Final = ("async", "warm", "detach")  # the agent's own loop
SERVED_MODES: Final = ("async", "warm")  # the self-MCP (spec §2.2)


class SendArgs(msgspec.Struct, frozen=True):
    """`subagent.send`'s arguments, and the control wire's `tree/send` params."""

    handle: str
    message: str


class HandleArgs(msgspec.Struct, frozen=True):
    """`subagent.status/cancel`'s arguments, and `tree/status`/`tree/cancel`'s params."""

    handle: str


Outcome = HandleState | Refusal | Unknown
# an operation's backend call: (backend, caller, a peer's principal or None, parsed)
Act = Callable[[SubagentBackend, str, "str | None", Any], Awaitable[Outcome]]


class SpawnTool(msgspec.Struct, frozen=True):
    """One subagent operation: its words and schema, `parse(arguments)` (its
    typed request -- a `SpawnRequest`, `SendArgs` or `HandleArgs` -- or the
    `Refusal`) and `act`, its one backend call, which both faces make."""

    name: str
    description: str
    input_schema: dict[str, Any]
    parse: Callable[[dict[str, Any]], Any]
    act: Act


async def _spawn(b: SubagentBackend, caller: str, principal: str | None,
                 r: SpawnRequest) -> Outcome:
    return await b.spawn(caller, r, principal=principal)


async def _send(b: SubagentBackend, caller: str, principal: str | None, a: SendArgs) -> Outcome:
    return await b.send(caller, a.handle, a.message, principal=principal)


async def _status(b: SubagentBackend, caller: str, principal: str | None,
                  a: HandleArgs) -> Outcome:
    return b.status(caller, a.handle, principal=principal)


async def _cancel(b: SubagentBackend, caller: str, principal: str | None,
                  a: HandleArgs) -> Outcome:
    return await b.cancel(caller, a.handle, principal=principal)


def unknown_handle(handle: str) -> str:
    """The one answer for a handle that never existed, was evicted, or is not the
    caller's (docs/security.md: all three look alike)."""
    return f"unknown handle: {handle}"


async def dispatch(tool: SpawnTool, args: dict[str, Any],
                   act: Callable[[Any], Awaitable[R | Refusal | Unknown]],
                   refuse: Callable[[str], R]) -> R:
    """`act(parsed arguments)`, with every refusal -- arguments the table refuses,
    the tree's `Refusal`, an `Unknown` handle -- turned into `refuse(words)`: the
    surfaces differ only in how they wrap the words (an isError result).  An
    unknown handle is named as the caller named it (a pool worker may have asked
    under another name)."""
    parsed = tool.parse(args)
    if isinstance(parsed, Refusal):
        return refuse(parsed.text)
    outcome = await act(parsed)
    if isinstance(outcome, Refusal):
        return refuse(outcome.text)
    if isinstance(outcome, Unknown):
        named = parsed.handle if isinstance(parsed, SendArgs | HandleArgs) else ""
        return refuse(unknown_handle(named or outcome.handle))
    return outcome


def str_arg(tool: str, args: dict[str, Any], key: str, *, required: bool = False
            ) -> str | Refusal | None:
    """A string argument of `tool` (None when absent and not required)."""
    value = args.get(key)
    if value is None:
        if required:
            return Refusal(f"{tool}: missing required argument {key!r}")
        return None
    if not isinstance(value, str):
        return Refusal(f"{tool}: argument {key!r} must be a string")
    return value


def scope_arg(tool: str, value: Any) -> tuple[str, ...] | Refusal | None:
    """A `tool_scope` argument: None (the caller's whole scope) or server names."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        return Refusal(f"{tool}: argument 'tool_scope' must be an array of strings")
    return tuple(value)


def _flag(tool: str, args: dict[str, Any], key: str) -> bool | Refusal:
    value = args.get(key, False)
    if not isinstance(value, bool):
        return Refusal(f"{tool}: argument {key!r} must be a boolean")
    return value


_ALL_MODES: Final = ("async", "warm", "detach")
_HANDLE_SCHEMA: Final = {"type": "object", "properties": {"handle": {"type": "string"}},
                         "required": ["handle"]}


def _spawn_parser(modes: Sequence[str]) -> Callable[[dict[str, Any]], SpawnRequest | Refusal]:
    name = "subagent.spawn"

    def parse(args: dict[str, Any]) -> SpawnRequest | Refusal:
        instruction = str_arg(name, args, "instruction", required=True)
        if isinstance(instruction, Refusal):
            return instruction
        if not (instruction or "").strip():
            return Refusal(f"{name}: the instruction is empty")
        contract = str_arg(name, args, "output_contract")
        if isinstance(contract, Refusal):
            return contract
        scope = scope_arg(name, args.get("tool_scope"))
        if isinstance(scope, Refusal):
            return scope
        chosen: list[str] = []
        for m in _ALL_MODES:
            flag = _flag(name, args, m)
            if isinstance(flag, Refusal):
                return flag
            if flag:
                chosen.append(m)
        if len(chosen) > 1:
            return Refusal(f"{name}: choose at most one spawn mode "
                           f"(got {' and '.join(chosen)})")
        if chosen and chosen[0] not in modes:
            return Refusal(f"{name}: the {chosen[0]} mode is not offered here "
                           f"(offered: sync, {', '.join(modes)})")
        return SpawnRequest(instruction=instruction or "", output_contract=contract,
                            tool_scope=scope,
                            mode=chosen[0] if chosen else "sync")  # type: ignore[arg-type]

    return parse


def _parse_send(args: dict[str, Any]) -> SendArgs | Refusal:
    handle = str_arg("subagent.send", args, "handle", required=True)
    if isinstance(handle, Refusal):
        return handle
    message = str_arg("subagent.send", args, "message", required=True)
    if isinstance(message, Refusal):
        return message
    return SendArgs(handle=handle or "", message=message or "")


def _handle_parser(name: str) -> Callable[[dict[str, Any]], HandleArgs | Refusal]:
    def parse(args: dict[str, Any]) -> HandleArgs | Refusal:
        handle = str_arg(name, args, "handle", required=True)
        if isinstance(handle, Refusal):
            return handle
        return HandleArgs(handle=handle or "")

    return parse


def tools(modes: Sequence[str] = LOOP_MODES) -> dict[str, SpawnTool]:
    """The four subagent tools (spec names) for a surface offering `modes`
    besides sync: `LOOP_MODES` for the loop, `SERVED_MODES` for the self-MCP."""
    unknown = [m for m in modes if m not in _ALL_MODES]
    if unknown:
        raise ValueError(f"unknown spawn modes {unknown}")
    props: dict[str, Any] = {
        "instruction": {"type": "string"},
        "output_contract": {"type": "string"},
        "tool_scope": TOOL_SCOPE_SCHEMA,
    }
    for m in modes:
        props[m] = {"type": "boolean", "default": False}
    about = {
        "async": "async returns a handle at once (see its status)",
        "warm": "warm keeps a session for subagent.send",
        "detach": "detach runs on its own",
    }
    spawn = SpawnTool(
        "subagent.spawn",
        "Run a task in a new subagent and return its result. sync (default) waits; "
        + "; ".join(about[m] for m in modes)
        + ". tool_scope: the MCP servers it may use.",
        {"type": "object", "properties": props, "required": ["instruction"]},
        _spawn_parser(tuple(modes)), _spawn)
    send = SpawnTool(
        "subagent.send", "Send a message to a warm subagent; returns its state.",
        {"type": "object",
         "properties": {"handle": {"type": "string"}, "message": {"type": "string"}},
         "required": ["handle", "message"]},
        _parse_send, _send)
    status = SpawnTool(
        "subagent.status", "A subagent's status, and its result once done.",
        dict(_HANDLE_SCHEMA), _handle_parser("subagent.status"), _status)
    cancel = SpawnTool(
        "subagent.cancel", "Cancel a subagent and its subtree.",
        dict(_HANDLE_SCHEMA), _handle_parser("subagent.cancel"), _cancel)
    return {t.name: t for t in (spawn, send, status, cancel)}
