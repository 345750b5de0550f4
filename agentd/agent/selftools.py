"""agentd's own tools in the loop, under the server name `agentd`.

Offered to the model next to the MCP tools (spec §1.1: "its only built-in tools
are its self/control primitives"):

* `agentd__read_resource {uri}` — attention on demand: the body of a resource
  from the catalogue, or an `agent://` resource of this agent's tree (an
  `agent://subagent/...` this agent does not know is read through the MCP
  servers: another agent served over MCP may own it);
* `agentd__subscribe {uri}` / `agentd__unsubscribe {uri}` — self-scheduling
  (spec §2.4): the request is queued, bounded per run, and applied by the
  daemon after the run; `isError` only for an empty URI or the cap;
* `agentd__subagent_spawn/_send/_status/_cancel` — routed to the one
  `SubagentBackend` (the tree's chokepoint); a refusal is an `isError` result.

Hook: other layers add tools with `SelfTools.add(SelfTool(...))` — the tree adds
`graph.run`, the reactive layer `await_resource` — before the loop starts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec
import orjson

from agentd.agent.prompt import ToolEntry
from agentd.tree.api import (
    SpawnRefused,
    SpawnRequest,
    SubagentBackend,
    Unavailable,
    UnknownHandle,
)

SERVER = "agentd"
SEP = "__"
PREFIX = SERVER + SEP
AGENT_SCHEME = "agent://"


class SelfObservation(msgspec.Struct):
    """Same shape as the MCP client's `Observation` (text, is_error, structured)."""

    text: str
    is_error: bool = False
    structured: Any = None


def ok(text: str, structured: Any = None) -> SelfObservation:
    return SelfObservation(text=text, is_error=False, structured=structured)


def error(text: str) -> SelfObservation:
    return SelfObservation(text=text, is_error=True)


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class SelfTool(msgspec.Struct, frozen=True):
    """One self-tool. `name` is the spec name (`subagent.spawn`); the model sees
    `agentd__subagent_spawn`. The handler returns an object with `text`,
    `is_error` and `structured` (a SelfObservation or the client's Observation)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler

    @property
    def qualified(self) -> str:
        return PREFIX + self.name.replace(".", "_").replace("/", "_")


class ResourceReader(Protocol):
    async def read_resource(self, uri: str) -> Any: ...


def _str_arg(args: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = args.get(key)
    if value is None:
        if required:
            raise ValueError(f"missing required argument {key!r}")
        return None
    if not isinstance(value, str):
        raise ValueError(f"argument {key!r} must be a string")
    return value


def _bool_arg(args: dict[str, Any], key: str) -> bool:
    value = args.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"argument {key!r} must be a boolean")
    return value


_URI = {"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}
_HANDLE = {"type": "object", "properties": {"handle": {"type": "string"}},
           "required": ["handle"]}


class SelfTools:
    """The self-tools of one run (one agent: root `0` or a subagent's handle)."""

    def __init__(self, *, resources: ResourceReader | None = None,
                 backend: SubagentBackend | None = None, caller: str = "0",
                 max_subscriptions: int = 64,
                 status_body: Callable[[], dict[str, Any]] | None = None,
                 subagents: bool = True) -> None:
        self.resources = resources
        self.backend: SubagentBackend = backend if backend is not None else Unavailable()
        self.caller = caller
        self.max_subscriptions = max_subscriptions
        self.status_body = status_body
        # Queued for the daemon, applied after the run (spec §2.4), in order.
        self.subscriptions: list[str] = []
        self.unsubscriptions: list[str] = []
        self._tools: dict[str, SelfTool] = {}
        self.add(SelfTool(
            "read_resource",
            "Read the current body of a resource by URI (one from the resource catalogue, "
            "or agent://status / agent://subagent/{handle}).",
            _URI, self._read_resource))
        self.add(SelfTool(
            "subscribe",
            "Subscribe this agent to an MCP resource URI: the subscription is queued and "
            "applied after this run, so a later change wakes the agent (reactive mode).",
            _URI, self._subscribe))
        self.add(SelfTool(
            "unsubscribe", "Drop a subscription to a resource URI (queued like subscribe).",
            _URI, self._unsubscribe))
        if subagents:
            self._add_subagent_tools()

    # -- registry ------------------------------------------------------------

    def add(self, tool: SelfTool) -> None:
        """Add (or replace) a self-tool: the hook for graph.run, await_resource, ..."""
        self._tools[tool.qualified] = tool

    def __contains__(self, qualified: str) -> bool:
        return qualified in self._tools

    def entries(self) -> list[ToolEntry]:
        return [ToolEntry(name=t.qualified, description=t.description,
                          input_schema=t.input_schema, server=SERVER, trusted=True)
                for t in self._tools.values()]

    async def call(self, qualified: str, arguments: dict[str, Any]) -> Any:
        tool = self._tools[qualified]
        try:
            return await tool.handler(arguments)
        except ValueError as exc:  # argument validation: the model can fix it
            return error(f"{tool.name}: {exc}")

    # -- resources and subscriptions ----------------------------------------

    async def _read_resource(self, args: dict[str, Any]) -> Any:
        uri = _str_arg(args, "uri", required=True) or ""
        if not uri:
            return error("read_resource: the uri is empty")
        if uri.startswith(AGENT_SCHEME):
            own = self._read_agent(uri)
            if not own.is_error or self.resources is None or uri == AGENT_SCHEME + "status":
                return own
            # Not this agent's: another agent served as an MCP server may own it
            # (a worker's agent://subagent/served.N).
            return await self.resources.read_resource(uri)
        if self.resources is None:
            return error(f"read_resource: no MCP server is connected that serves {uri}")
        return await self.resources.read_resource(uri)

    def _read_agent(self, uri: str) -> SelfObservation:
        rest = uri[len(AGENT_SCHEME):]
        if rest == "status":
            body = self.status_body() if self.status_body else {
                "handle": self.caller, "spawns": self.backend.counts()}
            return ok(_json(body), body)
        if rest.startswith("subagent/"):
            handle = rest[len("subagent/"):]
            try:
                body = self._status_of(handle).body()
            except UnknownHandle:
                return error(f"read_resource: resource not found: {uri}")
            return ok(_json(body), body)
        return error(f"read_resource: resource not found: {uri}")

    async def _subscribe(self, args: dict[str, Any]) -> SelfObservation:
        uri = (_str_arg(args, "uri") or "").strip()
        if not uri:
            return error("subscribe: the uri is empty")
        if uri in self.subscriptions:
            return ok(f"already queued: subscription to {uri}")
        if len(self.subscriptions) >= self.max_subscriptions:
            return error(f"subscribe: the per-run subscription cap "
                         f"({self.max_subscriptions}) is reached")
        self.subscriptions.append(uri)
        if uri in self.unsubscriptions:
            self.unsubscriptions.remove(uri)
        return ok(f"queued: subscription to {uri} is applied when this run finishes")

    async def _unsubscribe(self, args: dict[str, Any]) -> SelfObservation:
        uri = (_str_arg(args, "uri") or "").strip()
        if not uri:
            return error("unsubscribe: the uri is empty")
        if uri in self.subscriptions:
            self.subscriptions.remove(uri)
        elif uri not in self.unsubscriptions:
            self.unsubscriptions.append(uri)
        return ok(f"queued: unsubscription from {uri}")

    # -- subagents -----------------------------------------------------------

    def _add_subagent_tools(self) -> None:
        self.add(SelfTool(
            "subagent.spawn",
            "Delegate a task to a fresh subagent and get its distilled result. sync (default) "
            "blocks until it is done; async returns a handle at once (read "
            "agent://subagent/{handle} or call subagent_status later); warm keeps it alive "
            "for subagent_send; detach lets it run on its own. tool_scope narrows the MCP "
            "servers it may use.",
            {"type": "object",
             "properties": {
                 "instruction": {"type": "string"},
                 "output_contract": {"type": "string"},
                 "tool_scope": {"type": "array", "items": {"type": "string"}},
                 "async": {"type": "boolean", "default": False},
                 "warm": {"type": "boolean", "default": False},
                 "detach": {"type": "boolean", "default": False}},
             "required": ["instruction"]},
            self._spawn))
        self.add(SelfTool(
            "subagent.send", "Send another message into a warm subagent session.",
            {"type": "object",
             "properties": {"handle": {"type": "string"}, "message": {"type": "string"}},
             "required": ["handle", "message"]},
            self._send))
        self.add(SelfTool(
            "subagent.status", "Read a subagent's status (and its result once done).",
            _HANDLE, self._status))
        self.add(SelfTool(
            "subagent.cancel", "Cancel a subagent and its whole subtree.",
            _HANDLE, self._cancel))

    def _mine(self, handle: str) -> None:
        """A loop acts only on its own subtree: anything else (a peer's served.N,
        a sibling's run) is answered as an unknown handle (docs/security.md)."""
        if not handle.startswith(self.caller + "."):
            raise UnknownHandle(handle)

    def _status_of(self, handle: str) -> Any:
        self._mine(handle)
        return self.backend.status(handle)

    async def _spawn(self, args: dict[str, Any]) -> SelfObservation:
        instruction = _str_arg(args, "instruction", required=True) or ""
        if not instruction.strip():
            return error("subagent.spawn: the instruction is empty")
        contract = _str_arg(args, "output_contract")
        scope = args.get("tool_scope")
        if scope is not None and (not isinstance(scope, list)
                                  or not all(isinstance(s, str) for s in scope)):
            raise ValueError("argument 'tool_scope' must be an array of strings")
        modes = [m for m in ("async", "warm", "detach") if _bool_arg(args, m)]
        if len(modes) > 1:
            raise ValueError(f"choose at most one of async, warm, detach (got {modes})")
        request = SpawnRequest(instruction=instruction, output_contract=contract,
                               tool_scope=tuple(scope) if scope is not None else None,
                               mode=modes[0] if modes else "sync")  # type: ignore[arg-type]
        try:
            state = await self.backend.spawn(self.caller, request)
        except SpawnRefused as exc:
            return error(str(exc))
        body = state.body()
        return ok(_json(body), body)

    async def _send(self, args: dict[str, Any]) -> SelfObservation:
        handle = _str_arg(args, "handle", required=True) or ""
        message = _str_arg(args, "message", required=True) or ""
        try:
            self._mine(handle)
            state = await self.backend.send(self.caller, handle, message)
        except UnknownHandle:
            return error(f"subagent.send: unknown handle {handle!r}")
        except SpawnRefused as exc:
            return error(str(exc))
        body = state.body()
        return ok(_json(body), body)

    async def _status(self, args: dict[str, Any]) -> SelfObservation:
        handle = _str_arg(args, "handle", required=True) or ""
        try:
            body = self._status_of(handle).body()
        except UnknownHandle:
            return error(f"subagent.status: unknown handle {handle!r}")
        return ok(_json(body), body)

    async def _cancel(self, args: dict[str, Any]) -> SelfObservation:
        handle = _str_arg(args, "handle", required=True) or ""
        try:
            self._mine(handle)
            body = (await self.backend.cancel(handle)).body()
        except UnknownHandle:
            return error(f"subagent.cancel: unknown handle {handle!r}")
        return ok(_json(body), body)
