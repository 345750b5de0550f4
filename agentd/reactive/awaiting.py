"""`await_resource` support: block a run until a watched URI is updated.

The rendezvous itself, `Waiters`, lives in `reactive/waiters.py` (the daemon
holds one too). Which server owns a URI is the toolbox's one rule
(`agentd.mcp.client.toolbox.owner_of`), as for reads and the daemon's subscriptions:
an ambiguous owner is the caller's error at once, not a wait.

`await_resource(toolbox, waiters, uri, limit)` is the whole self-tool body:
make sure the URI is watched (subscribe through the toolbox, degrading like any
subscribe), wait, then read the current state fresh.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agentd.log import log
from agentd.mcp.client.seams import AgentToolbox, Observed, ResourceServer
from agentd.mcp.client.toolbox import Unowned, owner_of, resource_servers
from agentd.reactive.waiters import Waiters
from agentd.wire.guard import PEER_FAULTS

if TYPE_CHECKING:
    from agentd.mcp.selftool import SelfTool

DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 3600.0


def _refused(uri: str, cause: str, reason: str, server: str | None = None) -> None:
    """The one line for a URI this wait cannot watch (docs/reactive.md's outcome
    table, origin `await`): the wait still runs to its timeout."""
    log.warning("reactive.refused", uri=uri, origin="await", server=server, cause=cause,
                reason=reason, detail="not watched; the wait ends only by its timeout")


async def _subscribe(toolbox: AgentToolbox, uri: str, server: str | None = None
                     ) -> tuple[ResourceServer | None, bool, bool] | Unowned:
    """(owner client or None, watched now, subscribed by this call), the owner by
    the toolbox's one rule when the clients are visible. An ambiguous owner, or
    a named server that is not there, is returned (`Unowned`): the caller is
    told. A URI left unwatched is logged once (`reactive.refused`)."""
    clients = resource_servers(toolbox)
    if not clients:  # e.g. a brokered child's toolbox: its parent applies the rule
        ok = bool(await toolbox.subscribe(uri, server=server))
        if not ok:
            _refused(uri, "not_honoured", "the subscription was not taken", server)
        return None, ok, False
    owner = owner_of(uri, clients, server, subscribe=True)
    if isinstance(owner, Unowned):
        if owner.ambiguous or server is not None:
            return owner
        _refused(uri, "unowned", owner.reason)
        return None, False, False
    if not owner.capabilities.resources_subscribe:
        _refused(uri, "unsupported", "the server does not advertise resources.subscribe",
                 owner.name)
        return owner, False, False
    if uri in owner.subscriptions:
        return owner, True, False
    if not await owner.subscribe(uri):
        _refused(uri, "not_honoured", "the server did not take the subscription", owner.name)
        return owner, False, False
    if await owner.update_channel() is None:
        # taken, but no stream could carry its `updated` (a 2025-11-25 server
        # without a GET stream or a session): said, not waited on in silence
        _refused(uri, "no_channel", "the server offers no stream that could carry "
                 "notifications/resources/updated to us", owner.name)
        return owner, False, True
    return owner, True, True


async def _read(owner: ResourceServer | None, toolbox: AgentToolbox, uri: str,
                server: str | None) -> Observed:
    """Read `uri` from its owner, else through the toolbox (and its rule)."""
    if owner is not None:
        return await owner.read_resource(uri)
    if server is not None:
        return await toolbox.read_resource(uri, server=server)
    return await toolbox.read_resource(uri)


_SUBAGENT_PREFIX = "agent://subagent/"


def _terminal(obs: Observed) -> bool:
    """Whether an agent://subagent/… body read says the run is done."""
    import orjson

    if obs.is_error:
        return False
    try:
        body = orjson.loads(obs.text or "")
    except PEER_FAULTS:  # the server's text: not JSON, nested too deeply
        return False
    return isinstance(body, dict) and body.get("done") is True


async def await_resource(toolbox: AgentToolbox, waiters: Waiters, uri: str,
                         limit: float | None = DEFAULT_TIMEOUT, *,
                         server: str | None = None) -> tuple[bool | None, Observed] | Unowned:
    """The `agentd__await_resource` self-tool: `(updated, observation)`;
    `updated` is None when the URI could not be watched and nothing woke it
    (the wait ran to `limit`: the caller tells the model why no update came).

    Subscribes `uri` on its owner (a no-op if already watched; a server without
    `resources.subscribe`, or one with no stream to carry `updated`, is logged
    `reactive.refused` and the wait then ends only by timeout), waits for an update or `limit` seconds, reads the resource
    fresh from that owner — the observation is its current state either way —
    and drops a subscription it made itself (what stays watched is what the
    flags and `agentd__subscribe` asked for). `server` names the owner; an
    ambiguous owner, or a named one that is not there, is returned (`Unowned`)
    before any wait.
    """
    limit = DEFAULT_TIMEOUT if limit is None else min(max(float(limit), 0.0), MAX_TIMEOUT)
    fut = waiters.register(uri)  # before subscribing: an early update is not missed
    owner: ResourceServer | None = None
    made = False
    try:
        try:
            watch = await _subscribe(toolbox, uri, server)
        except Exception as exc:  # the wait is still honoured
            _refused(uri, "failed", f"the subscribe failed: {type(exc).__name__}: {exc}"[:300])
            ok = False
        else:
            if isinstance(watch, Unowned):
                waiters.release(uri, fut)
                return watch
            owner, ok, made = watch
    except BaseException:
        waiters.release(uri, fut)
        raise
    try:
        if uri.startswith(_SUBAGENT_PREFIX):
            # an agent's run URI fires once, at its terminal transition; one that
            # ended before the subscribe sends nothing (spec §2.3): read it now
            now = await _read(owner, toolbox, uri, server)
            if _terminal(now):
                log.info("reactive.await", uri=uri, updated=True, already_terminal=True,
                         server=owner.name if owner is not None else None)
                return True, now
        updated = await waiters.until(uri, fut, limit)
        log.info("reactive.await", uri=uri, updated=updated, watched=ok,
                 server=owner.name if owner is not None else None)
        return (updated if ok or updated else None), await _read(owner, toolbox, uri, server)
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
        "server": {"type": "string"},
    },
    "required": ["uri"],
}


def await_resource_tool(toolbox: AgentToolbox | None, waiters: Waiters) -> SelfTool:
    """The `agentd__await_resource` SelfTool, for `SelfTools.add(...)`.

    Arguments `{uri, timeout?, server?}`; the result is the resource's current state,
    preceded by whether it was updated or the wait timed out."""
    from agentd.mcp.selftool import SelfTool, error, ok

    async def handler(args: dict[str, Any]) -> Any:
        uri = args.get("uri")
        if not isinstance(uri, str) or not uri.strip():
            return error("await_resource: the uri is empty")
        limit = args.get("timeout", DEFAULT_TIMEOUT)
        if not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit < 0:
            return error("await_resource: timeout must be a non-negative number of seconds")
        server = args.get("server")
        if server is not None and not isinstance(server, str):
            return error("await_resource: argument 'server' must be a string")
        if toolbox is None:
            return error(f"await_resource: no MCP server is connected that serves {uri}")
        waited = await await_resource(toolbox, waiters, uri.strip(), limit,
                                      server=server or None)
        if isinstance(waited, Unowned):
            return error(waited.reason)
        updated, obs = waited
        if updated is None:
            head = (f"not watched: no server can send updates for {uri}, so none came "
                    f"in {limit}s")
        else:
            head = "updated" if updated else f"timed out after {limit}s without an update"
        text = f"{head}; current state of {uri}:\n{obs.text}"
        if obs.is_error:
            return error(text)
        return ok(text, {"uri": uri, "updated": bool(updated), "watched": updated is not None})

    return SelfTool(
        "await_resource",
        "Wait until the resource at uri is updated (or timeout seconds pass); returns "
        "its current state. server: its MCP server, if ambiguous.",
        AWAIT_SCHEMA, handler)


@contextlib.asynccontextmanager
async def watch_updates(toolbox: AgentToolbox | None) -> AsyncIterator[Waiters]:
    """For task mode (no daemon): pump the toolbox's `updates` into `Waiters`
    for the lifetime of the block, inside its own TaskGroup, so
    `await_resource` works in a one-shot run. Updates nobody awaits are
    coalesced in a bounded router and dropped at exit."""
    from agentd.reactive.router import Router

    waiters = Waiters()
    if toolbox is None:
        yield waiters
        return
    updates = toolbox.updates
    router = Router(0.0, claim=waiters.claim)
    async with asyncio.TaskGroup() as tg:
        pump = tg.create_task(router.pump(updates))
        try:
            yield waiters
        finally:
            pump.cancel()
