"""The parent's side of brokered I/O: a subagent's intelligence calls, MCP calls,
reads and subscriptions, performed by the root on its pooled connections.

A child holds no server spec, no gateway URL and no secret: its first frame
carries a `Catalogue` (the tools, resources and server instructions of the
servers in its `tool_scope`, taken from the root's already-connected
`Toolbox`: never re-listed), and everything it does goes up its control wire
as `io/request` (a tagged union, `agentd.tree.control.IoRequest`). The
`Broker` answers each on behalf of the handle *of the pipe that asked*:

* `complete` — through the tree's `Metered` provider: the one token ledger and
  the one `FlowGate` (agentd.agent.ledger, agentd.intelligence.flow);
* `call` — the qualified tool must belong to a server in the child's scope
  (checked here, against the live Toolbox, whatever the child claims);
* `read` / `subscribe` / `unsubscribe` — the owning server must be in scope;
  an update for a subscribed resource goes to the children that subscribed
  to it (`io/updated`), and to the root's own update queue only when the root
  had subscribed to it itself.

Processes are flat (every subagent is a child process of the root), so every
level of a deep tree is served here in one hop, with the asking child's own
(already narrowed) scope.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agentd.errors import PeerError, ToolFault
from agentd.intelligence.base import CeilingReached, IntelligenceUnavailable
from agentd.log import log
from agentd.mcp.toolbox import Unowned, owner_of
from agentd.tree.control import (
    IO_CEILING,
    IO_FAULT,
    IO_SCOPE,
    IO_UNAVAILABLE,
    Catalogue,
    IoCall,
    IoComplete,
    IoCompletion,
    IoDelegate,
    IoDone,
    IoRead,
    IoRequest,
    IoResult,
    IoSubscribe,
    IoUnsubscribe,
    IoUpdated,
)
from agentd.wire.shapes import Observed

__all__ = ["Broker", "BrokerError"]


class BrokerError(PeerError):
    """Answered to the child as a JSON-RPC error (code from agentd.tree.control)."""


def _tee(broker: Broker, queue: Any) -> None:
    """Route the root Toolbox's update queue through the broker.

    Every MCP client of the Toolbox (a reconnected one too) holds this same
    queue and calls `put_nowait((server, uri))` on `notifications/resources/
    updated`: the update goes to the children that subscribed to it, and into
    the queue (the root's own wakes) unless only children did.
    """
    if getattr(queue, "_agentd_broker_tee", False):
        return
    put = queue.put_nowait

    def put_nowait(item: tuple[str, str]) -> None:
        if broker.route_update(item[0], item[1]):
            put(item)

    queue.put_nowait = put_nowait
    queue._agentd_broker_tee = True


class Broker:
    """Serves `io/request` for every child of one Supervisor (see the module doc).

    `intelligence` is the tree's `Metered` provider (or a factory of it, called at
    the first `complete`: a Supervisor without a model never builds one);
    `toolbox` the root's connected Toolbox, or None when no server is declared.
    `notify(handle, IoUpdated)` delivers an update to a child (the Supervisor
    sends it on that child's wire).
    """

    def __init__(self, *, intelligence: Any, toolbox: Any = None) -> None:
        self._intelligence = intelligence
        self.toolbox = toolbox
        self.notify: Callable[[str, IoUpdated], None] | None = None
        self._catalogues: dict[frozenset[str], tuple[tuple, Catalogue]] = {}
        # (server, uri) -> handles subscribed; keys subscribed on the server only for children
        self._subs: dict[tuple[str, str], set[str]] = {}
        self._made: set[tuple[str, str]] = set()
        self.delivered: list[tuple[str, str, str]] = []  # (handle, server, uri), bounded
        self.calls = 0
        if toolbox is not None and getattr(toolbox, "updates", None) is not None:
            _tee(self, toolbox.updates)

    async def aclose(self) -> None:
        """Close the provider if it was ever built (the owner of a Broker calls this)."""
        intel = self._intelligence
        if hasattr(intel, "aclose") and hasattr(intel, "complete"):
            await intel.aclose()

    @property
    def intelligence(self) -> Any:
        if callable(self._intelligence) and not hasattr(self._intelligence, "complete"):
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
            a2a_peers=tuple(p for p in getattr(getattr(tb, "peers", None), "clients", ())
                            if p in scope))
        self._catalogues[scope] = (key, cat)
        return cat

    # ---------------------------------------------------------------- serving
    async def serve(self, handle: str, scope: frozenset[str], req: IoRequest) -> IoResult:
        """Perform one request of `handle` (whose scope is `scope`); BrokerError if refused."""
        self.calls += 1
        if isinstance(req, IoComplete):
            try:
                completion = await self.intelligence.complete_for(handle, req.messages,
                                                                  req.tools)
            except CeilingReached as exc:
                raise BrokerError(IO_CEILING, str(exc)) from None
            except IntelligenceUnavailable as exc:
                raise BrokerError(IO_UNAVAILABLE, str(exc)) from None
            return IoCompletion(completion)
        try:
            if isinstance(req, IoCall):
                return await self._call(handle, scope, req)
            if isinstance(req, IoRead):
                obs = await self._read(scope, req.uri, req.server)
                return Observed(obs.text, obs.is_error)  # a read carries no structured body
            if isinstance(req, IoSubscribe):
                return IoDone(await self._subscribe(handle, scope, req.uri, req.server))
            if isinstance(req, IoUnsubscribe):
                await self._unsubscribe(handle, scope, req.uri, req.server)
                return IoDone(True)
            if isinstance(req, IoDelegate):
                return await self._delegate(handle, scope, req)
        except ToolFault as exc:
            raise BrokerError(IO_FAULT, str(exc)) from None
        raise BrokerError(IO_SCOPE, "unknown io request")  # pragma: no cover

    def _scope_error(self, what: str) -> BrokerError:
        return BrokerError(IO_SCOPE, f"{what} is not in this subagent's tool_scope")

    async def _call(self, handle: str, scope: frozenset[str], req: IoCall) -> Observed:
        tb = self.toolbox
        entry = tb.tools.get(req.name) if tb is not None else None
        if entry is None or entry.server not in scope:
            # the same answer whether the tool exists elsewhere or not at all
            log.warning("subagent.io_refused", handle=handle, tool=req.name,
                        reason="not in tool_scope")
            raise self._scope_error(f"tool {req.name!r}")
        obs = await tb.clients[entry.server].call_tool(entry.name, req.arguments,
                                                        time_limit=req.time_limit)
        return obs.bare()

    async def _delegate(self, handle: str, scope: frozenset[str],
                        req: IoDelegate) -> Observed:
        """A subagent's a2a.delegate, on the root's peers, if the peer is in its scope."""
        from agentd.agent.a2a_delegate import DelegateArgs, delegate

        peers = getattr(self.toolbox, "peers", None)
        if peers is None or req.peer not in scope or req.peer not in peers.clients:
            log.warning("subagent.io_refused", handle=handle, peer=req.peer,
                        reason="not in tool_scope")
            raise self._scope_error(f"A2A peer {req.peer!r}")
        obs = await delegate(peers, DelegateArgs({
            "peer": req.peer, "message": req.message, "async": req.mode_async,
            "task_id": req.task_id, "context_id": req.context_id}))
        return obs.bare()

    def _owner(self, scope: frozenset[str], uri: str, server: str | None, *,
               subscribe: bool = False) -> Any:
        """The toolbox's one ownership rule over this subagent's scope (its owner,
        or its `Unowned` refusal); a named server outside the scope is a scope error."""
        clients = self._clients(scope)
        if server is not None and server not in clients:
            raise self._scope_error(f"server {server!r}")
        return owner_of(uri, clients.values(), server, subscribe=subscribe)

    async def _read(self, scope: frozenset[str], uri: str, server: str | None) -> Any:
        owner = self._owner(scope, uri, server)
        if isinstance(owner, Unowned):
            return Observed(owner.reason if owner.ambiguous else f"resource not found: {uri}",
                            is_error=True)
        return await owner.read_resource(uri)

    async def _subscribe(self, handle: str, scope: frozenset[str], uri: str,
                         server: str | None) -> bool:
        owner = self._owner(scope, uri, server, subscribe=True)
        if isinstance(owner, Unowned):
            if owner.ambiguous:
                raise BrokerError(IO_FAULT, owner.reason) from None
            log.warning("mcp.subscribe.no_owner", uri=uri, handle=handle, reason=owner.reason)
            return False
        key = (owner.name, uri)
        if key not in self._subs:
            already = uri in owner.subscriptions
            if not already:
                if not await owner.subscribe(uri):
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
