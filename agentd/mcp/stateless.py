"""The MCP 2026-07-28 revision's surface to the transport.

A 2026-07-28 request is one exchange on a per-request
:class:`~agentd.mcp.handler.ServerSession` (its ``per_request`` factory, its
``serve`` driver: the rules of ``agentd.mcp.stateless_session`` route it, a
dispatch runs on the handler); a ``subscriptions/listen`` stream is the same
connection type built by its ``listening`` factory, holding a
:class:`~agentd.mcp.stateless_session.ListenState` and opened by its
``open_listen`` driver step.

The transport (``agentd.mcp.http_server``) routes bytes, counts streams and
writes SSE; the rule names it uses are re-exported here, so one module is the
revision's whole surface to it.
"""

from __future__ import annotations

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

__all__ = [
    "LIMIT_EXCEEDED",
    "SUPPORTED_VERSIONS",
    "Envelope",
    "ListenState",
    "classify",
    "http_status",
    "is_modern_request",
    "listen_params",
]
