"""The parent's side of brokered I/O: a subagent's intelligence calls, MCP calls,
reads and subscriptions, performed by the root on its pooled connections.

A child holds no server spec, no gateway URL and no secret: its first frame
carries a `Catalogue` (the tools, resources and server instructions of the
servers in its `tool_scope`, taken from the root's already-connected
`Toolbox`: never re-listed), and everything it does goes up its control wire
as `io/request` (a tagged union, `agentd.child.control.IoRequest`). The
`Broker` answers each on behalf of the handle *of the pipe that asked*:

* `complete` — through the tree's `Metered` provider: the one token ledger and
  the one `FlowGate` (agentd.intelligence.ledger, agentd.intelligence.flow);
* `call` — the qualified tool must belong to a server in the child's scope
  (checked here, against the live Toolbox, whatever the child claims);
* `read` / `subscribe` / `unsubscribe` — the owning server must be in scope;
  an update for a subscribed resource goes to the children that subscribed
  to it (`io/updated`), and to the root's own update queue only when the root
  had subscribed to it itself (the Broker is the route of the Toolbox's
  `UpdateQueue`, agentd.mcp.client.updates, which every MCP client puts updates on).

A refusal is answered as the error object of the wire (codes IO_* of
agentd.child.control); a fault of the root's call as its `ToolFault`, carried
whole in the error's data, so the child raises the fault the root's own call
raised (`fault_error` / `fault_of`).

Processes are flat (every subagent is a child process of the root), so every
level of a deep tree is served here in one hop, with the asking child's own
(already narrowed) scope.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agentd.a2a.delegation import DelegateArgs, delegate
from agentd.a2a.peers import A2APeers, WithPeers
from agentd.child.control import (
    IO_CEILING,
    IO_FAULT,
    IO_SCOPE,
    IO_UNAVAILABLE,
    Catalogue,
    IoAnswer,
    IoCall,
    IoComplete,
    IoCompletion,
    IoDelegate,
    IoDone,
    IoRead,
    IoRequest,
    IoSubscribe,
    IoUnsubscribe,
    IoUpdated,
    fault_error,
    io_error,
)
from agentd.errors import IntelligenceError, ToolFault
from agentd.intelligence.ledger import Metered
from agentd.log import log
from agentd.mcp.client.facade import MCPClient
from agentd.mcp.client.seams import AgentToolbox
from agentd.mcp.client.toolbox import Toolbox, Unowned, owner_of
from agentd.mcp.client.updates import UpdateQueue
from agentd.wire.jsonrpc import ErrorObject
from agentd.wire.shapes import Observation, Observed

__all__ = ["Broker"]


class Broker:
    """Serves `io/request` for every child of one Supervisor (see the module doc).

    `intelligence` is the tree's `Metered` provider (or a factory of it, called at
    the first `complete`: a Supervisor without a model never builds one);
    `toolbox` the root's connected Toolbox (or the Toolbox with its A2A peers),
    or None when no server is declared. `notify(handle, IoUpdated)` delivers an
    update to a child (the Supervisor sends it on that child's wire).

    `serve` answers every request with an `IoResult` or, when it is refused or
    the call faulted, the JSON-RPC error object the child gets (`ErrorObject`,
    codes from agentd.child.control): a refusal is an expected outcome, not an
    exception.
    """

    def __init__(self, *, intelligence: Metered | Callable[[], Metered],
                 toolbox: AgentToolbox | None = None) -> None:
        if toolbox is not None and not isinstance(toolbox, Toolbox | WithPeers):
            # a child's BrokeredToolbox has nothing to broker: its parent does that
            raise TypeError(f"a Broker serves the root's Toolbox, not {type(toolbox).__name__}")
        self._intelligence = intelligence
        self.toolbox: Toolbox | WithPeers | None = toolbox
        self.peers: A2APeers | None = toolbox.peers if isinstance(toolbox, WithPeers) else None
        self.notify: Callable[[str, IoUpdated], None] | None = None
        self._catalogues: dict[frozenset[str], tuple[tuple, Catalogue]] = {}
        # (server, uri) -> handles subscribed; keys subscribed on the server only for children
        self._subs: dict[tuple[str, str], set[str]] = {}
        self._made: set[tuple[str, str]] = set()
        self.delivered: list[tuple[str, str, str]] = []  # (handle, server, uri), bounded
        self.calls = 0
        if toolbox is not None and isinstance(toolbox.updates, UpdateQueue):
            # every client of the toolbox puts its updates there: they pass here first
            toolbox.updates.route = self.route_update

    async def aclose(self) -> None:
        """Close the provider if it was ever built (the owner of a Broker calls this)."""
        if isinstance(self._intelligence, Metered):
            await self._intelligence.aclose()

    @property
    def intelligence(self) -> Metered:
        if not isinstance(self._intelligence, Metered):
            self._intelligence = self._intelligence()
        return self._intelligence

    # ------------------------------------------------------------- catalogue
    def _clients(self, scope: frozenset[str]) -> dict[str, Any]:
        tb = self.toolbox
        if tb is None:
            return {}
        return {n: c for n, c in tb.clients.items() if n in scope}

    def catalogue(self, scope: frozenset[str]) -> Catalogue | None:
        """What a child with `scope` may see; cached until a server re-lists."""
        tb = self.toolbox
        if tb is None or not scope:
            return None
        tools = tb.tools  # rebuilt by the Toolbox when a server re-listed
        key = (id(tools), tuple(id(c.resources) for c in self._clients(scope).values()))
        hit = self._catalogues.get(scope)
        if hit is not None and hit[0] == key:
            return hit[1]
        cat = Catalogue(
            tools=tuple(e for e in tools.values() if e.server in scope),
            resources=tuple(r for r in tb.resources if r.server in scope),
            instructions={n: t for n, t in tb.instructions.items() if n in scope},
            a2a_peers=tuple(p for p in (self.peers.clients if self.peers else ()) if p in scope))
        self._catalogues[scope] = (key, cat)
        return cat

    # ---------------------------------------------------------------- serving
    async def serve(self, handle: str, scope: frozenset[str], req: IoRequest) -> IoAnswer:
        """Perform one request of `handle` (whose scope is `scope`): its result, or
        the error object the child is answered with."""
        self.calls += 1
        if isinstance(req, IoComplete):
            try:
                completion = await self.intelligence.complete_for(handle, req.messages,
                                                                  req.tools)
            except IntelligenceError as exc:
                if exc.kind == "ceiling":
                    return io_error(IO_CEILING, str(exc))
                if exc.kind == "unavailable":
                    return io_error(IO_UNAVAILABLE, str(exc))
                raise
            return IoCompletion(completion)
        try:
            if isinstance(req, IoCall):
                return await self._call(handle, scope, req)
            if isinstance(req, IoRead):
                obs = await self._read(scope, req.uri, req.server)
                if isinstance(obs, ErrorObject):
                    return obs
                return Observed(obs.text, obs.is_error)  # a read carries no structured body
            if isinstance(req, IoSubscribe):
                done = await self._subscribe(handle, scope, req.uri, req.server)
                return done if isinstance(done, ErrorObject) else IoDone(done)
            if isinstance(req, IoUnsubscribe):
                await self._unsubscribe(handle, scope, req.uri, req.server)
                return IoDone(True)
            return await self._delegate(handle, scope, req)
        except ToolFault as exc:  # the child raises the same fault (retryable, cause, code)
            return fault_error(exc)

    @staticmethod
    def _scope_error(what: str) -> ErrorObject:
        return io_error(IO_SCOPE, f"{what} is not in this subagent's tool_scope")

    async def _call(self, handle: str, scope: frozenset[str],
                    req: IoCall) -> Observed | ErrorObject:
        tb = self.toolbox
        entry = tb.tools.get(req.name) if tb is not None else None
        if tb is None or entry is None or entry.server not in scope:
            # the same answer whether the tool exists elsewhere or not at all
            log.warning("subagent.io_refused", handle=handle, tool=req.name,
                        reason="not in tool_scope")
            return self._scope_error(f"tool {req.name!r}")
        # through the root's toolbox: the client's fault decision and its outcome
        # for the run (an abort cause) apply to a subagent's call as to the root's
        obs = await tb.call(req.name, req.arguments, time_limit=req.time_limit)
        return obs.bare()

    async def _delegate(self, handle: str, scope: frozenset[str],
                        req: IoDelegate) -> Observed | ErrorObject:
        """A subagent's a2a.delegate, on the root's peers, if the peer is in its scope."""
        peers = self.peers
        if peers is None or req.peer not in scope or req.peer not in peers.clients:
            log.warning("subagent.io_refused", handle=handle, peer=req.peer,
                        reason="not in tool_scope")
            return self._scope_error(f"A2A peer {req.peer!r}")
        obs = await delegate(peers, DelegateArgs({
            "peer": req.peer, "message": req.message, "async": req.mode_async,
            "task_id": req.task_id, "context_id": req.context_id}))
        return obs

    def _owner(self, scope: frozenset[str], uri: str, server: str | None, *,
               subscribe: bool = False) -> Any:
        """The toolbox's one ownership rule over this subagent's scope (its owner,
        or its `Unowned` refusal); a named server outside the scope is a scope error."""
        clients = self._clients(scope)
        if server is not None and server not in clients:
            return self._scope_error(f"server {server!r}")
        return owner_of(uri, clients.values(), server, subscribe=subscribe)

    async def _read(self, scope: frozenset[str], uri: str,
                    server: str | None) -> Observation | Observed | ErrorObject:
        owner = self._owner(scope, uri, server)
        if isinstance(owner, ErrorObject):
            return owner
        if isinstance(owner, Unowned):
            return Observed(owner.reason if owner.ambiguous else f"resource not found: {uri}",
                            is_error=True)
        if isinstance(owner, MCPClient) and self.toolbox is not None:
            # through the root's toolbox, as _call: the one fault decision applies
            return await self.toolbox.read_resource(uri, server=owner.name)
        obs: Observation = await owner.read_resource(uri)  # an A2A peer's resources
        return obs

    async def _subscribe(self, handle: str, scope: frozenset[str], uri: str,
                         server: str | None) -> bool | ErrorObject:
        owner = self._owner(scope, uri, server, subscribe=True)
        if isinstance(owner, ErrorObject):
            return owner
        if isinstance(owner, Unowned):
            if owner.ambiguous:
                return io_error(IO_FAULT, owner.reason)
            log.warning("mcp.subscribe.no_owner", uri=uri, handle=handle, reason=owner.reason)
            return False
        if isinstance(owner, ErrorObject):
            return owner
        key = (owner.name, uri)
        if key not in self._subs:
            already = uri in owner.subscriptions
            if not already:
                made = (await self.toolbox.subscribe(uri, server=owner.name)
                        if isinstance(owner, MCPClient) and self.toolbox is not None
                        else await owner.subscribe(uri))  # as _read
                if not made:
                    return False
                self._made.add(key)
            self._subs[key] = set()
        self._subs[key].add(handle)
        return True

    async def _unsubscribe(self, handle: str, scope: frozenset[str], uri: str,
                           server: str | None) -> None:
        for key in [k for k in self._subs if k[1] == uri and (server is None or k[0] == server)
                    and k[0] in scope]:
            await self._release(key, handle)

    async def _release(self, key: tuple[str, str], handle: str) -> None:
        handles = self._subs.get(key)
        if handles is None:
            return
        handles.discard(handle)
        if handles:
            return
        del self._subs[key]
        if key in self._made:
            self._made.discard(key)
            client = self.toolbox.clients.get(key[0]) if self.toolbox is not None else None
            if client is not None:
                try:
                    await client.unsubscribe(key[1])
                except Exception as exc:  # the server's problem; nothing of ours is lost
                    log.warning("mcp.unsubscribe_failed", uri=key[1], error=str(exc)[:200])

    async def drop(self, handle: str) -> None:
        """A child ended: release every subscription it held."""
        for key in [k for k, hs in self._subs.items() if handle in hs]:
            await self._release(key, handle)

    def holds(self, handle: str) -> bool:
        return any(handle in hs for hs in self._subs.values())

    def subscribers(self, server: str, uri: str) -> frozenset[str]:
        """The handles an update of `uri` on `server` is routed to."""
        return frozenset(self._subs.get((server, uri), ()))

    def route_update(self, server: str, uri: str) -> bool:
        """Deliver an update to its subscribing children; True if the root wants it too."""
        key = (server, uri)
        handles = self._subs.get(key, ())
        for h in handles:
            if self.notify is not None:
                self.notify(h, IoUpdated(server, uri))
                if len(self.delivered) < 4096:
                    self.delivered.append((h, server, uri))
        return key not in self._made or not handles

    def scopes(self) -> Iterable[frozenset[str]]:
        return self._catalogues.keys()
