"""Errors of the OAuth layer.  Light on purpose: the MCP client imports this
module at start-up, the HTTP machinery only when a server asks for a login."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentd.errors import MCPError

if TYPE_CHECKING:
    from agentd.mcp.oauth.challenge import Challenge

__all__ = ["AuthorizationRequired", "OAuthError"]


class OAuthError(MCPError):
    """Discovery, registration or a grant failed; the message is one clear line
    (never a token, never an error text from an authorization server whose
    ``iss`` did not check out)."""


class AuthorizationRequired(MCPError):
    """The server answered 401/403 while connecting: the slow part (discovery,
    registration, a login) runs outside the handshake's timeouts, through
    :meth:`resolve`, and then the handshake is tried again."""

    def __init__(self, auth: Any, status: int, challenge: Challenge | None) -> None:
        super().__init__(f"HTTP {status}: authorization required")
        self.auth = auth
        self.status = status
        self.challenge = challenge

    async def resolve(self) -> None:
        await self.auth.authorize(self.status, self.challenge)
