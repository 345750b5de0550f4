"""What the agent loop and the reactive layer need from a toolbox, as types.

Three objects play "the toolbox": the run's `agentd.mcp.toolbox.Toolbox`, a
brokered child's `agentd.tree.brokered.BrokeredToolbox` (the same calls over
the control wire) and `agentd.a2a.peers.WithPeers` (the Toolbox plus the A2A
peers' task resources). They share no base class and should not: the loop
(`agentd.agent.loop`), the self-tools and the reactive daemon name these
Protocols instead, so the type checker holds every one of them to the same
shape and none of the consumers guesses attribute names.

Stdlib only: a brokered child names these without loading the HTTP stack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "AgentToolbox",
    "Observed",
    "ResourceServer",
    "ResourceView",
    "ServerCaps",
    "ToolView",
    "UriEntry",
]


class Observed(Protocol):
    """A tool result or a resource read as the model sees it: the MCP client's
    `Observation`, the control wire's `IoObservation`, an A2A peer's read."""

    @property
    def text(self) -> str: ...
    @property
    def is_error(self) -> bool: ...
    @property
    def structured(self) -> Any: ...


class ToolView(Protocol):
    """One catalogue tool (`toolbox.ToolEntry`, the control wire's `CatalogueTool`);
    `description` is untrusted server text."""

    @property
    def server(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> dict[str, Any]: ...


class UriEntry(Protocol):
    """What the ownership rule reads of a listed resource."""

    @property
    def uri(self) -> str: ...


class ResourceView(UriEntry, Protocol):
    """One resource catalogue line (`client.ResourceInfo`, `CatalogueResource`)."""

    @property
    def server(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def mime_type(self) -> str: ...
    @property
    def size(self) -> int | None: ...


class AgentToolbox(Protocol):
    """What the loop, the self-tools and the reactive daemon use of a toolbox.

    Optional extras are read where they are used, by name: `clients` (the
    per-server view, `toolbox.resource_servers`), `take_notices` (servers the
    fault policy dropped), `lost` (a required server gone)."""

    @property
    def tools(self) -> Mapping[str, ToolView]: ...
    @property
    def resources(self) -> Sequence[ResourceView]: ...
    @property
    def instructions(self) -> Mapping[str, str]: ...
    @property
    def updates(self) -> asyncio.Queue[tuple[str, str]]: ...

    async def call(self, qualified_name: str,
                   arguments: Mapping[str, Any] | None = None) -> Observed: ...
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
    `PeerSource`."""

    @property
    def name(self) -> str: ...
    @property
    def capabilities(self) -> ServerCaps: ...
    @property
    def resources(self) -> Sequence[UriEntry]: ...
    @property
    def connected(self) -> bool: ...

    async def subscribe(self, uri: str) -> bool: ...
    async def unsubscribe(self, uri: str) -> None: ...
    async def read_resource(self, uri: str) -> Observed: ...
    async def update_channel(self) -> str | None:
        """What carries `updated` for a subscribed URI (`subscribe`: the
        session's stream; `listen`: 2026-07-28's listen stream), or None when
        nothing can (agentd.mcp.channel): the reactive daemon then polls."""
        ...
