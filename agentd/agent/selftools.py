"""agentd's own tools in the loop, under the server name `agentd`.

Offered to the model next to the MCP tools (spec §1.1: "its only built-in tools
are its self/control primitives"):

* `agentd__read_resource {uri, server?}` — attention on demand: the body of a
  resource from the catalogue, or an `agent://` resource of this agent's tree
  (an `agent://subagent/...` this agent does not know is read through the MCP
  servers: another agent served over MCP may own it). Which server owns a URI
  is the toolbox's one rule; `server` names it when several could (an
  ambiguous owner is an `isError` result naming them);
* `agentd__subscribe {uri, server?}` / `agentd__unsubscribe {uri}` —
  self-scheduling (spec §2.4): the request is queued, bounded per run, and
  applied by the daemon after the run; `isError` only for an empty URI or the
  cap. Offered in reactive mode only: a task run has no daemon to apply them,
  and a tool that answers "queued" for nothing tells the model what is not so;
* `agentd__subagent_spawn/_send/_status/_cancel` — the one table of
  `agentd.agent.spawn_tools` (the self-MCP serves it too), routed to the one
  `SubagentBackend` (the tree's chokepoint); a refusal is an `isError` result
  in the table's words.

Hook: other layers add tools with `SelfTools.add(SelfTool(...))` — the tree adds
`graph.run`, the reactive layer `await_resource` — before the loop starts.

Which are offered is the operator's choice (`--self-tools`, `OFFERS`): all of
them, only the four subagent tools, or none; a tool outside the set is never
added, so the model neither sees nor can call it (docs/agent.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson

from agentd.agent import spawn_tools
from agentd.agent.spawn_tools import str_arg
from agentd.agent.subagents import (
    HandleState,
    Refusal,
    SubagentBackend,
    Unavailable,
    Unknown,
)
from agentd.errors import ConfigError
from agentd.mcp.selftool import SelfTool, error, ok
from agentd.wire.shapes import Observed, ToolEntry

AGENT_SCHEME = "agent://"
# --self-tools: the sets offered (the subagent tools are spawn_tools' table)
OFFERS = ("all", "spawn", "none")
DEFAULT_OFFER = "all"
SPAWN_NAMES = frozenset(("subagent.spawn", "subagent.send", "subagent.status",
                         "subagent.cancel"))
SUBSCRIBE_NAMES = frozenset(("subscribe", "unsubscribe"))


def check_offer(value: object) -> str:
    """`--self-tools` / config `self_tools`, validated (exit 2 on anything else)."""
    if value not in OFFERS:
        raise ConfigError(f"--self-tools {value!r}: expected one of {', '.join(OFFERS)} "
                          "(config key `self_tools`)")
    return str(value)


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def _text(value: str | Refusal | None) -> str:
    """A parsed string argument once its refusal was answered ("" when absent)."""
    return value if isinstance(value, str) else ""


def _shown(state: HandleState | Refusal | Unknown) -> Observed | Refusal | Unknown:
    """A handle's state as the model sees it (its agent:// body); a refusal or an
    unknown handle is left for `spawn_tools.dispatch` to word."""
    if isinstance(state, HandleState):
        body = state.body()  # once: a running body's age moves
        return ok(_json(body), body)
    return state


class ResourceReader(Protocol):
    """What the resource self-tools read through: the run's toolbox (`AgentToolbox`)."""

    async def read_resource(self, uri: str, *, server: str | None = None) -> Observed: ...


_URI = {"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}
_URI_SERVER = {"type": "object",
               "properties": {"uri": {"type": "string"}, "server": {"type": "string"}},
               "required": ["uri"]}


class SelfTools:
    """The self-tools of one run (one agent: root `0` or a subagent's handle)."""

    def __init__(self, *, resources: ResourceReader | None = None,
                 backend: SubagentBackend | None = None, caller: str = "0",
                 max_subscriptions: int = 64,
                 status_body: Callable[[], dict[str, Any]] | None = None,
                 subagents: bool = True, offer: str = DEFAULT_OFFER,
                 subscriptions: bool = True) -> None:
        self.resources = resources
        self.backend: SubagentBackend = backend if backend is not None else Unavailable()
        self.caller = caller
        self.max_subscriptions = max_subscriptions
        self.status_body = status_body
        # Queued for the daemon, applied after the run (spec §2.4), in order.
        self.subscriptions: list[str] = []
        self.unsubscriptions: list[str] = []
        self.subscription_servers: dict[str, str] = {}  # a queued URI -> the server named
        self._tools: dict[str, SelfTool] = {}
        self.offer = offer
        self.offers_subscriptions = subscriptions
        self.add(SelfTool(
            "read_resource",
            "Read a resource by URI (from the catalogue, or agent://status, "
            "agent://subagent/{handle}). server: its MCP server, if ambiguous.",
            _URI_SERVER, self._read_resource))
        self.add(SelfTool(
            "subscribe",
            "Subscribe to a resource URI: applied when this run ends; a later change "
            "wakes the agent. server: its MCP server, if ambiguous.",
            _URI_SERVER, self._subscribe))
        self.add(SelfTool(
            "unsubscribe", "Drop a subscription to a resource URI (applied when this run ends).",
            _URI, self._unsubscribe))
        if subagents:
            self._add_subagent_tools()

    # -- registry ------------------------------------------------------------

    def add(self, tool: SelfTool) -> None:
        """Add (or replace) a self-tool: the hook for graph.run, await_resource, ...;
        one outside the offered set is left out."""
        if self.offers(tool.name):
            self._tools[tool.qualified] = tool

    def offers(self, name: str) -> bool:
        """Whether the tool of spec name `name` is in this run's set."""
        if self.offer == "none" or (self.offer == "spawn" and name not in SPAWN_NAMES):
            return False
        return self.offers_subscriptions or name not in SUBSCRIBE_NAMES

    def __contains__(self, qualified: str) -> bool:
        return qualified in self._tools

    def entries(self) -> list[ToolEntry]:
        """The self-tools as offered to the model (agentd's own text: never fenced)."""
        return [t.entry() for t in self._tools.values()]

    async def call(self, qualified: str, arguments: dict[str, Any]) -> Observed:
        tool = self._tools[qualified]
        try:
            return await tool.handler(arguments)
        except ValueError as exc:  # a hooked tool's own validation
            return error(f"{tool.name}: {exc}")

    # -- resources and subscriptions ----------------------------------------

    async def _read_resource(self, args: dict[str, Any]) -> Observed:
        uri = str_arg("read_resource", args, "uri", required=True)
        server = str_arg("read_resource", args, "server")
        for refused in (uri, server):  # argument validation: the model can fix it
            if isinstance(refused, Refusal):
                return error(refused.text)
        uri, server = _text(uri), _text(server) or None
        if not uri:
            return error("read_resource: the uri is empty")
        if server is not None:  # the caller named the owner: no agent:// of ours
            if self.resources is None:
                return error(f"read_resource: no MCP server is connected that serves {uri}")
            return await self.resources.read_resource(uri, server=server)
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

    def _read_agent(self, uri: str) -> Observed:
        rest = uri[len(AGENT_SCHEME):]
        if rest == "status":
            body = self.status_body() if self.status_body else {
                "handle": self.caller, "spawns": self.backend.counts()}
            return ok(_json(body), body)
        if rest.startswith("subagent/"):
            shown = _shown(self._status_of(rest[len("subagent/"):]))
            if not isinstance(shown, Observed):  # unknown, or not this loop's
                return error(f"read_resource: resource not found: {uri}")
            return shown
        return error(f"read_resource: resource not found: {uri}")

    async def _subscribe(self, args: dict[str, Any]) -> Observed:
        given = str_arg("subscribe", args, "uri")
        named = str_arg("subscribe", args, "server")
        for refused in (given, named):
            if isinstance(refused, Refusal):
                return error(refused.text)
        uri, server = _text(given).strip(), _text(named) or None
        if not uri:
            return error("subscribe: the uri is empty")
        if uri in self.subscriptions:
            self._name_server(uri, server)
            return ok(f"already queued: subscription to {uri}")
        if len(self.subscriptions) >= self.max_subscriptions:
            return error(f"subscribe: the per-run subscription cap "
                         f"({self.max_subscriptions}) is reached")
        self.subscriptions.append(uri)
        self._name_server(uri, server)
        if uri in self.unsubscriptions:
            self.unsubscriptions.remove(uri)
        return ok(f"queued: subscription to {uri} is applied when this run finishes")

    def _name_server(self, uri: str, server: str | None) -> None:
        if server is None:
            self.subscription_servers.pop(uri, None)
        else:
            self.subscription_servers[uri] = server

    async def _unsubscribe(self, args: dict[str, Any]) -> Observed:
        given = str_arg("unsubscribe", args, "uri")
        if isinstance(given, Refusal):
            return error(given.text)
        uri = _text(given).strip()
        if not uri:
            return error("unsubscribe: the uri is empty")
        if uri in self.subscriptions:
            self.subscriptions.remove(uri)
            self.subscription_servers.pop(uri, None)
        elif uri not in self.unsubscriptions:
            self.unsubscriptions.append(uri)
        return ok(f"queued: unsubscription from {uri}")

    # -- subagents -----------------------------------------------------------

    def _add_subagent_tools(self) -> None:
        for tool in spawn_tools.tools(spawn_tools.LOOP_MODES).values():
            self.add(SelfTool(tool.name, tool.description, tool.input_schema,
                              self._refusing(tool)))

    def _refusing(self, tool: spawn_tools.SpawnTool) -> Any:
        """The table's operation for this loop's caller; every refusal is an isError
        observation in the table's words (the self-MCP says the same)."""
        async def act(parsed: Any) -> Observed | Refusal | Unknown:
            return _shown(await tool.act(self.backend, self.caller, None, parsed))

        async def handler(args: dict[str, Any]) -> Any:
            return await spawn_tools.dispatch(tool, args, act, error)

        return handler

    def _status_of(self, handle: str) -> HandleState | Unknown:
        """A loop sees only its own subtree: the backend answers anything else (a
        peer's served.N, a sibling's run) as an unknown handle (docs/security.md)."""
        return self.backend.status(self.caller, handle)
