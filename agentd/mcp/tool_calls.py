"""The ``tools/call`` send path of one MCP client, and MRTR's answers.

A mixin of :class:`~agentd.mcp.client.MCPClient` (as :mod:`agentd.mcp.channel`
is): the client validates and renders; this builds each send of a call --
the run's ``_meta`` (or the live span's ``traceparent``) and a fresh
``progressToken`` per send -- and, at 2026-07-28, the ``Mcp-Method``,
``Mcp-Name`` and ``x-mcp-header`` headers, one re-list and retry on a header
mismatch (-32020), and the answers to an ``input_required`` result (MRTR,
bounded by ``MAX_INPUT_ROUNDS``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

import msgspec
import orjson

from agentd.errors import ToolFault
from agentd.log import Logger
from agentd.mcp.call_watch import CallWatch
from agentd.mcp.client_session import ClientSession, InputRequired
from agentd.mcp.param_headers import encode_value, param_headers
from agentd.obs import trace
from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt
from agentd.wire.shapes import ToolInfo

__all__ = ["MAX_INPUT_ROUNDS", "ToolCalling"]

MAX_INPUT_ROUNDS: Final = 10  # MRTR: input_required answers per request before giving up


class ToolCalling:
    """The send path of ``tools/call``; see the module docstring."""

    name: str
    log: Logger
    tools: Mapping[str, ToolInfo]
    _session: ClientSession
    _meta_json: bytes
    _retrying: Callable[..., Coroutine[Any, Any, msgspec.Raw]]
    list_tools: Callable[[], Coroutine[Any, Any, Any]]

    def _call_headers(self, name: str, args: Mapping[str, Any]) -> list[tuple[str, str]]:
        tool = self.tools.get(name)
        headers = [("Mcp-Method", mt.TOOLS_CALL),
                   ("Mcp-Name", tool.name_header if tool is not None else encode_value(name))]
        if tool is not None and tool.param_headers:
            headers.extend(param_headers(tool.param_headers, args))
        return headers

    async def _call_stateless(self, name: str, args: Mapping[str, Any], name_json: bytes,
                              args_json: bytes, time_limit: float | None,
                              watch: CallWatch | None = None) -> msgspec.Raw:
        """``tools/call`` at 2026-07-28: the standard and ``x-mcp-header`` headers,
        MRTR answered, and one re-list + retry on a header mismatch (-32020), as
        the revision advises (the tool's schema may have changed)."""
        relisted = False
        extra = b""
        rounds = 0
        while True:
            try:
                raw = await self._call(name_json, args_json, time_limit,
                                       self._call_headers(name, args), extra, watch)
            except ToolFault as exc:
                if exc.code != m26.HEADER_MISMATCH or relisted:
                    raise
                relisted = True
                self.log.info("mcp.header_mismatch", tool=name[:200], error=exc.message[:300])
                await self.list_tools()
                if name not in self.tools:
                    raise
                continue
            ir = ClientSession.input_required(raw)
            if ir is None:
                return raw
            rounds += 1
            extra = await self._answer_input(ir, rounds, mt.TOOLS_CALL)

    async def _answer_input(self, ir: InputRequired, rounds: int, method: str) -> bytes:
        """The params to add to the retry of an ``input_required`` request (MRTR)."""
        if ir.refused:
            raise ToolFault(self.name, f"{method}: the server asked for input agentd does not "
                            "provide (declared client capabilities: none): "
                            + ", ".join(ir.refused)[:300], retryable=False, method=method)
        if rounds > MAX_INPUT_ROUNDS:
            raise ToolFault(self.name, f"{method}: still input_required after "
                            f"{MAX_INPUT_ROUNDS} rounds", retryable=False, method=method)
        self.log.info("mcp.input_required", method=method, round=rounds,
                      answered=bool(ir.responses), state=ir.state is not None)
        if not ir.responses:  # state only: give the server a moment, bounded
            await asyncio.sleep(min(0.05 * 2 ** (rounds - 1), 0.25))
        extra = b""
        if ir.responses:
            extra += b',"inputResponses":' + ir.responses
        if ir.state is not None:
            extra += b',"requestState":' + orjson.dumps(ir.state)  # echoed unchanged
        return extra

    async def _call(self, name_json: bytes, args_json: bytes, time_limit: float | None,
                    headers: list[tuple[str, str]] | tuple = (), extra: bytes = b"",
                    watch: CallWatch | None = None) -> msgspec.Raw:
        session = self._session

        def build() -> tuple[int | str, bytes, Any]:
            # the live span's traceparent, when tracing (SEP-414); else the run's
            meta = trace.meta(session.meta_json if session.stateless else self._meta_json)
            if watch is not None:  # a fresh progressToken per send (both revisions)
                meta = watch.meta(meta)
            rid, data = session.call_tool(name_json, args_json, meta, extra)
            return rid, data, headers

        return await self._retrying(mt.TOOLS_CALL, build, time_limit, idempotent=False,
                                    watch=watch)
