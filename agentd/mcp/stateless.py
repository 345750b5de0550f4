"""The MCP 2026-07-28 engine: the stateless rules run on a handler.

The rules are ``agentd.mcp.stateless_session`` (sans-IO: a request and its
headers in, bytes or a dispatch out); this module is their IO side, as
``agentd.mcp.handler.ServerSession`` is for the 2025-11-25 session rules:

* :func:`serve_request` answers one classified request on a per-request
  session: the rules route it, a dispatch (a tool call, a resource read) is
  awaited on the handler through :func:`~agentd.mcp.handler.run_dispatch`
  (which logs what was served), the rules build the response; a handler bug
  is logged with its detail and answered -32603, never raised;
* :class:`Listener` is a :class:`~agentd.mcp.stateless_session.ListenState`
  whose :meth:`~Listener.open` awaits the handler's ``admit`` for all the
  requested URIs (the pool's fan-in: one acknowledgement once every owning
  worker has answered), then runs the handler's own ``subscribe`` for each
  (so a handler's admission rules -- the self-MCP's unlisted-URI
  rule and ownership check -- apply unchanged); a URI the handler refuses
  (:class:`~agentd.mcp.handler.SubscribeRefused`, a 2025-11-25 session's -32602)
  is not honoured: the acknowledgement, the subset the server agreed to,
  leaves it out.

The transport (``agentd.mcp.http_server``) routes bytes, counts streams and
writes SSE; the rule names it uses are re-exported here, so one module is the
revision's whole surface to it.
"""

from __future__ import annotations

from typing import Any

from agentd.log import log
from agentd.mcp import stateless_session as rules
from agentd.mcp.handler import CallContext, Emit, ServerSession, SubscribeRefused, run_dispatch
from agentd.mcp.server_session import Dispatch
from agentd.mcp.stateless_session import (
    LIMIT_EXCEEDED,
    SUPPORTED_VERSIONS,
    Envelope,
    ListenState,
    classify,
    http_status,
    is_modern_request,
    listen_params,
)
from agentd.wire import mcp2026 as m
from agentd.wire.jsonrpc import ProtocolError, Request

__all__ = [
    "LIMIT_EXCEEDED",
    "SUPPORTED_VERSIONS",
    "Envelope",
    "Listener",
    "classify",
    "http_status",
    "is_modern_request",
    "listen_params",
    "serve_request",
]

_log = log.bind(component="mcp.server")


async def serve_request(session: ServerSession, req: Request, env: Envelope,
                        headers: Any = None, emit: Emit | None = None) -> tuple[bytes, int]:
    """Answer one classified 2026-07-28 request on a per-request ``session``.

    Returns the encoded JSON-RPC response and its HTTP status."""
    try:
        out = rules.route(session, req, env, headers)
        if type(out) is Dispatch:
            out = await run_dispatch(session, req, out, emit)
        return rules.answer(session.handler, req, env, out)
    except ProtocolError as exc:
        return rules.refuse(req.id, exc)
    except Exception as exc:  # a handler bug never kills the server
        _log.error("mcp.serve.internal_error", method=req.method, origin=session.origin,
                   error=type(exc).__name__, detail=str(exc)[:500])
        return rules.internal_error(req.id)


class Listener(ListenState):
    """A ``subscriptions/listen`` stream whose subscriptions go through the handler."""

    __slots__ = ()

    async def open(self, params: m.ListenParams) -> bytes:
        """Subscribe what was asked and is served; return the acknowledgement.

        The handler's ``admit`` is awaited first, for every URI at once (nothing
        is subscribed, so nothing is queued, while it runs).  Updates that fire
        during the subscribes (a run that is already terminal) are queued
        *behind* the acknowledgement, which is always first."""
        uris = self.requested(params)
        ctx = CallContext(self, self.request_id)
        if uris:
            ctx.admitted = await self.handler.admit(uris, ctx)
        for uri in uris:
            try:
                self.handler.subscribe(uri, ctx)
            except SubscribeRefused:
                if _log.enabled("debug"):  # a peer's ask, answered by the ack: no flood
                    _log.debug("mcp.serve.listen.refused", uri=uri[:200])
            self.subscribed(uri)
        return self.acknowledge()
