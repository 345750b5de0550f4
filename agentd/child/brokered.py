"""The child's side of brokered I/O: an intelligence provider and a Toolbox that
talk only to the control wire.

A brokered subagent has no HTTP stack, no server spec and no secret. The loop
cannot tell these from the real ones: `BrokeredIntelligence.complete` and
`BrokeredToolbox.call / read_resource / subscribe / unsubscribe /
next_update`, `.tools / .resources / .instructions / .updates` have the
shapes of `agentd.intelligence.base.Intelligence` and `agentd.mcp.client.toolbox.Toolbox`.
Each call is one `io/request` to the parent (agentd.tree.broker), which decides
on it with this child's handle and scope. The catalogue came down in
`child/configure` and is never re-listed here. A fault of the parent's call
comes back as the same `ToolFault` (its server, words, retryability, code and
cause ride in the error's data, `agentd.child.control.IoFault`), so the child's
loop treats it exactly as the root's loop would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from agentd.child.channel import Channel
from agentd.child.control import (
    IO_CEILING,
    IO_UNAVAILABLE,
    Catalogue,
    IoCall,
    IoComplete,
    IoDelegate,
    IoRead,
    IoSubscribe,
    IoUnsubscribe,
    IoUpdated,
    fault_of,
)
from agentd.errors import RPCError
from agentd.intelligence.base import (
    Completion,
    IntelligenceUnavailable,
    Message,
    ToolDef,
    ceiling_reached,
)
from agentd.intelligence.flow import FlowGate
from agentd.obs import trace
from agentd.wire.guard import PEER_FAULTS, fault_text
from agentd.wire.shapes import Observed, ResourceInfo, ToolEntry

__all__ = ["BrokeredIntelligence", "BrokeredToolbox"]


class BrokeredIntelligence:
    """`complete()` is the parent's provider, through the tree's ledger and gate."""

    name = "brokered"
    model: str | None = None  # the gateway chooses

    def __init__(self, channel: Channel) -> None:
        self._channel = channel

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolDef]
                       ) -> Completion:
        try:
            res = await self._channel.call("io/request", IoComplete(
                list(messages), list(tools), trace.current_traceparent()))
        except RPCError as exc:
            if exc.code == IO_CEILING:
                raise ceiling_reached(exc.message) from None
            if exc.code == IO_UNAVAILABLE:
                raise IntelligenceUnavailable(exc.message) from None
            raise IntelligenceUnavailable(f"broker: {exc.message}") from None
        return res.completion

    def share_gate(self, gate: FlowGate) -> None:
        """The parent's provider pauses on the parent's gate: nothing to pause here."""

    async def aclose(self) -> None:
        pass


class BrokeredToolbox:
    """The MCP side of a brokered child (see the module doc)."""

    def __init__(self, channel: Channel, catalogue: Catalogue | None) -> None:
        self._channel = channel
        cat = catalogue or Catalogue()
        self.tools: dict[str, ToolEntry] = {t.qualified: t for t in cat.tools}
        self.resources: list[ResourceInfo] = list(cat.resources)
        self.instructions: dict[str, str] = dict(cat.instructions)
        self.a2a_peers: tuple[str, ...] = tuple(cat.a2a_peers)  # a2a.delegate, via the root
        self.updates: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.omitted: dict[str, str] = {}
        # the parent applies the ownership rule and the fault policy: no server
        # is connected here, none can be lost or dropped here
        self.clients: dict[str, Any] = {}
        self.lost: asyncio.Future[Any] | None = None

    def take_notices(self) -> list[tuple[str, str]]:
        return []

    def required_down(self) -> list[str]:
        return []

    def idempotent(self, qualified_name: str) -> bool:
        """Never asked here: the root decides about a brokered call (its journal,
        its toolbox's annotations); a child knows no tool's annotations."""
        return False

    def updated(self, ev: IoUpdated) -> None:
        """The parent routed an update of a resource this child subscribed to."""
        self.updates.put_nowait((ev.server, ev.uri))

    def servers(self) -> list[str]:
        return sorted({t.server for t in self.tools.values()}
                      | {r.server for r in self.resources})

    async def _io(self, req: Any) -> Any:
        try:
            return await self._channel.call("io/request", req)
        except RPCError as exc:  # the parent's fault, as the root's own call raised it
            raise fault_of(exc.code, exc.message, exc.data) from None

    async def call(self, qualified_name: str,
                   arguments: Mapping[str, Any] | str | bytes | None = None, *,
                   time_limit: float | None = None) -> Observed:
        if qualified_name not in self.tools:
            return Observed(f"unknown tool {qualified_name!r}", is_error=True)
        if isinstance(arguments, (str, bytes)):
            try:
                arguments = orjson.loads(arguments) if arguments else None
            except PEER_FAULTS as exc:
                return Observed(f"arguments for tool {qualified_name} are not valid "
                                     f"JSON: {fault_text(exc)}", is_error=True)
        return await self._io(IoCall(qualified_name, arguments, time_limit,
                                     trace.current_traceparent()))

    async def read_resource(self, uri: str, *, server: str | None = None) -> Observed:
        return await self._io(IoRead(uri, server))

    async def a2a_delegate(self, a: Any) -> Observed:
        """`a2a.delegate` (validated `DelegateArgs`): the root performs it on its peers."""
        return await self._io(IoDelegate(a.peer, a.message, a.mode_async, a.task_id,
                                         a.context_id))

    async def subscribe(self, uri: str, *, server: str | None = None) -> bool:
        return bool((await self._io(IoSubscribe(uri, server))).ok)

    async def unsubscribe(self, uri: str, *, server: str | None = None) -> None:
        await self._io(IoUnsubscribe(uri, server))

    async def next_update(self) -> tuple[str, str, Observed]:
        server, uri = await self.updates.get()
        return server, uri, await self.read_resource(uri, server=server)

    async def __aenter__(self) -> BrokeredToolbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass
