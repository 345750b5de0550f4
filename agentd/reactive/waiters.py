"""`Waiters`: the rendezvous between the update stream and a run that asked to wait.

Updates reach it through `Router(claim=waiters.claim)`: an update for a URI
somebody is waiting on resolves every such wait and is *claimed* (it does not
also become a router wake — the run that waited reads the current state itself,
notify-then-read). Waits hold plain futures, never tasks, so nothing outlives
the run that waits.

Its own module because both the daemon (which owns one per reactive session)
and `awaiting` (the `await_resource` self-tool, which asks the daemon's
ownership rule) need it; in `awaiting` it made the two import each other.
"""

from __future__ import annotations

import asyncio


class Waiters:
    """URI -> futures of runs blocked in `await_resource`."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Future[bool]]] = {}

    def claim(self, uri: str) -> bool:
        """Resolve every wait on `uri`; True if there was one (update consumed)."""
        futures = self._waiting.pop(uri, None)
        if not futures:
            return False
        hit = False
        for fut in futures:
            if not fut.done():
                fut.set_result(True)
                hit = True
        return hit

    def waiting(self, uri: str) -> bool:
        return any(not f.done() for f in self._waiting.get(uri, ()))

    def register(self, uri: str) -> asyncio.Future[bool]:
        """Start waiting on `uri` now (before subscribing, so no update is missed)."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(uri, []).append(fut)
        return fut

    def release(self, uri: str, fut: asyncio.Future[bool]) -> None:
        lst = self._waiting.get(uri)
        if lst is not None:
            if fut in lst:
                lst.remove(fut)
            if not lst:
                self._waiting.pop(uri, None)
        if not fut.done():
            fut.cancel()

    async def until(self, uri: str, fut: asyncio.Future[bool], limit: float | None) -> bool:
        """Wait on a registered future: True if updated, False on timeout."""
        try:
            async with asyncio.timeout(limit):
                return await fut
        except TimeoutError:
            return False
        finally:
            self.release(uri, fut)

    async def wait(self, uri: str, limit: float | None) -> bool:
        """True when `uri` is updated, False when `limit` seconds pass first."""
        return await self.until(uri, self.register(uri), limit)
