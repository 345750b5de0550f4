"""``Toolbox``: every declared MCP server as one catalogue for the agent.

An async context manager over ``MCPClient`` instances (one per ``ServerSpec``),
connected concurrently.  A required server that fails its handshake raises
:class:`RequiredServerLost` with ``handshake`` set (exit 6, before the
intelligence is called); an optional one is logged (``mcp.server.omitted``) and
left out.

Tools are offered under qualified names ``{server}__{tool}``: every character
outside ``[A-Za-z0-9_-]`` becomes ``_``, the name is cut to 64 characters and
made unique with a short hash suffix when two would collide; the toolbox maps
them back.  ``call()`` returns the model-facing :class:`Observation`; protocol
faults raise :class:`ToolFault` and never become observations.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec

from agentd.config.model import DEFAULT_INIT_TIMEOUT, DEFAULT_PING_INTERVAL, ServerSpec
from agentd.errors import ToolFault
from agentd.log import log
from agentd.mcp.client.rules.faults import (
    RequiredServerLost,
    RetryPolicy,
    idempotent_tool,
    kind,
)
from agentd.mcp.client.seams import AgentToolbox, ResourceServer
from agentd.mcp.client.updates import UpdateQueue
from agentd.secrets import DEFAULT_SECRETS_DIR
from agentd.wire.shapes import Observation, ResourceInfo, ToolEntry

if TYPE_CHECKING:
    # The client (its session and schema modules with it) is imported where
    # a Toolbox connects or answers: the ownership rule alone (`owner_of`, which a
    # brokered child and the reactive side import) needs none of it.
    from agentd.mcp.client.facade import MCPClient

__all__ = [
    "MAX_TOOL_NAME",
    "RequiredServerLost",
    "ToolEntry",
    "ToolFault",
    "Toolbox",
    "Unowned",
    "owner_of",
    "qualify",
    "resource_servers",
]

MAX_TOOL_NAME: Final = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def qualify(server: str, tool: str, taken: set[str] | None = None) -> str:
    """``{server}__{tool}`` sanitised to ``[A-Za-z0-9_-]``, ≤ 64 chars, unique in ``taken``."""
    base = _UNSAFE.sub("_", f"{server}__{tool}")
    name = base[:MAX_TOOL_NAME]
    if taken is None or name not in taken:
        return name
    import hashlib  # only on a collision: hashlib's OpenSSL set-up is ≈ 0.5 MiB per process

    digest = hashlib.sha1(f"{server}\0{tool}".encode()).hexdigest()
    for n in range(len(digest) // 8):
        suffix = "_" + digest[n * 8:(n + 1) * 8]
        cand = base[:MAX_TOOL_NAME - len(suffix)] + suffix
        if cand not in taken:
            return cand
    i = 2
    while True:  # practically unreachable
        suffix = f"_{i}"
        cand = base[:MAX_TOOL_NAME - len(suffix)] + suffix
        if cand not in taken:
            return cand
        i += 1


class Unowned(msgspec.Struct, frozen=True):
    """The ownership rule's refusal (:func:`owner_of`), returned, never raised:
    no server owns ``uri``, or several could and the caller named none
    (``candidates``, sorted: then the caller sees an error naming them, never a
    guess).  ``reason`` is the whole sentence for the caller; nothing was sent."""

    uri: str
    reason: str
    candidates: tuple[str, ...] = ()

    @property
    def ambiguous(self) -> bool:
        return bool(self.candidates)


def _ambiguous(uri: str, candidates: Iterable[str], why: str) -> Unowned:
    names = tuple(sorted(candidates))
    return Unowned(uri, f"ambiguous resource {uri}: {why} ({', '.join(names)}); name one "
                        "with the 'server' argument", names)


def resource_servers(toolbox: AgentToolbox | None) -> list[ResourceServer]:
    """The per-server clients behind a toolbox: its ``clients`` (a
    :class:`Toolbox`'s, or `WithPeers`', which adds A2A peers' resource sources),
    none for a brokered child's (its parent decides) or no toolbox."""
    return list(toolbox.clients.values()) if toolbox is not None else []


_Server = TypeVar("_Server", bound=ResourceServer)


def owner_of(uri: str, clients: Iterable[_Server], server: str | None = None, *,
             subscribe: bool = False) -> _Server | Unowned:
    """THE rule for which server owns a resource URI, for reads, subscriptions,
    ``await_resource`` and the reactive daemon alike:

    1. the server the caller names (``server``);
    2. else the one server whose resource catalogue lists ``uri``;
    3. else, for a URI nobody lists, the only server that serves resources at
       all -- for a subscription it must also advertise
       ``resources.subscribe`` (a presumed owner that cannot take one is no
       owner; a listing owner that cannot is the caller's ``unsupported``).

    Several servers listing it, or several serving resources and none listing
    it, return an ambiguous :class:`Unowned` naming them; no candidate, an
    :class:`Unowned` saying why."""
    clients = list(clients)
    if server is not None:
        for c in clients:
            if c.name == server:
                return c
        known = ", ".join(sorted(c.name for c in clients)) or "none"
        return Unowned(uri, f"no connected server is named {server!r} (connected: {known})")
    listing = [c for c in clients if any(r.uri == uri for r in c.resources)]
    if len(listing) == 1:
        return listing[0]
    if listing:
        return _ambiguous(uri, [c.name for c in listing], f"listed by {len(listing)} servers")
    serving = [c for c in clients if c.capabilities.resources]
    if len(serving) > 1:
        return _ambiguous(uri, [c.name for c in serving],
                          f"no server lists it and {len(serving)} serve resources")
    if not serving:
        return Unowned(uri, "no server serves resources" if clients
                       else "no MCP server is declared")
    if subscribe and not serving[0].capabilities.resources_subscribe:
        return Unowned(uri, f"no server lists it and the only one serving resources "
                            f"({serving[0].name}) does not advertise resources.subscribe")
    return serving[0]


class Toolbox:
    """All declared servers; see the module docstring."""

    def __init__(self, servers: Sequence[ServerSpec], *, run_id: str = "",
                 init_timeout: float = DEFAULT_INIT_TIMEOUT,
                 ping_interval: float | None = DEFAULT_PING_INTERVAL,
                 secrets_dir: str = DEFAULT_SECRETS_DIR,
                 policy: RetryPolicy | None = None, **client_options: Any) -> None:
        self.specs = tuple(servers)
        self.run_id = run_id
        self.updates = UpdateQueue()  # the broker routes its children's updates
        self.clients: dict[str, MCPClient] = {}
        self.omitted: dict[str, str] = {}  # optional servers left out -> why
        self._options = dict(run_id=run_id, init_timeout=init_timeout,
                             ping_interval=ping_interval, secrets_dir=secrets_dir,
                             policy=policy, **client_options)
        self._stack: AsyncExitStack | None = None
        self._tools: dict[str, ToolEntry] = {}
        self._tools_key: tuple = ()
        # set when a required server is lost after its handshake (agentd.mcp.client.rules.faults):
        # the run waits on it beside its loop and ends with exit 1
        self.lost: asyncio.Future[RequiredServerLost] | None = None
        self._gone_notices: list[tuple[str, str]] = []

    # ------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Toolbox:
        stack = AsyncExitStack()
        await stack.__aenter__()
        self._stack = stack
        self.lost = asyncio.get_running_loop().create_future()
        from agentd.errors import HandshakeError
        from agentd.mcp.client.facade import MCPClient

        clients = {s.name: MCPClient(s, updates=self.updates, on_gone=self._on_gone,
                                     **self._options)
                   for s in self.specs}
        results: dict[str, BaseException | None] = {}

        async def connect(name: str) -> None:
            try:
                await clients[name].__aenter__()
                results[name] = None
            except (HandshakeError, OSError, ToolFault) as exc:
                results[name] = exc
            except Exception as exc:  # e.g. a secret that cannot be resolved
                results[name] = exc

        try:
            async with asyncio.TaskGroup() as tg:
                for name in clients:
                    tg.create_task(connect(name))
            for spec in self.specs:
                exc = results.get(spec.name)
                if exc is None:
                    self.clients[spec.name] = clients[spec.name]
                    stack.push_async_exit(clients[spec.name].__aexit__)
            for spec in self.specs:
                exc = results.get(spec.name)
                if exc is None:
                    continue
                if spec.required:
                    log.error("mcp.server.failed", server=spec.name, required=True,
                              error=str(exc)[:500])
                    raise RequiredServerLost(spec.name, str(exc), handshake=True)
                self.omitted[spec.name] = str(exc)
                log.warning("mcp.server.omitted", server=spec.name, error=str(exc)[:500])
        except BaseException:
            self._stack = None
            await stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    # ------------------------------------------------------------ catalogue

    @property
    def tools(self) -> dict[str, ToolEntry]:
        """Qualified name -> entry, across servers (rebuilt when a server re-lists)."""
        key = tuple((n, c.tools_version) for n, c in self.clients.items())
        if key != self._tools_key:
            taken: set[str] = set()
            out: dict[str, ToolEntry] = {}
            for name, client in self.clients.items():
                for info in client.tools.values():
                    q = qualify(name, info.name, taken)
                    taken.add(q)
                    out[q] = ToolEntry(qualified=q, server=name, name=info.name,
                                       description=info.description,
                                       input_schema=info.input_schema)
            self._tools, self._tools_key = out, key
        return self._tools

    @property
    def resources(self) -> list[ResourceInfo]:
        return [r for c in self.clients.values() for r in c.resources]

    @property
    def resource_templates(self) -> dict[str, list]:
        return {n: list(c.resource_templates) for n, c in self.clients.items()}

    @property
    def instructions(self) -> dict[str, str]:
        """Per-server ``instructions`` (untrusted text)."""
        return {n: c.instructions for n, c in self.clients.items() if c.instructions}

    # ------------------------------------------------------------ calls

    async def call(self, qualified_name: str, arguments: Mapping[str, Any] | str | bytes | None
                   = None, *, time_limit: float | None = None) -> Observation:
        """Call a tool by qualified name.  An unknown name is an observation."""
        entry = self.tools.get(qualified_name)
        if entry is None:
            return Observation(f"unknown tool {qualified_name!r}", is_error=True)
        client = self.clients[entry.server]
        return await self._guarded(
            client, lambda: client.call_tool(entry.name, arguments, time_limit=time_limit),
            what=f"tools/call {entry.name}")

    def idempotent(self, qualified_name: str) -> bool:
        """Whether a call of this tool may be sent twice: its server declares it
        idempotent or read-only, by the one rule the client's re-sends follow
        (:func:`~agentd.mcp.client.rules.faults.idempotent_tool`).  False for a
        name no connected server lists.  The journal asks it of a call that was
        in flight when its worker stopped: only such a call is sent again."""
        entry = self.tools.get(qualified_name)
        if entry is None:
            return False
        client = self.clients.get(entry.server)
        info = client.tools.get(entry.name) if client is not None else None
        return info is not None and idempotent_tool(info.annotations)

    # ------------------------------------------------------------ fault policy

    def _spec(self, server: str) -> ServerSpec | None:
        return next((s for s in self.specs if s.name == server), None)

    async def _guarded(self, client: MCPClient, op: Any, *, what: str) -> Any:
        """``op``, with the outcome of the fault policy applied to the run: the
        client already decided (and made any re-send: nothing here sends again);
        an abort cause ends the run or drops the server, any other fault goes
        on to the caller (the agent loop makes it the model's notice)."""
        try:
            return await op()
        except ToolFault as exc:
            outcome = kind(exc)
            log.warning("mcp.fault", server=client.name, what=what, kind=outcome,
                        cause=exc.cause, fault=exc.message[:300])
            if outcome == "abort":
                return await self._abort(client.name,
                                         exc.message.removeprefix(f"{exc.method}: "))
            raise

    async def _abort(self, server: str, reason: str) -> Observation:
        """An abort-class fault: a required server ends the run; an optional one
        leaves the catalogue and the model is told once (fenced: the reason may
        carry server text)."""
        spec = self._spec(server)
        if spec is None or spec.required:
            exc = RequiredServerLost(server, reason)
            log.error("mcp.server.lost", server=server, required=True, fault=reason[:500])
            if self.lost is not None and not self.lost.done():
                self.lost.set_result(exc)
            raise exc
        await self.drop(server, reason)
        return Observation(f"MCP server {server!r} was left out of the catalogue after a "
                           f"fault ({reason}); its tools and resources are no longer "
                           "available.", is_error=True)

    async def drop(self, server: str, reason: str) -> None:
        """Take an optional server out of the catalogue and close its connection."""
        client = self.clients.pop(server, None)
        if client is None:
            return
        self.omitted[server] = reason
        log.warning("mcp.server.dropped", server=server, fault=reason[:500])
        try:
            await client.aclose()
        except Exception as exc:  # closing a broken connection must not end the run
            log.info("mcp.server.close_failed", server=server, error=str(exc)[:300])

    def _on_gone(self, client: MCPClient, reason: str) -> None:
        """A client gave its connection up (stale): act on it now, not at the next call."""
        spec = self._spec(client.name)
        fault = f"server gone ({reason})"
        if spec is None or spec.required:
            log.error("mcp.server.lost", server=client.name, required=True, fault=fault)
            if self.lost is not None and not self.lost.done():
                self.lost.set_result(RequiredServerLost(client.name, fault))
            return
        if self.clients.get(client.name) is client:  # optional: out of the catalogue now
            self.clients.pop(client.name, None)
            self.omitted[client.name] = fault
            self._gone_notices.append((client.name, fault))
            log.warning("mcp.server.dropped", server=client.name, fault=fault)

    def take_notices(self) -> list[tuple[str, str]]:
        """Optional servers dropped since the last call, for the model (told once)."""
        out, self._gone_notices = self._gone_notices, []
        return out

    def required_down(self) -> list[str]:
        """The required servers not connected now (given up, or between reconnects):
        what readiness reports, by name only."""
        return sorted(n for n, c in self.clients.items()
                      if c.spec.required and (c.gone or not c.connected))

    def owner(self, uri: str, server: str | None = None, *, subscribe: bool = False
              ) -> MCPClient | Unowned:
        """The client serving ``uri`` by the one rule (:func:`owner_of`), or its refusal."""
        return owner_of(uri, self.clients.values(), server, subscribe=subscribe)

    async def read_resource(self, uri: str, *, server: str | None = None) -> Observation:
        """The current body of ``uri`` from its owner; no owner, or an ambiguous
        one, is an error observation (the model can name the server)."""
        client = self.owner(uri, server)
        if isinstance(client, Unowned):
            return Observation(client.reason if client.ambiguous or server is not None
                               else f"resource not found: {uri}", is_error=True)
        return await self._guarded(client, lambda: client.read_resource(uri),
                                   what=f"resources/read {uri}")

    async def subscribe(self, uri: str, *, server: str | None = None) -> bool:
        """Subscribe to a concrete URI on its owner; False when not possible
        (degraded): no owner, or an ambiguous one, is logged
        (``mcp.subscribe.no_owner``, the reason naming the candidates)."""
        client = self.owner(uri, server, subscribe=True)
        if isinstance(client, Unowned):
            log.warning("mcp.subscribe.no_owner", uri=uri, reason=client.reason,
                        candidates=list(client.candidates))
            return False
        result = await self._guarded(client, lambda: client.subscribe(uri),
                                     what=f"resources/subscribe {uri}")
        return result is True

    async def unsubscribe(self, uri: str, *, server: str | None = None) -> None:
        for c in ([self.clients[server]] if server in self.clients else self.clients.values()):
            await c.unsubscribe(uri)

    async def next_update(self) -> tuple[str, str, Observation]:
        """Notify-then-read: wait for the next ``updated`` wake and read the resource now."""
        while True:
            server, uri = await self.updates.get()
            client = self.clients.get(server)
            if client is not None:  # else: left out by the fault policy meanwhile
                return server, uri, await self._guarded(
                    client, lambda c=client, u=uri: c.read_resource(u),
                    what=f"resources/read {uri}")

    def servers(self) -> Iterable[str]:
        return self.clients.keys()
