"""`RemoteBackend`: a subagent's own `SubagentBackend`, over the control wire.

Inside a child process every spawn/send/cancel goes up the wire to the root's
`Supervisor` (`tree/spawn`, `tree/send`, `tree/cancel`): the ONE chokepoint,
which knows which pipe asked, so a child can never claim another handle.  The
child runtime (`agentd.child.runtime`) wires it into the child's self-tools.
The caller goes up as the pipe itself (the root applies the ownership rule to
it); only the local mirror's `status` applies the rule here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentd.agent.spawn_tools import HandleArgs, SendArgs
from agentd.agent.subagents import HandleState, Refusal, SpawnRequest, Unknown, within
from agentd.child.channel import Channel
from agentd.child.control import (
    SPAWN_REFUSED,
    UNKNOWN_HANDLE,
    SpawnParams,
)
from agentd.errors import RPCError
from agentd.obs import trace
from agentd.output import Usage

__all__ = ["RemoteBackend"]


class RemoteBackend:
    """A `SubagentBackend` inside a child: every call goes to the root's Supervisor.

    `status()` must be synchronous, so the states of this child's own
    subagents are mirrored locally: the parent pushes `child/terminal` for each.
    """

    def __init__(self, handle: str, channel: Channel) -> None:
        self.handle = handle
        self._channel = channel
        self._states: dict[str, HandleState] = {}
        self._callbacks: list[Callable[[HandleState], None]] = []
        self._counts = {"spawned": 0, "running": 0, "completed": 0, "failed": 0, "refused": 0}

    async def spawn(self, caller: str, request: SpawnRequest, *,
                    principal: str | None = None) -> HandleState | Refusal:
        params = SpawnParams(instruction=request.instruction,
                             output_contract=request.output_contract,
                             tool_scope=request.tool_scope, mode=request.mode,
                             traceparent=trace.current_traceparent())
        try:
            state = await self._channel.call("tree/spawn", params)
        except RPCError as exc:
            if exc.code == SPAWN_REFUSED:
                self._counts["refused"] += 1
                return Refusal(exc.message)
            raise
        self._counts["spawned"] += 1
        return self._remember(state)

    async def send(self, caller: str, handle: str, message: str, *,
                   principal: str | None = None) -> HandleState | Unknown:
        state = await self._call("tree/send", SendArgs(handle, message))
        if isinstance(state, Unknown):
            return state
        if state.done:
            return self._remember(state)
        state.turn = True  # a warm session's turn: running, with the turn's result
        return state

    def status(self, caller: str, handle: str, *,
               principal: str | None = None) -> HandleState | Unknown:
        state = self._states.get(handle) if within(handle, caller) else None
        return Unknown(handle) if state is None else state

    async def cancel(self, caller: str, handle: str, *,
                     principal: str | None = None) -> HandleState | Unknown:
        state = await self._call("tree/cancel", HandleArgs(handle))
        return state if isinstance(state, Unknown) else self._remember(state)

    def on_terminal(self, callback: Callable[[HandleState], None]) -> None:
        self._callbacks.append(callback)

    def on_evicted(self, callback: Callable[[str], None]) -> None:
        """Nothing is evicted here: the root's registry owns the retention."""

    def retained(self, handle: str) -> float | None:
        return None

    def snapshot(self, principal: str | None = None) -> list[dict[str, Any]]:
        return []  # the live view is the root's

    def live_pids(self) -> list[int]:
        return []  # every subagent is the root's child

    @property
    def tree_tokens(self) -> int | None:
        return None  # the ledger is the root's

    def served_usage(self) -> tuple[int, Usage]:
        return 0, Usage()  # only the root serves

    def counts(self) -> dict[str, int]:
        out = dict(self._counts)
        out["running"] = sum(1 for s in self._states.values() if not s.done)
        for s in self._states.values():
            if s.done:
                out[s.status] = out.get(s.status, 0) + 1
        return out

    async def _call(self, method: str, params: SendArgs | HandleArgs) -> HandleState | Unknown:
        try:
            return await self._channel.call(method, params)
        except RPCError as exc:
            if exc.code == UNKNOWN_HANDLE:
                return Unknown(params.handle)
            raise

    def _remember(self, state: HandleState) -> HandleState:
        """Mirror a state from the wire, keeping when this child first saw it."""
        old = self._states.get(state.handle)
        if old is not None:
            state.started = old.started
        self._states[state.handle] = state
        if state.done and (old is None or not old.done):
            for cb in self._callbacks:
                cb(state)
        return state

    def terminal(self, state: HandleState) -> None:
        """The parent says one of our subagents ended."""
        if state.done:
            self._remember(state)
