"""A scripted `SubagentBackend` (the tree's contract, agentd/agent/subagents.py)
whose runs end when the test says so: the self-MCP's backend in the tests that
exercise its routing and bodies without a tree.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agentd.agent.subagents import HandleState, Refusal, SpawnRequest, Unknown
from agentd.output import Usage
from agentd.tree.ownership import Owners
from agentd.tree.registry import DEFAULT_KEEP_TERMINAL, DEFAULT_TERMINAL_TTL, Retention


class ScriptedBackend:
    """Runs that finish when `finish(handle)` is called; sync spawns finish at once.

    Its terminal handles are kept by the tree's own retention rule (`Retention`)."""

    def __init__(self, *, terminal_ttl: float = DEFAULT_TERMINAL_TTL,
                 keep_terminal: int = DEFAULT_KEEP_TERMINAL) -> None:
        self.retention = Retention(terminal_ttl, keep_terminal)
        self.evicted: list[Callable[[str], None]] = []
        self.tree_tokens = None
        self.states: dict[str, HandleState] = {}
        self.requests: list[tuple[str, SpawnRequest]] = []
        self.callbacks: list[Callable[[HandleState], None]] = []
        self.n = 0
        self.refuse: str | None = None
        self.sent: list[tuple[str, str]] = []
        self.owners = Owners()  # the backend applies the tree's one ownership rule

    async def spawn(self, caller, request, *, principal=None):
        if self.refuse:
            return Refusal(self.refuse)
        self.requests.append((caller, request))
        self.n += 1
        st = self.states[f"{caller}.{self.n}"] = HandleState(handle=f"{caller}.{self.n}")
        if principal is not None:
            self.owners.claim(st.handle, principal)
        if request.mode == "sync":
            self.finish(st.handle, {"answer": 42})
        return st

    async def send(self, caller, handle, message, *, principal=None):
        st = self.status(caller, handle, principal=principal)
        if isinstance(st, HandleState):
            self.sent.append((handle, message))
        return st

    def status(self, caller, handle, *, principal=None):
        for gone in self.retention.expired(time.monotonic()):
            del self.states[gone]
            self.owners.forget(gone)
            for cb in self.evicted:
                cb(gone)
        if not self.owners.allows(caller, handle, principal):
            return Unknown(handle)
        return self.states.get(handle) or Unknown(handle)

    async def cancel(self, caller, handle, *, principal=None):
        st = self.status(caller, handle, principal=principal)
        if isinstance(st, HandleState) and not st.done:
            self.finish(handle, None, status="cancelled")
        return st

    def on_terminal(self, callback):
        self.callbacks.append(callback)

    def on_evicted(self, callback):
        self.evicted.append(callback)

    def retained(self, handle):
        return self.retention.left(handle, time.monotonic())

    def snapshot(self, principal=None):
        return []

    def live_pids(self):
        return []

    def counts(self):
        return {"spawned": self.n, "running": sum(not s.done for s in self.states.values())}

    def finish(self, handle, result, status="completed"):
        st = self.states[handle]
        st.status, st.result = status, result
        self.retention.ended(handle, time.monotonic())
        for cb in self.callbacks:
            cb(st)

    def served_usage(self):
        return 0, Usage()
