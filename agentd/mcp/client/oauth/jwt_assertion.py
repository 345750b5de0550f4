"""``private_key_jwt`` client assertions (RFC 7523 §2.2, RFC 7521 §4.2).

Signing is done with PyJWT over ``cryptography``: an optional dependency
(``pip install 'agentd[oauth-jwt]'``), since writing ECDSA/RSA signing by hand
would be worse in every way.  Without it a ``private_key_file`` server fails
with one line saying what to install.
"""

from __future__ import annotations

import secrets
import time

from agentd.mcp.client.oauth.errors import OAuthError

__all__ = ["client_assertion"]

ASSERTION_LIFETIME = 300  # seconds


def client_assertion(client_id: str, audience: str, key_pem: bytes, algorithm: str) -> str:
    """A signed JWT: iss = sub = client_id, aud = the token endpoint's issuer URL."""
    try:
        import jwt  # PyJWT
    except ImportError:
        raise OAuthError("private_key_jwt needs PyJWT and cryptography: "
                         "pip install 'agentd[oauth-jwt]'") from None
    now = int(time.time())
    claims = {"iss": client_id, "sub": client_id, "aud": audience, "iat": now,
              "exp": now + ASSERTION_LIFETIME, "jti": secrets.token_urlsafe(16)}
    try:
        return jwt.encode(claims, key_pem, algorithm=algorithm)
    except Exception as exc:  # a bad key or an algorithm that does not fit it
        raise OAuthError(f"private_key_jwt: cannot sign with {algorithm}: "
                         f"{type(exc).__name__}") from None
