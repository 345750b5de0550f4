"""The self-MCP: agentd's own MCP server (spec §2), a handler on the generic engine.

Exactly two capabilities (``tools: {}``, ``resources: {subscribe: true}``),
exactly five tools (``status``, ``subagent.spawn``, ``subagent.send``,
``subagent.status``, ``subagent.cancel``) with JSON Schema 2020-12 input
schemas validated by jsonschema-rs, and two resource forms:

* ``agent://status`` (listed): run id, mode, version, pid, uptime, spawn counts,
  and the steps and tokens of the runs served so far (``served``);
* ``agent://subagent/{handle}`` (unlisted): a served run's §2.3 body.

Every ``subagent.*`` tool routes into one :class:`~agentd.agent.subagents.SubagentBackend`
with the caller ``"served"`` (the backend mints ``served.{n}`` handles); a peer
only ever sees handles under ``served.``.  Their names, descriptions, schemas
and argument parsing are the one table of :mod:`agentd.agent.spawn_tools` (the
loop's self-tools use it too) without ``detach`` (spec §2.2).  Refusals
(the tree's ``Refusal``, arguments the table refuses, e.g. ``async`` with
``warm``) and unknown handles (``Unknown``: return values, as the backend
answers them) are ``isError: true`` tool results in the table's words;
calls that fail the schema are JSON-RPC errors (the engine's -32601/-32602).

The emission rule: when a served run becomes terminal, every session
subscribed to its URI gets one ``notifications/resources/updated {uri}`` and
the subscriptions are consumed.  The terminal transition's update reaches
every subscriber, one who subscribed after it too: subscribing to a run that
has already ended answers ``{}`` and sends its ``updated`` at once (the peer
then reads the terminal body), so spawn -> subscribe -> wait never hangs
however fast the run was.  Subscribing to anything that is not a live or
ended handle of the caller's principal (unknown, evicted, another
principal's, ``agent://status`` at 2025-11-25, another scheme) is -32602
with ``data.uri``: nothing would ever fire for it.

At MCP 2026-07-28 (stateless requests, ``subscriptions/listen``) the same
rule holds per listen stream, tagged with its subscription id (an ended
run's update follows the acknowledgement; a refused URI is left out of it),
and ``agent://status`` is subscribable too: a listener that asked for it gets one
``updated`` each time the spawn counts change (a served spawn, any run's end).
Cache hints (``ttlMs``/``cacheScope``, docs/server.md): the five tools, the
one listed resource and the empty template list never change while the
process lives (one hour, public); ``agent://status`` is stale at once (its
uptime moves every millisecond; private); a run's body is stale at once while
it runs and, once terminal, fresh until it is evicted (private).

In pool mode (``--pool-*``, docs/operations.md "Pool") the handles callers
see are :mod:`agentd.served.pool`'s ``served.<owner>.<token>``; a peer's
handle is relayed to its owner (status, send, cancel, read, a subscription's
wait), a spawn at this worker's caps is placed on a peer, and 2025-11-25
sessions are proxied to the worker holding them (:mod:`agentd.pool.session_relay`).

Terminal runs stay readable as long as the backend retains them (the tree's
one terminal retention, :mod:`agentd.tree.registry`: 600 s, at most 1024,
oldest first); after that the URI reads -32002.  Who may touch a served
handle is the one rule of :mod:`agentd.tree.ownership` (its principal's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any, Final

import msgspec
import orjson

from agentd import __version__
from agentd.agent import spawn_tools
from agentd.agent.subagents import (
    HandleState,
    Refusal,
    SpawnRequest,
    SubagentBackend,
    Unavailable,
    Unknown,
)
from agentd.errors import PoolError, RPCError
from agentd.log import log
from agentd.mcp.server.handler import CallContext, Handler
from agentd.obs import health
from agentd.pool.relay import ProbeAnswer, RelayAnswer, RelayRequest
from agentd.served.pool import HANDLE_TOOLS, PoolServed, with_handle_header
from agentd.tree.ownership import top_of
from agentd.wire import mcp2026
from agentd.wire import mcp_types as t
from agentd.wire.guard import convert_peer
from agentd.wire.jsonrpc import INTERNAL_ERROR, resource_not_found, subscribe_refused

__all__ = [
    "SERVED_CALLER",
    "STATUS_URI",
    "SUBAGENT_PREFIX",
    "TOOL_SCHEMAS",
    "SelfMCP",
]

SERVED_CALLER: Final = "served"
STATUS_URI: Final = "agent://status"
SUBAGENT_PREFIX: Final = "agent://subagent/"
WAIT_POLL: Final = 20.0  # a peer's relayed wait for a run's end answers at least this often
STABLE_TTL_MS: Final = 3_600_000  # the tool set, the listed resources: fixed per process

# the subagent tools come from the one table (agentd.agent.spawn_tools), without
# `detach` (spec §2.2: an in-loop disposition, not offered on the served socket)
_SPAWN_TOOLS: Final = spawn_tools.tools(spawn_tools.SERVED_MODES)
# a handle operation by its name on the relay (a resource read, a peer's subscribe:
# the run's status)
_OPS: Final = {"send": _SPAWN_TOOLS["subagent.send"], "cancel": _SPAWN_TOOLS["subagent.cancel"],
               **dict.fromkeys(("status", "read", "subscribe"), _SPAWN_TOOLS["subagent.status"])}
_STATUS_SCHEMA: Final = {"type": "object", "properties": {}}
_STATUS_DESCRIPTION: Final = "Read this agent's run id, mode, version, pid and uptime."

TOOL_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "status": _STATUS_SCHEMA, **{n: t.input_schema for n, t in _SPAWN_TOOLS.items()}}


class _PlacedSpawn(SpawnRequest, frozen=True, forbid_unknown_fields=True):
    """A peer's placement as this worker decodes it: a member it does not know (a
    newer peer's, or a caller's word like ``async``) is refused, never dropped."""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()


def _refused(text: str) -> t.CallToolResult:
    return t.CallToolResult(content=[t.TextContent(text=text)], isError=True)


def _state_result(structured: dict[str, Any], text: str | None = None) -> t.CallToolResult:
    return t.CallToolResult(content=[t.TextContent(text=text if text is not None
                                                   else _text(structured))],
                            structuredContent=structured)


class SelfMCP(Handler):
    """The self-MCP handler over one backend (default :class:`Unavailable`)."""

    def __init__(self, backend: SubagentBackend | None = None, *, run_id: str = "",
                 mode: str = "task", pool: PoolServed | None = None) -> None:
        super().__init__("agentd", __version__, subscribe=True)
        self.pool = pool  # pool mode: pool handles outside, relayed when a peer's
        self._waiters: dict[str, asyncio.Event] = {}  # served.N -> a peer waits on its end
        self.backend: SubagentBackend = backend if backend is not None else Unavailable()
        self.run_id = run_id
        self.mode = mode
        self.started = time.monotonic()
        self._log = log.bind(component="selfmcp")
        self._announced_counts: dict[str, int] | None = None
        self.add_tool("status", self._status, _STATUS_SCHEMA, description=_STATUS_DESCRIPTION)
        for name, tool in _SPAWN_TOOLS.items():
            fn = self._spawn if name == "subagent.spawn" else self._handle_op(name)
            schema = tool.input_schema if pool is None or name not in HANDLE_TOOLS \
                else with_handle_header(tool.input_schema)
            self.add_tool(name, self._refusing(tool, fn), schema, description=tool.description)
        self.add_resource(STATUS_URI, self._read_status, name="status",
                          description="This agent's run id, mode, version, pid, uptime and "
                                      "spawn counts.", mime_type="application/json")
        self.backend.on_terminal(self._on_terminal)
        self.backend.on_evicted(self._on_evicted)

    # ------------------------------------------------------------ state
    def status_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "run_id": self.run_id, "mode": self.mode, "version": __version__,
            "pid": os.getpid(), "uptime_ms": int((time.monotonic() - self.started) * 1000)}
        steps, usage = self.backend.served_usage()  # the work done for peers (docs/server.md)
        body["served"] = {"steps": steps, "usage": msgspec.structs.asdict(usage)}
        if self.mode == "reactive":  # each watched URI and how (docs/reactive.md)
            body["watched"] = health.watched()
        return body

    def _on_evicted(self, handle: str) -> None:
        """The backend no longer retains ``handle``: an evicted run's pool name is
        forgotten with it (the backend forgets its owner)."""
        if self.pool is not None and handle.startswith(SERVED_CALLER + ".") \
                and handle == top_of(handle):
            self.pool.forget(handle)

    def _on_terminal(self, state: HandleState) -> None:
        handle = state.handle
        self._status_changed()
        if not handle.startswith(SERVED_CALLER + "."):
            return
        waiting = self._waiters.pop(handle, None)
        if waiting is not None:  # peers' subscribers, over the relay
            waiting.set()
        n = self.notify_updated(SUBAGENT_PREFIX + (self.pool.external(handle) if self.pool
                                                   else handle), consume=True)
        self._log.info("selfmcp.terminal", handle=handle, status=state.status, notified=n)

    def _status_changed(self) -> None:
        """``updated agent://status`` to its (2026-07-28) listeners when the counts moved."""
        if not self.hub.subscribers(STATUS_URI):
            self._announced_counts = None
            return
        counts = self.backend.counts()
        if counts != self._announced_counts:
            self._announced_counts = counts
            self.notify_updated(STATUS_URI)

    def lookup(self, handle: str, principal: str | None = None) -> HandleState | Unknown:
        """The state of a served handle, or `Unknown` (never, evicted, not served,
        or — with ``principal`` — another principal's: the backend's one rule)."""
        return self.backend.status(SERVED_CALLER, handle, principal=principal)

    # ------------------------------------------------------------ tools
    async def _status(self, args: dict[str, Any], ctx: CallContext) -> Any:
        return self.status_body()

    @staticmethod
    def _refusing(tool: spawn_tools.SpawnTool, fn: Any) -> Any:
        """`fn(parsed, ctx)` behind the table's parser; every refusal is an
        isError result in the table's words."""
        async def call(args: dict[str, Any], ctx: CallContext) -> Any:
            return await spawn_tools.dispatch(tool, args, lambda a: fn(a, ctx), _refused)

        return call

    async def _spawn(self, request: SpawnRequest, ctx: CallContext
                     ) -> t.CallToolResult | Refusal:
        body = await self._spawn_here(request, ctx.principal)
        if isinstance(body, Refusal):
            peer = self._placement()
            if peer is None:
                return body
            # this worker is at its caps: the spawn runs on the peer with the most room
            self._log.info("pool.placed", peer=peer)
            assert self.pool is not None
            try:
                answer = await self.pool.call(peer, "spawn", "", None, ctx.principal,
                                              arguments=msgspec.to_builtins(request))
            except PoolError:  # the peer went away: this worker's refusal stands
                return body
            if answer.kind != "body" or answer.body is None:
                return Refusal(answer.text or "spawn refused")
            body = answer.body
        if not body["done"]:
            return _state_result(body)
        return _state_result(body, _text(body.get("result")))

    def _placement(self) -> str | None:
        """The peer a refused spawn goes to: only in pool mode, only when this
        worker has no free slot left (a scope refusal stays a refusal)."""
        if self.pool is None or self.pool.probe_answer(self.backend.counts()).free > 0:
            return None
        return self.pool.membership.place()

    async def _spawn_here(self, request: SpawnRequest, principal: str
                          ) -> dict[str, Any] | Refusal:
        """A spawn on this worker: the ack (async) or the terminal body (sync)."""
        state = await _SPAWN_TOOLS["subagent.spawn"].act(self.backend, SERVED_CALLER,
                                                         principal, request)
        self._status_changed()
        if not isinstance(state, HandleState):
            return state if isinstance(state, Refusal) else Refusal("spawn refused")
        handle = state.handle if self.pool is None else self.pool.name(state.handle, principal)
        if not state.done:
            return {"handle": handle, "status": state.status, "done": False}
        return {**state.body(), "handle": handle}

    def _handle_op(self, name: str) -> Any:
        """A handle operation of the table (send, status, cancel) as a tool."""
        op = name.removeprefix("subagent.")

        async def call(a: spawn_tools.SendArgs | spawn_tools.HandleArgs,
                       ctx: CallContext) -> Any:
            message = a.message if isinstance(a, spawn_tools.SendArgs) else None
            return await self._tool_op(op, a.handle, message, ctx)

        return call

    async def _tool_op(self, op: str, handle: str, message: str | None,
                       ctx: CallContext) -> t.CallToolResult | Refusal | Unknown:
        try:
            body = await self._op(op, handle, message, ctx.principal)
        except PoolError as exc:  # the owner did not answer: say so, not "unknown"
            return _refused(str(exc))
        return _state_result(body) if isinstance(body, dict) else body

    async def _local(self, op: str, handle: str, message: str | None,
                     principal: str) -> dict[str, Any] | Unknown:
        """One operation on this worker's own ``served.N`` for ``principal``."""
        args = spawn_tools.SendArgs(handle, message or "") if op == "send" \
            else spawn_tools.HandleArgs(handle)  # status, cancel; a relayed read
        state = await _OPS[op].act(self.backend, SERVED_CALLER, principal, args)
        return state.body() if isinstance(state, HandleState) else Unknown(handle)

    async def _op(self, op: str, handle: str, message: str | None,
                  principal: str) -> dict[str, Any] | Refusal | Unknown:
        """The operation wherever the handle lives (pool mode: here, relayed to its
        owner, or the lost body): its body, the owner's refusal, or `Unknown` (by
        the name the caller used); raises PoolError when the owner is unreachable."""
        if self.pool is None:
            return await self._local(op, handle, message, principal)
        where = self.pool.where(handle, principal)
        if where is None:
            return Unknown(handle)
        if where.lost is not None:
            return where.lost
        if where.owner is not None:
            answer = await self.pool.call(where.owner, op, handle, message, principal)
            if answer.kind == "refused":
                return Refusal(answer.text or "spawn refused")
            if answer.kind != "body" or answer.body is None:
                return Unknown(handle)
            return answer.body
        assert where.internal is not None
        body = await self._local(op, where.internal, message, principal)
        return Unknown(handle) if isinstance(body, Unknown) else self.pool.body(body)

    def probe_answer(self) -> ProbeAnswer:
        """A peer's liveness probe (agentd.pool.relay.RelayTarget)."""
        assert self.pool is not None
        return self.pool.probe_answer(self.backend.counts())

    def _remote_ended(self, uri: str) -> None:
        """A peer's run this worker's sessions subscribed to ended (or was lost)."""
        n = self.notify_updated(uri, consume=True)
        self._log.info("selfmcp.terminal", uri=uri, relayed=True, notified=n)

    async def _wait_terminal(self, internal: str, principal: str) -> dict[str, Any] | Unknown:
        """The run's body once it is terminal, or as it is after ``WAIT_POLL`` s."""
        state = self.lookup(internal, principal)
        if isinstance(state, HandleState) and not state.done:
            event = self._waiters.setdefault(internal, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), WAIT_POLL)
            state = self.lookup(internal, principal)
        return state if isinstance(state, Unknown) else state.body()

    async def relayed(self, request: RelayRequest, principal: str) -> RelayAnswer:
        """A peer's relayed operation (agentd.pool.relay.RelayTarget): only on this
        worker's own handles (a relayed handle is never relayed on)."""
        assert self.pool is not None
        if request.op == "spawn":  # placed here by a peer at its caps: never placed on
            try:
                spawn = convert_peer(request.arguments or {}, _PlacedSpawn, ValueError)
            except ValueError as exc:
                return RelayAnswer("refused", text=f"spawn refused: bad relayed request: {exc}")
            placed = await self._spawn_here(spawn, principal)
            if isinstance(placed, Refusal):
                return RelayAnswer("refused", text=placed.text)
            return RelayAnswer("body", body=placed)
        where = self.pool.where(request.handle, principal)
        if where is not None and where.lost is not None:
            return RelayAnswer("body", body=where.lost)
        if where is None or where.internal is None:  # unknown, or a third member's
            return RelayAnswer("unknown")
        if request.op == "wait":  # a peer's subscriber: answered at the terminal state
            body = await self._wait_terminal(where.internal, principal)
        else:
            body = await self._local(request.op, where.internal, request.message, principal)
        if isinstance(body, Unknown):
            return RelayAnswer("unknown")
        return RelayAnswer("body", body=self.pool.body(body))

    # -------------------------------------------------------- resources
    async def _read_status(self, uri: str) -> Any:
        return {**self.status_body(), "spawns": self.backend.counts()}

    def tree(self, principal: str | None) -> list[dict[str, Any]]:
        """The live view's rows (`agentd top`): the agent's own subagents, and the
        served runs (with their subtrees) this principal owns; never another's."""
        rows = self.backend.snapshot(principal)
        return self.pool.rows(rows) if self.pool is not None else rows

    async def read_resource(self, uri: str, ctx: CallContext) -> Any:
        if uri == STATUS_URI:  # with the tree this reader may see
            body = {**self.status_body(), "spawns": self.backend.counts(),
                    "tree": self.tree(ctx.principal)}
            if self.pool is not None:  # this worker's share of the pool
                body["pool"] = self.pool.share(self.backend.counts())
            return t.ReadResourceResult(contents=[t.TextResourceContents(
                uri=uri, text=orjson.dumps(body, default=str).decode(),
                mimeType="application/json")])
        if uri.startswith(SUBAGENT_PREFIX):
            try:
                run = await self._op("read", uri[len(SUBAGENT_PREFIX):], None, ctx.principal)
            except PoolError as exc:
                raise RPCError(INTERNAL_ERROR, str(exc), {"uri": uri}, side="local") from None
            if not isinstance(run, dict):  # unknown, evicted or another's
                raise resource_not_found(uri)
            text = orjson.dumps(run, default=str).decode()
            return t.ReadResourceResult(contents=[t.TextResourceContents(
                uri=uri, text=text, mimeType="application/json")])
        return await super().read_resource(uri, ctx)

    def cache_hint(self, method: str, uri: str | None) -> tuple[int, str]:
        if method == t.RESOURCES_READ:
            if uri is not None and uri.startswith(SUBAGENT_PREFIX):
                handle = uri[len(SUBAGENT_PREFIX):]
                left = self.backend.retained(handle if self.pool is None
                                             else self.pool.internal(handle) or "")
                if left is not None:  # final until evicted
                    return max(0, int(left * 1000)), mcp2026.CACHE_PRIVATE
            return 0, mcp2026.CACHE_PRIVATE
        return STABLE_TTL_MS, mcp2026.CACHE_PUBLIC

    def subscription_is_persistent(self, uri: str) -> bool:
        return uri == STATUS_URI  # a run's subscription is consumed by its one update

    async def admit(self, uris: list[str], ctx: CallContext) -> dict[str, Any]:
        """Pool mode: the owners of other workers' handles among ``uris`` are asked
        first, all at once (agentd.served.pool.PoolServed.admit), so a listen's
        acknowledgement -- or a subscribe's ``{}`` -- follows every owner's answer."""
        if self.pool is None:
            return {}
        wanted = {u: u[len(SUBAGENT_PREFIX):] for u in uris if u.startswith(SUBAGENT_PREFIX)}
        return await self.pool.admit(wanted, ctx.principal) if wanted else {}

    def subscribe(self, uri: str, ctx: CallContext) -> None:
        """The subscribe rule of docs/server.md: a live handle of this principal is
        held until its terminal update, an ended one is announced at once, and
        anything else is refused (-32602; a listen leaves it out of its ack)."""
        if uri == STATUS_URI and mcp2026.is_modern_version(ctx.session.protocol_version):
            ctx.session.subscribe(uri)  # 2026-07-28 listeners: announced on each change
            if self._announced_counts is None:
                self._announced_counts = self.backend.counts()
            return
        if not uri.startswith(SUBAGENT_PREFIX):
            raise subscribe_refused(uri)  # agent://status (2025-11-25) or not ours
        handle = uri[len(SUBAGENT_PREFIX):]
        if self.pool is not None:
            where = self.pool.where(handle, ctx.principal)
            if where is None:
                raise subscribe_refused(uri)  # unknown, evicted or another's
            if where.lost is not None:
                ctx.session.notify_updated(uri)
                return
            if where.owner is not None:  # the owner's verdict, fanned in by admit()
                verdict = ctx.admitted.get(uri)
                if verdict is not None and (verdict.kind != "body" or verdict.body is None):
                    raise subscribe_refused(uri)  # unknown there (evicted): as on one worker
                if verdict is not None and verdict.body.get("done"):
                    ctx.session.notify_updated(uri)
                    return
                # running there, or no answer in time: held and watched until the
                # owner answers terminal or is called dead (the lost-owner rule)
                if not self.pool.watch(uri, handle, where.owner, ctx.principal,
                                       self._remote_ended):
                    raise subscribe_refused(uri)
                ctx.session.subscribe(uri)
                return
            assert where.internal is not None
            handle = where.internal
        state = self.lookup(handle, ctx.principal)
        if isinstance(state, Unknown):
            raise subscribe_refused(uri)  # unknown, evicted or another's
        if state.done:
            # Ended before the subscribe: the terminal transition's update goes to
            # every subscriber (§2.3), this late one too, queued on its stream as
            # the {} is answered (a listen's ack stays first); the peer then reads
            # the terminal body.  At least once: a repeated subscribe sees another.
            ctx.session.notify_updated(uri)
            self._log.info("selfmcp.subscribe.ended", handle=state.handle)
            return
        ctx.session.subscribe(uri)
