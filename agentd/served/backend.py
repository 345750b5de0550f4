"""The served face's backend: what the self-MCP handler asks, and its local answer.

The handler serves the four subagent operations to peers.  On one worker they
are the tree's :class:`~agentd.agent.subagents.SubagentBackend` calls; in a pool
(:mod:`agentd.served.pool`) a handle may be another worker's, so answering it is
a network call.  ``SubagentBackend.status`` is synchronous (the tree answers
from its registry, and the loop, the control wire and the tests read it so);
rather than make every tree caller await it, the served face has its own seam,
:class:`ServedBackend`, whose operations are all awaited.  :class:`LocalServed`
is that seam over one ``SubagentBackend`` (its calls through the one operation
table of :mod:`agentd.agent.spawn_tools`); the pool's ``PoolBackend`` wraps a
``LocalServed`` and routes.  The handler holds a ``ServedBackend`` and has no
pool branch: naming, relaying, placement, the lost-owner body and watching a
peer's run for its subscribers are the backend's.

The operations answer the §2.3 bodies callers see (by the names they see),
not ``HandleState``: a relayed body was made by its owner (its ``age_ms``
too) and is passed on as it came.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal, Protocol

from agentd.agent import spawn_tools
from agentd.agent.subagents import (
    HandleState,
    Refusal,
    SpawnRequest,
    SubagentBackend,
    Unavailable,
    Unknown,
)
from agentd.log import log
from agentd.output import Usage

__all__ = ["SERVED_CALLER", "SERVED_TOOLS", "Body", "LocalServed", "ServedBackend",
           "Subscribed", "spawn_body"]

SERVED_CALLER: Final = "served"
# the subagent tools come from the one table (agentd.agent.spawn_tools), without
# `detach` (spec §2.2: an in-loop disposition, not offered on the served socket)
SERVED_TOOLS: Final = spawn_tools.tools(spawn_tools.SERVED_MODES)
# a handle operation by its name (a resource read and a peer's subscribe are the
# run's status)
_OPS: Final = {"send": SERVED_TOOLS["subagent.send"], "cancel": SERVED_TOOLS["subagent.cancel"],
               **dict.fromkeys(("status", "read", "subscribe"), SERVED_TOOLS["subagent.status"])}

Body = dict[str, Any]  # a run's §2.3 body, or a spawn's acknowledgement
# a subscribe's verdict: refused (-32602), ended (its update is due at once), held
Subscribed = Literal["refused", "ended", "held"]


def spawn_body(state: HandleState, handle: str) -> Body:
    """A served spawn's answer under the name ``handle``: the acknowledgement of a
    run that goes on (async, warm) or its terminal body (sync)."""
    if not state.done:
        return {"handle": handle, "status": state.status, "done": False}
    return {**state.body(), "handle": handle}


class ServedBackend(Protocol):
    """The served face's backend: every operation for a peer's ``principal``,
    under the names peers see.  A handle operation raises ``PoolError`` (kind
    ``unavailable``) when the worker owning the run does not answer."""

    async def spawn(self, request: SpawnRequest, principal: str) -> Body | Refusal:
        """A spawn: its acknowledgement or terminal body, or the refusal."""
        ...

    async def operate(self, op: str, handle: str, message: str | None,
                      principal: str) -> Body | Refusal | Unknown:
        """``send``, ``status``, ``cancel`` or ``read`` (a resource read) on ``handle``."""
        ...

    def subscribe(self, uri: str, handle: str, principal: str, verdict: object,
                  ended: Callable[[str], None]) -> Subscribed:
        """A subscribe to ``uri`` (``handle``'s run): ``verdict`` is what :meth:`admit`
        answered for it, ``ended(uri)`` is called when a run this process does not
        hold ends (a held run of its own ends through :meth:`on_terminal`)."""
        ...

    async def admit(self, wanted: dict[str, str], principal: str) -> dict[str, Any]:
        """Before a subscribe or listen is answered: verdicts for ``uri -> handle``
        (what :meth:`subscribe` is given), asked of other workers all at once."""
        ...

    def shown(self, handle: str) -> str:
        """The name callers see for this process's ``handle``."""
        ...

    def on_terminal(self, callback: Callable[[HandleState], None]) -> None:
        """``callback`` once when any run of this process ends (its own handle)."""
        ...

    def on_spawned(self, callback: Callable[[], None]) -> None:
        """``callback()`` after every spawn run here, admitted or refused (the counts moved)."""
        ...

    def retained(self, handle: str) -> float | None:
        """Seconds the terminal run ``handle`` stays readable here; None otherwise."""
        ...

    def counts(self) -> dict[str, int]:
        """This process's spawn counters (``agent://status``)."""
        ...

    def served_usage(self) -> tuple[int, Usage]:
        """The steps and usage of the runs this process served (``agent://status``)."""
        ...

    def rows(self, principal: str | None) -> list[dict[str, Any]]:
        """The live view's rows this principal may see, under the names callers see."""
        ...

    def status_extra(self) -> dict[str, Any]:
        """Members ``agent://status`` adds (a pool worker's ``pool`` share)."""
        ...

    def tool_schema(self, name: str, schema: dict[str, Any]) -> dict[str, Any]:
        """The input schema the tool ``name`` is offered with."""
        ...


class LocalServed:
    """The served face over this process's backend: handles as the backend names
    them (``served.N``), every operation through the one table."""

    def __init__(self, backend: SubagentBackend | None = None) -> None:
        self.backend: SubagentBackend = backend if backend is not None else Unavailable()
        self._spawned: list[Callable[[], None]] = []
        self._log = log.bind(component="selfmcp")

    def state(self, handle: str, principal: str | None) -> HandleState | Unknown:
        """The run's state now, or `Unknown` (never, evicted, not served, or
        another principal's: the backend's one rule)."""
        return self.backend.status(SERVED_CALLER, handle, principal=principal)

    async def spawn(self, request: SpawnRequest, principal: str) -> Body | Refusal:
        state = await self.spawned(request, principal)
        return state if isinstance(state, Refusal) else spawn_body(state, state.handle)

    async def spawned(self, request: SpawnRequest, principal: str) -> HandleState | Refusal:
        """A spawn on this process: the run's state, or the refusal."""
        state = await SERVED_TOOLS["subagent.spawn"].act(self.backend, SERVED_CALLER,
                                                         principal, request)
        for callback in self._spawned:
            callback()
        if not isinstance(state, HandleState):
            return state if isinstance(state, Refusal) else Refusal("spawn refused")
        return state

    async def operate(self, op: str, handle: str, message: str | None,
                      principal: str) -> Body | Unknown:
        args = spawn_tools.SendArgs(handle, message or "") if op == "send" \
            else spawn_tools.HandleArgs(handle)  # status, cancel, read, subscribe
        state = await _OPS[op].act(self.backend, SERVED_CALLER, principal, args)
        return state.body() if isinstance(state, HandleState) else Unknown(handle)

    def subscribe(self, uri: str, handle: str, principal: str, verdict: object,
                  ended: Callable[[str], None]) -> Subscribed:
        state = self.state(handle, principal)
        if isinstance(state, Unknown):
            return "refused"  # unknown, evicted or another's
        if state.done:
            self._log.info("selfmcp.subscribe.ended", handle=state.handle)
            return "ended"
        return "held"

    async def admit(self, wanted: dict[str, str], principal: str) -> dict[str, Any]:
        return {}  # every handle is this process's: decided by subscribe()

    def shown(self, handle: str) -> str:
        return handle

    def on_terminal(self, callback: Callable[[HandleState], None]) -> None:
        self.backend.on_terminal(callback)

    def on_spawned(self, callback: Callable[[], None]) -> None:
        self._spawned.append(callback)

    def retained(self, handle: str) -> float | None:
        return self.backend.retained(handle)

    def counts(self) -> dict[str, int]:
        return self.backend.counts()

    def served_usage(self) -> tuple[int, Usage]:
        return self.backend.served_usage()

    def rows(self, principal: str | None) -> list[dict[str, Any]]:
        return self.backend.snapshot(principal)

    def status_extra(self) -> dict[str, Any]:
        return {}

    def tool_schema(self, name: str, schema: dict[str, Any]) -> dict[str, Any]:
        return schema
