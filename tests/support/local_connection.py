"""An in-process client of a server handler for tests: the Stdio origin, no
transport, so the session rules and a handler's behaviour can be driven
without a socket.

It lives with the tests because nothing in agentd needs it: the agent's own
loop reaches its supervisor directly (`agentd.agent.selftools`), not through
the self-MCP's handler.
"""

from __future__ import annotations

from typing import Any

import orjson
from msgspec import UNSET, Raw

from agentd.errors import RPCError
from agentd.mcp.server.handler import Handler, ServerSession
from agentd.mcp.server.rules.sessions import ORIGIN_STDIO
from agentd.wire import codec
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import ErrorResponse, Notification, Request, Response

__all__ = ["LocalConnection"]


class LocalConnection:
    """An in-process client of a handler: the Stdio origin, no transport.

    ``await conn.request(method, params)`` returns the decoded result (plain
    JSON values) or raises ``RPCError``; unsolicited notifications land in
    ``conn.notifications`` (a list of decoded messages).
    """

    def __init__(self, handler: Handler, *, session_id: str = "stdio") -> None:
        self.notifications: list[Any] = []
        self.session = ServerSession(handler, handler.hub, session_id, origin=ORIGIN_STDIO,
                                     auth="in-process",
                                     outbox=lambda b: self.notifications.append(orjson.loads(b)))
        handler.hub.add(self.session)
        self._next = 0

    async def request(self, method: str, params: Any = UNSET) -> Any:
        self._next += 1
        raw = UNSET if params is UNSET else Raw(codec.encode(params))
        out = await self.session.receive(Request(self._next, method, raw))
        assert out is not None  # a request is always answered
        msg = codec.decode(out)
        if type(msg) is ErrorResponse:
            e = msg.error
            raise RPCError(e.code, e.message, e.data, id=msg.id, side="remote")
        assert type(msg) is Response, msg
        return orjson.loads(bytes(msg.result))

    async def initialize(self) -> Any:
        result = await self.request(t.INITIALIZE, {
            "protocolVersion": t.LATEST_PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "agentd-local", "version": "0"}})
        await self.session.receive(Notification(t.NOTIFICATION_INITIALIZED))
        return result

    def close(self) -> None:
        self.session.close()
