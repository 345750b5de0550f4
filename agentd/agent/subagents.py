"""The contract between the subagent supervisor and its two callers.

The self-MCP (peers calling `subagent.*` over HTTP, the Management origin) and
the agent loop's own `agentd__subagent_*` self-tools (the Stdio origin) both go
through one `SubagentBackend`, so every cap and scope check lives at a single
chokepoint. `Unavailable` is the backend of a build or process that runs no
subagents: every spawn is refused with a clear message, never a fake result.

The agent layer owns this contract and the tree implements it (the
`Supervisor`, a child's `RemoteBackend`): the self-tools name it without
importing anything of the tree, so no folder circle joins the two.

Handles: the root agent is `0`; inside the tree a child is its parent's handle
plus `.n` (`0.2.1.3`); runs started by a peer over the self-MCP are `served.n`.
A handle's depth is its number of dotted components (the root has depth 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

import msgspec

from agentd.output import Usage

SpawnMode = Literal["sync", "async", "warm", "detach"]
TERMINAL = frozenset({"completed", "failed", "cancelled", "budget_exhausted", "deadline"})
# The JSON schema of a `tool_scope` argument (SpawnRequest.tool_scope): the one
# definition the spawn tools and the graph tool offer the model.
TOOL_SCOPE_SCHEMA: dict[str, Any] = {"type": "array", "items": {"type": "string"}}


# --- handle naming (the module docstring): a handle says where it sits in the tree

def depth_of(handle: str) -> int:
    """A handle's depth: its number of dotted components (the root has depth 1)."""
    return handle.count(".") + 1


def within(handle: str, ancestor: str) -> bool:
    """Is `handle` strictly under `ancestor` (so `ancestor`'s to touch)?"""
    return handle.startswith(ancestor + ".")


def top_of(handle: str) -> str:
    """The run a served handle belongs to: `served.N` of anything in its subtree."""
    return ".".join(handle.split(".")[:2])


def mint(caller: str, n: int) -> str:
    """The `n`-th handle minted under `caller`."""
    return f"{caller}.{n}"


class SpawnRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    """A spawn as a caller asks for it; depth is never taken from here.  Encoded
    without its defaults, so a member added later (as `a2a_context` was) never
    reaches a peer that does not know it unless it is set: a pool peer decodes a
    placed spawn strictly (agentd.served.pool), and during a rolling upgrade the
    pool runs both versions."""

    instruction: str
    output_contract: str | None = None
    tool_scope: tuple[str, ...] | None = None  # None: the caller's whole scope
    mode: SpawnMode = "sync"
    # the A2A contextId of a run that is a served A2A task (agentd.served.a2a): it goes
    # where the request goes, into the run's journal too, so the task outlives a restart
    a2a_context: str | None = None


class HandleState(msgspec.Struct, dict=True):
    """What is known of one subagent run: the ONE shape of a handle's state.

    The supervisor's registry holds it, the self-MCP and the self-tools show
    its `body()` (the agent:// resource), and the control wire carries its
    fields as they are (`tree/*` answers, `child/terminal`), so a child's
    `RemoteBackend` decodes the very same type.  Only the four fields are
    encoded; `started` (this process's monotonic clock, meaningless elsewhere)
    and `turn` (a warm session's `send` answer: still running, but carrying the
    turn's result) are per-process attributes, set afresh on construction and
    on decode.
    """

    handle: str
    status: str = "running"  # running | completed | failed | cancelled | budget_exhausted | deadline
    partial: bool = False
    result: Any = None

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self.turn = False

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    def body(self) -> dict[str, Any]:
        """The spec §2.3 body: running vs terminal shapes (a warm turn shows its result)."""
        if not self.done and not self.turn:
            return {"handle": self.handle, "status": self.status, "done": False,
                    "age_ms": int((time.monotonic() - self.started) * 1000)}
        return {"handle": self.handle, "status": self.status, "done": self.done,
                "partial": self.partial, "result": self.result}

    def on_wire(self) -> HandleState:
        """The state as the control wire carries it: the result once terminal or
        for a warm turn; a running session's last result stays in this process."""
        if self.done or self.turn or self.result is None:
            return self
        return msgspec.structs.replace(self, result=None)


class Refusal(msgspec.Struct, frozen=True):
    """A refusal in words, shown to the caller as an isError result: arguments
    a subagent tool refuses (`agent/spawn_tools.py`), or a spawn the tree
    refuses -- a cap, a scope, a closing tree; that text always starts
    `spawn refused: ` (spec §2.2), e.g. `spawn refused: max_depth=4 reached at
    handle 0.2.1.3`.  A return value, not an exception: a model's or a peer's
    mistake, and a tree at its caps, are expected outcomes."""

    text: str


class Unknown(msgspec.Struct, frozen=True):
    """No such handle for this caller: it never existed, was evicted, or is not
    the caller's (all alike, docs/security.md); for `send`, also a handle that
    is no warm session (`reason`).  A return value: a stale or mistyped handle
    is an expected outcome, answered `unknown handle: X` on every surface."""

    handle: str
    reason: str = ""  # what the control wire adds after the handle, if anything

    def words(self) -> str:
        """The control wire's error message (`tree/*`'s UNKNOWN_HANDLE)."""
        return " ".join(w for w in ("unknown handle", self.handle, self.reason) if w)


class SubagentBackend(Protocol):
    """The four operations each take the caller -- a tree caller's handle (`0`, a
    pipe's handle) or `served` with the peer's `principal` -- and the backend
    applies the one ownership rule (`agentd.tree.ownership`) to every one: a
    handle that is not the caller's is `Unknown`, like one that never existed."""

    async def spawn(self, caller: str, request: SpawnRequest, *,
                    principal: str | None = None) -> HandleState | Refusal:
        """Spawn under `caller` (a served run is `principal`'s from its admission).
        sync: returns the terminal state; async/warm/detach: returns at once with
        status running; or the tree's `Refusal`."""
        ...

    async def send(self, caller: str, handle: str, message: str, *,
                   principal: str | None = None) -> HandleState | Unknown:
        """Send another message into a warm session; acks with its state."""
        ...

    def status(self, caller: str, handle: str, *,
               principal: str | None = None) -> HandleState | Unknown:
        ...

    async def cancel(self, caller: str, handle: str, *,
                     principal: str | None = None) -> HandleState | Unknown:
        """Walk the kill ladder over the handle's whole subtree."""
        ...

    def on_terminal(self, callback: Callable[[HandleState], None]) -> None:
        """Call `callback` once when any run reaches a terminal status."""
        ...

    def on_evicted(self, callback: Callable[[str], None]) -> None:
        """Call `callback(handle)` once when a terminal handle is evicted (from then
        on it is unknown: the backend's terminal retention, agentd.tree.registry)."""
        ...

    def retained(self, handle: str) -> float | None:
        """Seconds a terminal handle stays readable; None while it runs, or unknown."""
        ...

    def counts(self) -> dict[str, int]:
        """Spawn counters for agent://status (spawned, running, completed, failed, ...)."""
        ...

    def snapshot(self, principal: str | None = None) -> list[dict[str, Any]]:
        """The live view's rows (`agent://status` `tree`, `agentd top`): every known
        handle's names and numbers, never content; empty where no tree is kept here.
        With `principal`, served runs only of that principal (the ownership rule)."""
        ...

    def live_pids(self) -> list[int]:
        """The subagent processes alive now (the drain's last rung kills them)."""
        ...

    @property
    def tree_tokens(self) -> int | None:
        """The tree's tokens by its ledger; None where the ledger is not here."""
        ...

    def served_usage(self) -> tuple[int, Usage]:
        """The steps and usage of every run served here (the `served` subtree, its
        model answers), since the process started: what a worker reports for
        the work it did for its peers; zeros where no ledger is kept here."""
        ...


class Unavailable:
    """The backend where subagents are not available: refuses every spawn."""

    REASON = "spawn refused: subagents are not available in this build"

    async def spawn(self, caller: str, request: SpawnRequest, *,
                    principal: str | None = None) -> HandleState | Refusal:
        return Refusal(self.REASON)

    async def send(self, caller: str, handle: str, message: str, *,
                   principal: str | None = None) -> HandleState | Unknown:
        return Unknown(handle)

    def status(self, caller: str, handle: str, *,
               principal: str | None = None) -> HandleState | Unknown:
        return Unknown(handle)

    async def cancel(self, caller: str, handle: str, *,
                     principal: str | None = None) -> HandleState | Unknown:
        return Unknown(handle)

    def on_terminal(self, callback: Callable[[HandleState], None]) -> None:
        pass

    def on_evicted(self, callback: Callable[[str], None]) -> None:
        pass

    def retained(self, handle: str) -> float | None:
        return None

    def counts(self) -> dict[str, int]:
        return {"spawned": 0, "running": 0, "completed": 0, "failed": 0, "refused": 0}

    def snapshot(self, principal: str | None = None) -> list[dict[str, Any]]:
        return []

    def live_pids(self) -> list[int]:
        return []

    @property
    def tree_tokens(self) -> int | None:
        return None

    def served_usage(self) -> tuple[int, Usage]:
        return 0, Usage()
