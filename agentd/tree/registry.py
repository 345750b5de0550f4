"""The runs of one tree and THE terminal retention every reader of a handle sees.

`Registry` holds one `ChildRun` per handle (plus the two roots, `0` and
`served`), the spawn counters, and `Retention`: a terminal handle stays
readable for `ttl` seconds (default 600, `Config.terminal_ttl`) and at most
`keep` of them are kept (default 1024, `Config.keep_terminal`), the oldest
evicted first; after that the handle is unknown to everyone (`status()`
answers `Unknown`, the self-MCP's `agent://subagent/{handle}` reads
-32002).  The self-MCP reads this retention through its backend
(`SubagentBackend.retained`, `on_evicted`): one rule, one set of defaults.

`Retention` is sans-IO (every call takes `now`); `Registry` reads its clock
once per call (`clock`, injectable).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from agentd.agent.subagents import HandleState, within
from agentd.log import log
from agentd.tree.child_run import ChildRun

__all__ = ["DEFAULT_KEEP_TERMINAL", "DEFAULT_TERMINAL_TTL", "Registry", "Retention"]

DEFAULT_TERMINAL_TTL = 600.0
DEFAULT_KEEP_TERMINAL = 1024
_COUNTERS = ("spawned", "running", "completed", "failed", "cancelled", "budget_exhausted",
             "deadline", "refused", "evicted")


class Retention:
    """Which terminal handles are still readable (oldest first), as of `now`."""

    def __init__(self, ttl: float = DEFAULT_TERMINAL_TTL,
                 keep: int = DEFAULT_KEEP_TERMINAL) -> None:
        self.ttl = ttl
        self.keep = keep
        self._ended: OrderedDict[str, float] = OrderedDict()  # handle -> when it ended

    def ended(self, handle: str, now: float) -> None:
        self._ended.setdefault(handle, now)

    def expired(self, now: float) -> Iterator[str]:
        """Pop and yield every handle past its TTL or beyond `keep`, oldest first."""
        while self._ended:
            handle, at = next(iter(self._ended.items()))
            if now - at < self.ttl and len(self._ended) <= self.keep:
                return
            del self._ended[handle]
            yield handle

    def left(self, handle: str, now: float) -> float | None:
        """Seconds `handle` stays readable; None if it is not (yet) retained."""
        at = self._ended.get(handle)
        return None if at is None else max(0.0, self.ttl - (now - at))


class Registry:
    """Every run of one tree, by handle (see module doc)."""

    def __init__(self, roots: tuple[ChildRun, ...], retention: Retention, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.runs: dict[str, ChildRun] = {r.handle: r for r in roots}
        self.retention = retention
        self.clock = clock
        self.live = 0
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._terminal: list[Callable[[HandleState], None]] = []
        self._evicted: list[Callable[[str], None]] = []
        self.log = log.bind(component="supervisor")

    def get(self, handle: str) -> ChildRun | None:
        return self.runs.get(handle)

    def run(self, handle: str) -> ChildRun | None:
        """The subagent run of `handle`; None for an unknown handle or a root."""
        run = self.runs.get(handle)
        return None if run is None or run.request is None else run

    def add(self, run: ChildRun) -> None:
        self.runs[run.handle] = run
        parent = self.runs[run.parent]
        parent.minted += 1
        parent.live_children.add(run.handle)
        self.live += 1
        self._counts["spawned"] += 1

    def restore(self, run: ChildRun, ended_ago: float | None = None) -> None:
        """A run an earlier process on the same journal held, under its old handle:
        live (`ended_ago` None: it is driven again) or terminal `ended_ago` seconds
        ago (retained for what is left of its TTL). Its parent's count of minted
        handles moves past it, so no new run is given its handle."""
        self.runs[run.handle] = run
        parent = self.runs[run.parent]
        parent.minted = max(parent.minted, int(run.handle.rsplit(".", 1)[1]))
        if ended_ago is None:
            parent.live_children.add(run.handle)
            self.live += 1
            return
        self.retention.ended(run.handle, self.clock() - ended_ago)
        self._counts[run.state.status] = self._counts.get(run.state.status, 0) + 1

    def withdraw(self, run: ChildRun) -> None:
        """`run` never started (its spawn refused after all): as if never added,
        but its handle stays minted (never given to another run)."""
        self.runs.pop(run.handle, None)
        parent = self.runs.get(run.parent)
        if parent is not None:
            parent.live_children.discard(run.handle)
        self.live -= 1
        self._counts["spawned"] -= 1

    def refused(self) -> None:
        self._counts["refused"] += 1

    def ended(self, run: ChildRun) -> None:
        """`run` just became terminal: retained from now, counted, its parent told."""
        self.retention.ended(run.handle, self.clock())
        self.live -= 1
        self._counts[run.state.status] = self._counts.get(run.state.status, 0) + 1
        parent = self.runs.get(run.parent)
        if parent is not None:
            parent.live_children.discard(run.handle)

    def announce(self, state: HandleState) -> None:
        """Call every `on_terminal` callback with a run's terminal state."""
        for cb in self._terminal:
            try:
                cb(state)
            except Exception as exc:  # a callback's bug must not stop the tree
                self.log.error("subagent.callback_error", handle=state.handle, error=repr(exc))

    def evict(self) -> None:
        """Forget what the retention no longer keeps (a run with live children stays
        in the tree, unreadable, until they end)."""
        for handle in self.retention.expired(self.clock()):
            run = self.runs.get(handle)
            if run is not None and not run.live_children:
                del self.runs[handle]
                self._counts["evicted"] += 1
            for cb in self._evicted:
                cb(handle)

    def retained(self, handle: str) -> float | None:
        """Seconds `handle` stays readable (None: running, unknown or evicted)."""
        self.evict()
        return self.retention.left(handle, self.clock())

    def on_terminal(self, callback: Callable[[HandleState], None]) -> None:
        self._terminal.append(callback)

    def on_evicted(self, callback: Callable[[str], None]) -> None:
        self._evicted.append(callback)

    def subtree(self, handle: str) -> list[ChildRun]:
        """The live subagent runs at `handle` and under it."""
        return [r for h, r in self.runs.items()
                if (h == handle or within(h, handle)) and r.live and r.request is not None]

    def counts(self) -> dict[str, int]:
        out = dict(self._counts)
        out["running"] = self.live
        return out

    def snapshot(self) -> list[dict[str, Any]]:
        """Every known subagent (live, or terminal and not yet evicted), for the live
        view (`agent://status` `tree`, `agentd top`): names and numbers only."""
        now = self.clock()
        return [r.row(now) for r in self.runs.values() if r.request is not None]
