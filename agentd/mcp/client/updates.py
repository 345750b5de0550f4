"""The toolbox's queue of resource updates, with one router in front.

Every MCP client of a `Toolbox` (a reconnected one too) holds the same
`UpdateQueue` and puts `(server, uri)` on `notifications/resources/updated`.
The tree's broker routes the updates its subagents subscribed to
(`agentd.tree.broker.Broker.route_update`): it is set as the queue's `route`,
sees every update first and says whether the root wants it as well (it does
unless only children had subscribed to that resource). Without a route every
update is the root's.

A subclass, not a wrapper: the clients, the reactive router and the waiters
keep using it as the `asyncio.Queue` it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Route", "UpdateQueue"]

Route = Callable[[str, str], bool]  # (server, uri) -> does the root want it too


class UpdateQueue(asyncio.Queue[tuple[str, str]]):
    """`put_nowait((server, uri))` asks `route` first (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.route: Route | None = None

    def put_nowait(self, item: tuple[str, str]) -> None:
        route = self.route
        if route is None or route(item[0], item[1]):
            super().put_nowait(item)
