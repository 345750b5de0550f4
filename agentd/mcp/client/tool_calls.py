"""The ``tools/call`` path of one MCP client, and MRTR's answers.

:class:`ToolCalls` is one part of :class:`~agentd.mcp.client.facade.MCPClient`,
handed the request loop, the catalogue, the watches and the run's ``_meta``.
It validates the arguments against the tool's ``inputSchema`` (a mismatch is
an ``is_error`` observation and nothing is sent), builds each send of a call
-- the ``_meta`` the revision asks for (or the live span's ``traceparent``), a
fresh ``progressToken`` per send, the headers the revision asks for -- and
renders the answer, checking ``structuredContent`` against an
``outputSchema``.  A call of a tool its server declares idempotent
(:func:`~agentd.mcp.client.rules.faults.idempotent_tool`) is handed to the
request loop as idempotent, so a fault that may have let it run is re-sent
like an idempotent method's; any other call is sent once unless the fault
proves it was not processed.  Where the revision says so (2026-07-28), a header mismatch
(-32020) is re-listed and retried once, and an ``input_required`` result is
answered (MRTR, bounded by ``MAX_INPUT_ROUNDS``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import orjson
from msgspec import UNSET

from agentd.errors import ToolFault
from agentd.log import Logger
from agentd.mcp.client.call_watch import LIMIT_CAUSE, CallWatch, CallWatches
from agentd.mcp.client.connection import Connection
from agentd.mcp.client.listings import Listings
from agentd.mcp.client.request_loop import RequestLoop
from agentd.mcp.client.rules.arguments import wire_arguments
from agentd.mcp.client.rules.content import render_content
from agentd.mcp.client.rules.faults import idempotent_tool
from agentd.mcp.client.rules.revision import InputRequired
from agentd.mcp.client.rules.schema import input_validator, output_validator
from agentd.obs import trace
from agentd.obs.calls import McpCall
from agentd.wire import mcp_types as mt
from agentd.wire.shapes import Observation, ToolInfo

__all__ = ["MAX_INPUT_ROUNDS", "ToolCalls", "answer_input"]

MAX_INPUT_ROUNDS: Final = 10  # MRTR: input_required answers per request before giving up


async def answer_input(server: str, log: Logger, ir: InputRequired, rounds: int,
                       method: str) -> bytes:
    """The params to add to the retry of an ``input_required`` request (MRTR)."""
    if ir.refused:
        raise ToolFault(server, f"{method}: the server asked for input agentd does not "
                        "provide (declared client capabilities: none): "
                        + ", ".join(ir.refused)[:300], retryable=False, method=method)
    if rounds > MAX_INPUT_ROUNDS:
        raise ToolFault(server, f"{method}: still input_required after "
                        f"{MAX_INPUT_ROUNDS} rounds", retryable=False, method=method)
    log.info("mcp.input_required", method=method, round=rounds,
             answered=bool(ir.responses), state=ir.state is not None)
    if not ir.responses:  # state only: give the server a moment, bounded
        await asyncio.sleep(min(0.05 * 2 ** (rounds - 1), 0.25))
    extra = b""
    if ir.responses:
        extra += b',"inputResponses":' + ir.responses
    if ir.state is not None:
        extra += b',"requestState":' + orjson.dumps(ir.state)  # echoed unchanged
    return extra


class ToolCalls:
    """``tools/call`` of one server; see the module docstring."""

    def __init__(self, name: str, log: Logger, conn: Connection, requests: RequestLoop,
                 listings: Listings, watches: CallWatches, *, run_meta: bytes) -> None:
        self.name = name
        self.log = log
        self._conn = conn
        self._requests = requests
        self._listings = listings
        self._watches = watches
        self._run_meta = run_meta  # the run's id: the _meta of a session-revision call

    async def call(self, name: str, arguments: Mapping[str, Any] | str | bytes | None,
                   time_limit: float | None) -> Observation:
        """See :meth:`agentd.mcp.client.facade.MCPClient.call_tool`."""
        tool = self._listings.tools.get(name)
        wired = wire_arguments(name, arguments)
        if isinstance(wired, str):
            return Observation(wired, is_error=True)
        args, args_json = wired
        if tool is not None:
            v = input_validator(tool)
            if v is not None and not v.is_valid(args):
                errs = v.errors(args)
                return Observation(f"arguments do not match the input schema of tool {name}: "
                                   + "; ".join(errs), is_error=True)
            name_json = tool.name_json
        else:
            name_json = orjson.dumps(name)
        watch = self._watches.open(name)
        with McpCall(self.name, name, listed=tool is not None,
                     revision=self._conn.session.protocol_version) as rec:  # span, count, latency
            try:
                raw, relisted = await self._send(name, args, name_json, args_json, time_limit,
                                                 watch)
                if relisted:  # answered under the schema the re-list brought
                    tool = self._listings.tools.get(name)
                return rec.done(self._observation(name, tool, raw))
            except ToolFault as exc:  # a limit reached is an observation: the server is fine
                r = watch.reached if watch is not None else None
                if exc.cause != LIMIT_CAUSE or r is None:
                    raise
                return rec.done(Observation(r.text, is_error=True), f"{r.limit}_limit")
            finally:
                if watch is not None:
                    watch.release()

    async def _send(self, name: str, args: Mapping[str, Any], name_json: bytes,
                    args_json: bytes, time_limit: float | None, watch: CallWatch | None
                    ) -> tuple[msgspec.Raw, bool]:
        """The call's sends until a final answer: its raw result, and whether the
        catalogue was re-listed on the way (a header mismatch)."""
        relisted = False
        extra = b""
        rounds = 0
        while True:
            rev = self._conn.session.revision
            tool = self._listings.tools.get(name)  # as listed now (a re-list may change it)
            headers = rev.call_headers(tool, name, args)
            # a tool its server declares idempotent is re-sent like an idempotent method
            idempotent = tool is not None and idempotent_tool(tool.annotations)
            try:
                raw = await self._send_once(name_json, args_json, time_limit, headers, extra,
                                            watch, idempotent=idempotent)
            except ToolFault as exc:
                if relisted or not rev.relists_on(exc.code):
                    raise
                relisted = True
                self.log.info("mcp.header_mismatch", tool=name[:200], error=exc.message[:300])
                await self._listings.list_tools()
                if name not in self._listings.tools:
                    raise
                continue
            ir = rev.input_required(raw)
            if ir is None:
                return raw, relisted
            rounds += 1
            extra = await answer_input(self.name, self.log, ir, rounds, mt.TOOLS_CALL)

    async def _send_once(self, name_json: bytes, args_json: bytes, time_limit: float | None,
                         headers: Any, extra: bytes, watch: CallWatch | None, *,
                         idempotent: bool) -> msgspec.Raw:
        session = self._conn.session

        def build() -> tuple[int | str, bytes, Any]:
            # the live span's traceparent, when tracing (SEP-414); else the run's
            meta = trace.meta(session.revision.call_meta(session.meta_json, self._run_meta))
            if watch is not None:  # a fresh progressToken per send (both revisions)
                meta = watch.meta(meta)
            rid, data = session.call_tool(name_json, args_json, meta, extra)
            return rid, data, headers

        return await self._requests.retrying(mt.TOOLS_CALL, build, time_limit,
                                             idempotent=idempotent, watch=watch)

    def _observation(self, name: str, tool: ToolInfo | None, raw: msgspec.Raw) -> Observation:
        r = self._requests.decode(raw, mt.CallToolResult, mt.TOOLS_CALL)
        text = render_content(r.content)
        if r.isError:
            return Observation(text, True, None, tuple(r.content))
        structured = None
        if self._conn.session.structured_output:
            sc = r.structuredContent
            if tool is not None and tool.output_schema is not None:
                if sc is UNSET:
                    raise ToolFault(self.name, f"tool {name} declares an outputSchema but "
                                    "returned no structuredContent", retryable=False,
                                    method=mt.TOOLS_CALL)
                v = output_validator(tool)
                if v is not None and not v.is_valid(sc):
                    raise ToolFault(self.name, f"structuredContent of tool {name} does not "
                                    "match its outputSchema: " + "; ".join(v.errors(sc)),
                                    retryable=False, method=mt.TOOLS_CALL)
            if sc is not UNSET:
                structured = sc
        return Observation(text, False, structured, tuple(r.content))
