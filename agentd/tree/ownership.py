"""Who may touch a handle: the one ownership rule of the tree.

A handle names its place in the tree (`0.3.1` is under `0.3`, `served.2.1`
under `served.2`; see `agentd.agent.subagents`), so a *tree caller* (a pipe's handle,
never a claim) may touch exactly the handles strictly under its own.  A *peer*
reaching the tree over a served endpoint (the self-MCP, the served A2A agent)
is a principal: the principal that spawned a served run owns it and its whole
subtree, and any other principal is told the handle is unknown, the same
answer as for a handle that never existed.  `Owners` keeps those claims and
`Owners.allows` is the rule; the backend (the tree's `Supervisor`) holds one and
asks it on every operation, so no endpoint checks a caller itself; pool mode's
handles (`agentd.served.pool`) carry the same principal in their MAC.
"""

from __future__ import annotations

from collections import OrderedDict

from agentd.agent.subagents import top_of, within

__all__ = ["Owners"]


class Owners:
    """The principals owning served runs (`served.N` and everything under it).

    At most `keep` claims are remembered, the oldest forgotten first (`None`: no
    bound; a claim also goes when its run is evicted, `forget`).
    """

    def __init__(self, keep: int | None = None) -> None:
        self.keep = keep
        self._owners: OrderedDict[str, str] = OrderedDict()

    def claim(self, handle: str, principal: str) -> None:
        """`principal` owns `handle`'s run from now on (a first claim stands)."""
        top = top_of(handle)
        if top not in self._owners:
            self._owners[top] = principal
            while self.keep is not None and len(self._owners) > self.keep:
                self._owners.popitem(last=False)

    def owner(self, handle: str) -> str | None:
        return self._owners.get(top_of(handle))

    def may(self, handle: str, principal: str) -> bool:
        """May `principal` touch `handle`?  Only the principal that spawned its run."""
        return self._owners.get(top_of(handle)) == principal

    def allows(self, caller: str, handle: str, principal: str | None = None) -> bool:
        """The one rule: `handle` is strictly under `caller`, and, for a peer's
        `principal`, in a run that principal spawned."""
        return within(handle, caller) and (principal is None or self.may(handle, principal))

    def forget(self, handle: str) -> None:
        self._owners.pop(top_of(handle), None)

    def __contains__(self, handle: str) -> bool:
        return top_of(handle) in self._owners
