"""Subscriptions of one MCP client, and negotiation by need.

A mixin of :class:`~agentd.mcp.client.MCPClient` (as :mod:`agentd.mcp.channel`
is): ``subscribe`` is ``resources/subscribe`` at 2025-11-25 and a URI of the
listen filter at 2026-07-28 (:class:`~agentd.mcp.listen.Listener`); a
2026-07-28 server whose listen cannot deliver is moved to 2025-11-25 first
(the rule is :func:`agentd.mcp.negotiate.renegotiate_for_updates`).
"""

from __future__ import annotations

import asyncio
import contextlib

from agentd.errors import HandshakeError, ToolFault
from agentd.mcp.listen import Listener
from agentd.mcp.negotiate import renegotiate_for_updates
from agentd.mcp.recovery import Reconnecting
from agentd.wire import mcp_types as mt

__all__ = ["Subscribing"]


class Subscribing(Reconnecting):
    """``subscribe``/``unsubscribe`` and the renegotiation they may need."""

    subscriptions: set[str]
    legacy_refused: bool
    _listen: Listener
    _renegotiating: asyncio.Lock

    async def subscribe(self, uri: str) -> bool:
        """Subscribe one concrete URI: ``resources/subscribe``, or the listen filter
        at 2026-07-28 (a server whose listen cannot deliver is moved to 2025-11-25
        first, :mod:`agentd.mcp.negotiate`).  False (with a warning) when the
        server cannot deliver updates: the client degrades instead of sending it.
        """
        if not uri or "{" in uri or "}" in uri:
            raise ValueError(f"subscribe needs a concrete URI, not {uri!r}")
        if self._needs_legacy() and await self._renegotiate(uri):
            return await self.subscribe(uri)  # now at 2025-11-25 (agentd/mcp/negotiate.py)
        if not self._session.capabilities.resources_subscribe:
            self.log.warning("mcp.subscribe.unsupported", uri=uri)
            return False
        if self._session.stateless:  # 2026-07-28: a URI of the subscriptions/listen filter
            return await self._listen.subscribe(uri) or (
                self._needs_legacy() and await self.subscribe(uri))  # listen said -32601
        await self._request(mt.RESOURCES_SUBSCRIBE, mt.SubscribeParams(uri=uri))
        self.subscriptions.add(uri)
        return True

    def _needs_legacy(self) -> bool:
        s = self._session
        return renegotiate_for_updates(
            stateless=s.stateless, delivers=s.listen_delivers,
            listen_unsupported=self._listen.unsupported, legacy_refused=self.legacy_refused)

    async def _renegotiate(self, uri: str) -> bool:
        """Negotiation by need: this server's 2026-07-28 surface cannot deliver the
        updates a subscription needs, so speak 2025-11-25 to it from now on (a
        reconnect re-initializes it too).  False, logged, when it will not
        initialize: it is discovered again and the subscription degrades."""
        async with self._renegotiating:
            if not self._session.stateless:
                return True  # another subscribe did it meanwhile
            why = ("subscriptions/listen answered -32601" if self._listen.unsupported
                   else "server/discover says resources.subscribe: false")
            listener = self._listener
            if listener is not None:
                listener.cancel()
            self._connected.clear()
            conn = self._conn
            conn.era = "session"  # pinned: the handshake re-initializes from now on
            try:
                await conn.handshake(self.init_timeout)
                if not self._session.capabilities.resources_subscribe:  # nothing gained
                    raise HandshakeError("no resources.subscribe at 2025-11-25 either")
            except HandshakeError as exc:
                self.legacy_refused = True
                conn.era = None
                self.log.warning("mcp.renegotiate.failed", uri=uri, reason=why,
                                 error=str(exc)[:300])
                self._trigger_recover(expired=True, reason="back to 2026-07-28")
                return False
            self.log.info("mcp.renegotiated", uri=uri, reason=why,
                          protocol_version=self._session.protocol_version)
            await self._after_connect(first=not self.subscriptions)
            return True

    async def unsubscribe(self, uri: str) -> None:
        if uri not in self.subscriptions:
            return
        self.subscriptions.discard(uri)
        if self._session.stateless:
            self._listen.unsubscribe(uri)
            return
        if self._session.capabilities.resources_subscribe and self._connected.is_set():
            with contextlib.suppress(ToolFault):
                await self._request(mt.RESOURCES_UNSUBSCRIBE, mt.UnsubscribeParams(uri=uri))
