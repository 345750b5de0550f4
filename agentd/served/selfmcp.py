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

The handler holds a :class:`~agentd.served.backend.ServedBackend` and knows
nothing of pools: on one worker it is :class:`~agentd.served.backend.LocalServed`
over the tree's backend; in pool mode (``--pool-*``, docs/operations.md "Pool")
it is :class:`agentd.served.pool.PoolBackend`, which names handles
``served.<owner>.<token>``, relays a peer's handle to its owner (status, send,
cancel, read, a subscription's wait) and places a spawn at this worker's caps
on a peer; 2025-11-25 sessions are proxied to the worker holding them
(:mod:`agentd.pool.link.session_relay`).

Terminal runs stay readable as long as the backend retains them (the tree's
one terminal retention, :mod:`agentd.tree.registry`: 600 s, at most 1024,
oldest first); after that the URI reads -32002.  Who may touch a served
handle is the one rule of :mod:`agentd.tree.ownership` (its principal's).
"""

from __future__ import annotations

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
    Unknown,
)
from agentd.errors import PoolError, RPCError
from agentd.log import log
from agentd.mcp.server.handler import CallContext, Handler
from agentd.obs import health
from agentd.served.backend import SERVED_CALLER, SERVED_TOOLS, LocalServed, ServedBackend
from agentd.wire import mcp2026
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import INTERNAL_ERROR, resource_not_found, subscribe_refused

__all__ = [
    "SERVED_CALLER",
    "STATUS_URI",
    "SUBAGENT_PREFIX",
    "TOOL_SCHEMAS",
    "SelfMCP",
]

STATUS_URI: Final = "agent://status"
SUBAGENT_PREFIX: Final = "agent://subagent/"
STABLE_TTL_MS: Final = 3_600_000  # the tool set, the listed resources: fixed per process
_STATUS_SCHEMA: Final = {"type": "object", "properties": {}}
_STATUS_DESCRIPTION: Final = "Read this agent's run id, mode, version, pid and uptime."

TOOL_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "status": _STATUS_SCHEMA, **{n: t.input_schema for n, t in SERVED_TOOLS.items()}}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()


def _refused(text: str) -> t.CallToolResult:
    return t.CallToolResult(content=[t.TextContent(text=text)], isError=True)


def _state_result(structured: dict[str, Any], text: str | None = None) -> t.CallToolResult:
    return t.CallToolResult(content=[t.TextContent(text=text if text is not None
                                                   else _text(structured))],
                            structuredContent=structured)


class SelfMCP(Handler):
    """The self-MCP handler over one backend (default :class:`Unavailable`), or
    over ``served``, the served face's backend wrapping it (a pool worker's)."""

    def __init__(self, backend: SubagentBackend | None = None, *, run_id: str = "",
                 mode: str = "task", served: ServedBackend | None = None) -> None:
        super().__init__("agentd", __version__, subscribe=True)
        self.served: ServedBackend = served if served is not None else LocalServed(backend)
        self.run_id = run_id
        self.mode = mode
        self.started = time.monotonic()
        self._log = log.bind(component="selfmcp")
        self._announced_counts: dict[str, int] | None = None
        self.add_tool("status", self._status, _STATUS_SCHEMA, description=_STATUS_DESCRIPTION)
        for name, tool in SERVED_TOOLS.items():
            fn = self._spawn if name == "subagent.spawn" else self._handle_op(name)
            self.add_tool(name, self._refusing(tool, fn),
                          self.served.tool_schema(name, tool.input_schema),
                          description=tool.description)
        self.add_resource(STATUS_URI, self._read_status, name="status",
                          description="This agent's run id, mode, version, pid, uptime and "
                                      "spawn counts.", mime_type="application/json")
        self.served.on_terminal(self._on_terminal)
        self.served.on_spawned(self._status_changed)

    # ------------------------------------------------------------ state
    def status_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "run_id": self.run_id, "mode": self.mode, "version": __version__,
            "pid": os.getpid(), "uptime_ms": int((time.monotonic() - self.started) * 1000)}
        steps, usage = self.served.served_usage()  # the work done for peers (docs/server.md)
        body["served"] = {"steps": steps, "usage": msgspec.structs.asdict(usage)}
        if self.mode == "reactive":  # each watched URI and how (docs/reactive.md)
            body["watched"] = health.watched()
        return body

    def _on_terminal(self, state: HandleState) -> None:
        handle = state.handle
        self._status_changed()
        if not handle.startswith(SERVED_CALLER + "."):
            return
        n = self.notify_updated(SUBAGENT_PREFIX + self.served.shown(handle), consume=True)
        self._log.info("selfmcp.terminal", handle=handle, status=state.status, notified=n)

    def _status_changed(self) -> None:
        """``updated agent://status`` to its (2026-07-28) listeners when the counts moved."""
        if not self.hub.subscribers(STATUS_URI):
            self._announced_counts = None
            return
        counts = self.served.counts()
        if counts != self._announced_counts:
            self._announced_counts = counts
            self.notify_updated(STATUS_URI)

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
        body = await self.served.spawn(request, ctx.principal)
        if isinstance(body, Refusal):
            return body
        if not body["done"]:
            return _state_result(body)
        return _state_result(body, _text(body.get("result")))

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
            body = await self.served.operate(op, handle, message, ctx.principal)
        except PoolError as exc:  # the owner did not answer: say so, not "unknown"
            return _refused(str(exc))
        return _state_result(body) if isinstance(body, dict) else body

    def _remote_ended(self, uri: str) -> None:
        """A peer's run this worker's sessions subscribed to ended (or was lost)."""
        n = self.notify_updated(uri, consume=True)
        self._log.info("selfmcp.terminal", uri=uri, relayed=True, notified=n)

    # -------------------------------------------------------- resources
    async def _read_status(self, uri: str) -> Any:
        return {**self.status_body(), "spawns": self.served.counts()}

    def tree(self, principal: str | None) -> list[dict[str, Any]]:
        """The live view's rows (`agentd top`): the agent's own subagents, and the
        served runs (with their subtrees) this principal owns; never another's."""
        return self.served.rows(principal)

    async def read_resource(self, uri: str, ctx: CallContext) -> Any:
        if uri == STATUS_URI:  # with the tree this reader may see
            body = {**self.status_body(), "spawns": self.served.counts(),
                    "tree": self.tree(ctx.principal), **self.served.status_extra()}
            return t.ReadResourceResult(contents=[t.TextResourceContents(
                uri=uri, text=orjson.dumps(body, default=str).decode(),
                mimeType="application/json")])
        if uri.startswith(SUBAGENT_PREFIX):
            try:
                run = await self.served.operate("read", uri[len(SUBAGENT_PREFIX):], None,
                                                ctx.principal)
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
                left = self.served.retained(uri[len(SUBAGENT_PREFIX):])
                if left is not None:  # final until evicted
                    return max(0, int(left * 1000)), mcp2026.CACHE_PRIVATE
            return 0, mcp2026.CACHE_PRIVATE
        return STABLE_TTL_MS, mcp2026.CACHE_PUBLIC

    def subscription_is_persistent(self, uri: str) -> bool:
        return uri == STATUS_URI  # a run's subscription is consumed by its one update

    async def admit(self, uris: list[str], ctx: CallContext) -> dict[str, Any]:
        """The backend's verdicts on the runs among ``uris``, asked first, all at once
        (a pool worker asks other workers' handles of their owners), so a listen's
        acknowledgement -- or a subscribe's ``{}`` -- follows every answer."""
        wanted = {u: u[len(SUBAGENT_PREFIX):] for u in uris if u.startswith(SUBAGENT_PREFIX)}
        return await self.served.admit(wanted, ctx.principal) if wanted else {}

    def subscribe(self, uri: str, ctx: CallContext) -> None:
        """The subscribe rule of docs/server.md: a live handle of this principal is
        held until its terminal update, an ended one is announced at once, and
        anything else is refused (-32602; a listen leaves it out of its ack)."""
        if uri == STATUS_URI and mcp2026.is_modern_version(ctx.session.protocol_version):
            ctx.session.subscribe(uri)  # 2026-07-28 listeners: announced on each change
            if self._announced_counts is None:
                self._announced_counts = self.served.counts()
            return
        if not uri.startswith(SUBAGENT_PREFIX):
            raise subscribe_refused(uri)  # agent://status (2025-11-25) or not ours
        verdict = self.served.subscribe(uri, uri[len(SUBAGENT_PREFIX):], ctx.principal,
                                        ctx.admitted.get(uri), self._remote_ended)
        if verdict == "refused":
            raise subscribe_refused(uri)  # unknown, evicted or another's
        if verdict == "ended":
            # Ended before the subscribe: the terminal transition's update goes to
            # every subscriber (§2.3), this late one too, queued on its stream as
            # the {} is answered (a listen's ack stays first); the peer then reads
            # the terminal body.  At least once: a repeated subscribe sees another.
            ctx.session.notify_updated(uri)
            return
        ctx.session.subscribe(uri)
