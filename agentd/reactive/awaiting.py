"""`await_resource` support: block a run until a watched URI is updated.

`Waiters` is the rendezvous between the update stream and a run that asked to
wait. Updates reach it through `Router(claim=waiters.claim)`: an update for a
URI somebody is waiting on resolves every such wait and is *claimed* (it does
not also become a router wake — the run that waited reads the current state
itself, notify-then-read). Waits hold plain futures, never tasks, so nothing
outlives the run that waits.

`await_resource(toolbox, waiters, uri, limit)` is the whole self-tool body:
make sure the URI is watched (subscribe through the toolbox, degrading like any
subscribe), wait, then read the current state fresh.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from agentd.log import log

DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 3600.0


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


async def _subscribe(toolbox: Any, uri: str) -> tuple[Any | None, bool, bool]:
    """(owner client or None, watched now, subscribed by this call) — with the
    daemon's ownership rule when the clients are visible."""
    from agentd.reactive.daemon import _can_subscribe, clients_of, resolve_owner

    clients = clients_of(toolbox)
    if not clients:
        ok = bool(await toolbox.subscribe(uri)) if hasattr(toolbox, "subscribe") else False
        return None, ok, False
    owner, why = resolve_owner(uri, clients)
    if owner is None:
        log.warning("reactive.subscribe.unowned", uri=uri, origin="await", reason=why)
        return None, False, False
    if not _can_subscribe(owner):
        log.warning("reactive.subscribe.unsupported", uri=uri, origin="await",
                    server=owner.name)
        return owner, False, False
    if uri in getattr(owner, "subscriptions", ()):
        return owner, True, False
    ok = bool(await owner.subscribe(uri))
    return owner, ok, ok


_SUBAGENT_PREFIX = "agent://subagent/"


def _terminal(obs: Any) -> bool:
    """Whether an agent://subagent/… body read says the run is done."""
    import orjson

    if getattr(obs, "is_error", False):
        return False
    try:
        body = orjson.loads(getattr(obs, "text", "") or "")
    except orjson.JSONDecodeError:
        return False
    return isinstance(body, dict) and body.get("done") is True


async def await_resource(toolbox: Any, waiters: Waiters, uri: str,
                         limit: float | None = DEFAULT_TIMEOUT) -> tuple[bool, Any]:
    """The `agentd__await_resource` self-tool: `(updated, observation)`.

    Subscribes `uri` on its owner (a no-op if already watched; a server without
    `resources.subscribe` degrades with a warning and the wait then ends only
    by timeout), waits for an update or `limit` seconds, reads the resource
    fresh from that owner — the observation is its current state either way —
    and drops a subscription it made itself (what stays watched is what the
    flags and `agentd__subscribe` asked for).
    """
    limit = DEFAULT_TIMEOUT if limit is None else min(max(float(limit), 0.0), MAX_TIMEOUT)
    fut = waiters.register(uri)  # before subscribing: an early update is not missed
    owner, made = None, False
    try:
        try:
            owner, ok, made = await _subscribe(toolbox, uri)
        except Exception as exc:  # the wait is still honoured
            log.warning("reactive.await.subscribe_failed", uri=uri, error=str(exc))
            ok = False
        if not ok:
            log.warning("reactive.await.unwatched", uri=uri,
                        detail="no server will send updates for this URI; waiting for the timeout")
    except BaseException:
        waiters.release(uri, fut)
        raise
    try:
        if uri.startswith(_SUBAGENT_PREFIX):
            # an agent's run URI fires once, at its terminal transition; one that
            # ended before the subscribe sends nothing (spec §2.3): read it now
            reader = owner if owner is not None else toolbox
            now = await reader.read_resource(uri)
            if _terminal(now):
                log.info("reactive.await", uri=uri, updated=True, already_terminal=True,
                         server=getattr(owner, "name", None))
                return True, now
        updated = await waiters.until(uri, fut, limit)
        log.info("reactive.await", uri=uri, updated=updated,
                 server=getattr(owner, "name", None))
        reader = owner if owner is not None else toolbox
        return updated, await reader.read_resource(uri)
    finally:
        if made and owner is not None:
            with contextlib.suppress(Exception):
                await owner.unsubscribe(uri)


AWAIT_SCHEMA = {
    "type": "object",
    "properties": {
        "uri": {"type": "string"},
        "timeout": {"type": "number", "minimum": 0, "maximum": MAX_TIMEOUT,
                    "default": DEFAULT_TIMEOUT},
    },
    "required": ["uri"],
}


def await_resource_tool(toolbox: Any, waiters: Waiters) -> Any:
    """The `agentd__await_resource` SelfTool, for `SelfTools.add(...)`.

    Arguments `{uri, timeout?}`; the result is the resource's current state,
    preceded by whether it was updated or the wait timed out."""
    from agentd.agent.selftools import SelfTool, error, ok

    async def handler(args: dict[str, Any]) -> Any:
        uri = args.get("uri")
        if not isinstance(uri, str) or not uri.strip():
            return error("await_resource: the uri is empty")
        limit = args.get("timeout", DEFAULT_TIMEOUT)
        if not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit < 0:
            return error("await_resource: timeout must be a non-negative number of seconds")
        if toolbox is None:
            return error(f"await_resource: no MCP server is connected that serves {uri}")
        updated, obs = await await_resource(toolbox, waiters, uri.strip(), limit)
        head = "updated" if updated else f"timed out after {limit}s without an update"
        text = f"{head}; current state of {uri}:\n{getattr(obs, 'text', obs)}"
        if getattr(obs, "is_error", False):
            return error(text)
        return ok(text, {"uri": uri, "updated": updated})

    return SelfTool(
        "await_resource",
        "Block until the resource at `uri` is updated (or `timeout` seconds pass), then "
        "return its current state. Subscribes to it first if it is not watched yet.",
        AWAIT_SCHEMA, handler)


@contextlib.asynccontextmanager
async def watch_updates(toolbox: Any) -> AsyncIterator[Waiters]:
    """For task mode (no daemon): pump the toolbox's `updates` into `Waiters`
    for the lifetime of the block, inside its own TaskGroup, so
    `await_resource` works in a one-shot run. Updates nobody awaits are
    coalesced in a bounded router and dropped at exit."""
    from agentd.reactive.router import Router

    waiters = Waiters()
    updates = getattr(toolbox, "updates", None)
    if updates is None:
        yield waiters
        return
    router = Router(0.0, claim=waiters.claim)
    async with asyncio.TaskGroup() as tg:
        pump = tg.create_task(router.pump(updates))
        try:
            yield waiters
        finally:
            pump.cancel()
