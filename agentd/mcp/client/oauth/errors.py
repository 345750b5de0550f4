"""Errors of the OAuth layer.  Light on purpose: the MCP client imports this
module at start-up, the HTTP machinery only when a server asks for a login."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from agentd.errors import MCPError

if TYPE_CHECKING:
    from agentd.mcp.client.oauth.challenge import Challenge

__all__ = ["STATIC_TOKEN_FIX", "OAuthError", "OAuthKind", "authorization_required"]

OAuthKind = Literal["failed", "refused", "required"]
# Where a server's static token goes, named by every auth failure that it would fix:
# OAuth's own (a server with no `auth` table) and a plain 401 (agentd.mcp.client.http_hints).
STATIC_TOKEN_FIX = ('the server\'s headers in --config (mcp_servers = [{name, url, headers = '
                    '{Authorization = "Bearer {{secret:NAME}}"}}])')


class OAuthError(MCPError):
    """The OAuth layer; the message is one clear line (never a token, never an
    error text from an authorization server whose ``iss`` did not check out).

    `kind`: ``"failed"`` -- discovery, registration or a grant failed;
    ``"refused"`` -- the token endpoint refused the grant (``error`` holds its
    code); ``"required"`` -- the server answered 401/403 while connecting: the
    slow part (discovery, registration, a login) runs outside the handshake's
    timeouts, through :meth:`resolve`, and then the handshake is tried again.
    """

    def __init__(self, message: str, *, kind: OAuthKind = "failed", error: str = "",
                 auth: Any = None, status: int = 0,
                 challenge: Challenge | None = None) -> None:
        super().__init__(message)
        self.kind: OAuthKind = kind
        self.error = error
        self.auth = auth
        self.status = status
        self.challenge = challenge

    async def resolve(self) -> None:
        """Log in for a ``"required"`` one (the others have nothing to resolve)."""
        if self.auth is not None:
            await self.auth.authorize(self.status, self.challenge)


def authorization_required(auth: Any, status: int, challenge: Challenge | None) -> OAuthError:
    """A 401/403 while connecting, to be resolved outside the handshake's timeouts."""
    return OAuthError(f"HTTP {status}: authorization required", kind="required", auth=auth,
                      status=status, challenge=challenge)
