"""OAuth for remote MCP servers, on the client side (MCP authorization,
2025-11-25 ``basic/authorization`` as refined by 2026-07-28).

Transport layer.  The transport calls one object per server (:class:`OAuth`,
built by :func:`auth_for`): ``headers()`` for every request and
``on_unauthorized(status, headers)`` on a 401/403.  The modules:

* :mod:`.challenge` -- ``WWW-Authenticate`` parsing (sans-IO);
* :mod:`.discovery` -- RFC 9728 PRM, RFC 8414 / OIDC metadata;
* :mod:`.registration` -- pre-registered, CIMD, DCR;
* :mod:`.grants` -- token endpoint requests and client authentication;
* :mod:`.browser` -- authorization code + PKCE on a loopback redirect;
* :mod:`.jwt_assertion` -- ``private_key_jwt`` (optional extra ``oauth-jwt``);
* :mod:`.store` -- the token store under the state directory.

Process-wide settings (``--state-dir``, ``--auth-interactive``) are set once by
the CLI with :func:`configure`, the way :func:`agentd.log.configure` is.  This
module stays light: it imports no HTTP machinery until a server asks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from agentd.mcp.client.oauth.errors import OAuthError

if TYPE_CHECKING:
    from agentd.config.model import ServerSpec
    from agentd.mcp.client.oauth.provider import OAuth

__all__ = ["OAuthError", "Settings", "auth_for", "configure",
           "settings"]


@dataclass
class Settings:
    state_dir: str | None = None  # None: agentd.mcp.client.oauth.store.default_state_dir()
    interactive: bool = False  # --auth-interactive: a login may happen during a run
    open_browser: bool = True
    login_timeout: float | None = None


settings = Settings()
_SETTINGS = frozenset(f.name for f in fields(Settings))


def configure(**values: Any) -> None:
    """Set process-wide OAuth settings (the CLI, once, before connecting)."""
    for key, value in values.items():
        if key not in _SETTINGS:
            raise TypeError(f"unknown OAuth setting {key!r}")
        setattr(settings, key, value)


def auth_for(spec: ServerSpec, secrets_dir: str, headers: dict[str, str] | None = None,
             *, force_login: bool = False, interactive: bool | None = None) -> OAuth | None:
    """The OAuth object for ``spec``; None when its config sends its own
    ``Authorization`` header (a static bearer wins, OAuth never overrides it)."""
    if headers and any(k.lower() == "authorization" for k in headers):
        return None
    from agentd.mcp.client.oauth.provider import OAuth

    return OAuth(spec, secrets_dir=secrets_dir, state_dir=settings.state_dir,
                 interactive=settings.interactive if interactive is None else interactive,
                 open_browser=settings.open_browser, login_timeout=settings.login_timeout,
                 force_login=force_login)
