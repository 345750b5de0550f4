"""Which channel carries `notifications/resources/updated` to one MCP client.

A subscription the server accepts is worth nothing without a way for the
notification to arrive, and the two revisions differ:

* 2026-07-28: the `subscriptions/listen` stream (`listen`); the client's
  `subscribe` already returns False for a URI its acknowledgement leaves out.
* 2025-11-25: `resources/subscribe` and the session's standalone GET stream
  (`subscribe`). A server that answers the GET with 405 (a JSON-only
  deployment) accepts a subscription it can never deliver: no channel (None).
  So does one that gives no `Mcp-Session-Id` (supergateway stateless, the
  TypeScript SDK's stateless mode: a fresh server per request): its
  notifications belong to a session, and the one that took our subscribe
  ended with that request, whatever a GET stream then shows.

The reactive daemon asks this after subscribing and polls a URI with no
channel instead of waiting forever (docs/reactive.md). A mixin of
`MCPClient`, so the client module does not grow.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from agentd.mcp.connection import Connection

__all__ = ["Channel", "UpdateChannel"]

Channel = Literal["subscribe", "listen"]


class UpdateChannel:
    """`update_channel()` for a class holding a connection (session and transport)."""

    _conn: Connection
    init_timeout: float

    async def update_channel(self) -> Channel | None:
        """The channel an `updated` for a subscribed URI would come on, or None.

        At 2025-11-25 the GET stream is tried in the background after the
        handshake: this waits for its answer, at most `init_timeout` seconds
        (a server that has not answered the GET by then is taken to offer
        none)."""
        if self._conn.session.stateless:
            return "listen"
        t = self._conn.transport
        if t is None or not t.session_id:  # no session to tie the subscription to
            return None
        if not t.get_known.is_set():
            try:
                async with asyncio.timeout(self.init_timeout):
                    await t.get_known.wait()
            except TimeoutError:
                return None
        return "subscribe" if t.get_offered else None
