"""What the agent loop and the reactive layer need from a toolbox, as types.

Three objects play "the toolbox": the run's `agentd.mcp.client.toolbox.Toolbox`, a
brokered child's `agentd.child.brokered.BrokeredToolbox` (the same calls over
the control wire) and `agentd.a2a.peers.WithPeers` (the Toolbox plus the A2A
peers' task resources). They share no base class and should not: the loop
(`agentd.agent.loop`), the self-tools and the reactive daemon name these
Protocols instead, so the type checker holds every one of them to the same
shape and none of the consumers guesses attribute names. A member only some
of them have a use for is still declared here, and each implementation gives
it a value (a brokered child's `clients` is empty, its `lost` None): a
consumer reads it, it never probes for it.

What flows through them -- a tool, an observation, a resource line -- is one
shape each, `agentd.wire.shapes` (re-exported here as the names the layers
above already use).

Light imports only: a brokered child names these without loading the HTTP stack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agentd.wire.shapes import Observed, ResourceInfo, ToolEntry

if TYPE_CHECKING:
    from agentd.mcp.client.rules.faults import RequiredServerLost

__all__ = [
    "AgentToolbox",
    "Observed",
    "ResourceServer",
    "ServerCaps",
]


class AgentToolbox(Protocol):
    """What the loop, the self-tools and the reactive daemon use of a toolbox.

    `clients`: the per-server view the ownership rule reads
    (`toolbox.resource_servers`; empty for a brokered child, whose parent
    applies the rule); `take_notices()`: optional servers the fault policy
    dropped since the last call, told to the model once; `lost`: resolved when a
    required server is gone after its handshake (None where no server is
    connected here); `required_down()`: the required servers not connected now
    (readiness; none where no server is connected here); `idempotent(name)`:
    whether a call of that tool may be sent twice (its server declares it
    idempotent or read-only: `agentd.mcp.client.rules.faults.idempotent_tool`;
    False where no server is connected here, and for an A2A delegation)."""

    @property
    def tools(self) -> Mapping[str, ToolEntry]: ...
    @property
    def resources(self) -> Sequence[ResourceInfo]: ...
    @property
    def instructions(self) -> Mapping[str, str]: ...
    @property
    def updates(self) -> asyncio.Queue[tuple[str, str]]: ...
    @property
    def clients(self) -> Mapping[str, ResourceServer]: ...
    @property
    def lost(self) -> asyncio.Future[RequiredServerLost] | None: ...

    def take_notices(self) -> list[tuple[str, str]]: ...
    def required_down(self) -> list[str]: ...
    def idempotent(self, qualified_name: str) -> bool: ...
    async def call(self, qualified_name: str, arguments: Mapping[str, Any] | None = None,
                   *, time_limit: float | None = None) -> Observed: ...
    async def read_resource(self, uri: str, *, server: str | None = None) -> Observed: ...
    async def subscribe(self, uri: str, *, server: str | None = None) -> bool: ...
    async def unsubscribe(self, uri: str, *, server: str | None = None) -> None: ...


class ServerCaps(Protocol):
    @property
    def resources(self) -> bool: ...
    @property
    def resources_subscribe(self) -> bool: ...


class ResourceServer(Protocol):
    """One server behind a toolbox as the ownership rule (`toolbox.owner_of`)
    and the reactive daemon see it: an `MCPClient`, or an A2A peer's
    `PeerSource`. `subscriptions`: the URIs it is subscribed to now."""

    @property
    def name(self) -> str: ...
    @property
    def capabilities(self) -> ServerCaps: ...
    @property
    def resources(self) -> Sequence[ResourceInfo]: ...
    @property
    def connected(self) -> bool: ...
    @property
    def subscriptions(self) -> set[str]: ...

    async def subscribe(self, uri: str) -> bool: ...
    async def unsubscribe(self, uri: str) -> None: ...
    async def read_resource(self, uri: str) -> Observed: ...
    async def update_channel(self) -> str | None:
        """What carries `updated` for a subscribed URI (`subscribe`: the
        session's stream; `listen`: 2026-07-28's listen stream), or None when
        nothing can (agentd.mcp.client.subscriptions): the reactive daemon then polls."""
        ...
