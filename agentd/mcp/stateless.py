"""The MCP 2026-07-28 listen stream's IO side, and the revision's surface to the transport.

A 2026-07-28 request is one exchange on a per-request
:class:`~agentd.mcp.handler.ServerSession` (its ``per_request`` factory, its
``serve`` driver: the rules of ``agentd.mcp.stateless_session`` route it, a
dispatch runs on the handler).  What stays here:

* :class:`Listener` is a :class:`~agentd.mcp.stateless_session.ListenState`
  whose :meth:`~Listener.open` awaits the handler's ``admit`` for all the
  requested URIs (the pool's fan-in: one acknowledgement once every owning
  worker has answered), then runs the handler's own ``subscribe`` for each
  (so a handler's admission rules -- the self-MCP's unlisted-URI
  rule and ownership check -- apply unchanged); a URI the handler refuses
  (:func:`~agentd.wire.jsonrpc.subscribe_refused`, a 2025-11-25 session's -32602)
  is not honoured: the acknowledgement, the subset the server agreed to,
  leaves it out.

The transport (``agentd.mcp.http_server``) routes bytes, counts streams and
writes SSE; the rule names it uses are re-exported here, so one module is the
revision's whole surface to it.
"""

from __future__ import annotations

from agentd.errors import RPCError
from agentd.log import log
from agentd.mcp.handler import CallContext, Handler
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
from agentd.wire.jsonrpc import is_subscribe_refusal

__all__ = [
    "LIMIT_EXCEEDED",
    "SUPPORTED_VERSIONS",
    "Envelope",
    "Listener",
    "classify",
    "http_status",
    "is_modern_request",
    "listen_params",
]

_log = log.bind(component="mcp.server")


class Listener(ListenState):
    """A ``subscriptions/listen`` stream whose subscriptions go through the handler."""

    __slots__ = ()
    handler: Handler  # the rules read its Catalogue; open() calls admit and subscribe

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
            except RPCError as exc:
                if not is_subscribe_refusal(exc):
                    raise
                if _log.enabled("debug"):  # a peer's ask, answered by the ack: no flood
                    _log.debug("mcp.serve.listen.refused", uri=uri[:200])
            self.subscribed(uri)
        return self.acknowledge()
