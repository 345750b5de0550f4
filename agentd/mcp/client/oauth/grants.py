"""Token endpoint requests: client authentication and the grants agentd uses.

Client authentication at the token endpoint (RFC 6749 §2.3, RFC 7523 §2.2):
``client_secret_basic`` (HTTP Basic over the form-urlencoded id and secret),
``client_secret_post`` (both in the body), ``none`` (a public client: the id in
the body) and ``private_key_jwt`` (a signed assertion, :mod:`.jwt_assertion`).
Every request carries the resource indicator (RFC 8707).  A token answer must
be a JSON object with an ``access_token`` of type Bearer; an error answer is
reported as ``error: error_description`` (trimmed, single line); anything else
(an HTML page, a redirect) is a clear error naming the endpoint.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from urllib.parse import quote

from agentd.log import register_secret
from agentd.mcp.client.oauth.errors import OAuthError
from agentd.mcp.client.oauth.http import Http

__all__ = ["ClientAuth", "TokenAnswer", "token_request"]


@dataclass(frozen=True)
class ClientAuth:
    """How this client authenticates at one token endpoint."""

    client_id: str
    method: str = "none"  # client_secret_basic | client_secret_post | none | private_key_jwt
    client_secret: str | None = None
    private_key_pem: bytes | None = None
    signing_algorithm: str = "ES256"

    def __repr__(self) -> str:
        return f"ClientAuth({self.client_id!r}, {self.method})"


@dataclass
class TokenAnswer:
    access_token: str
    refresh_token: str | None
    expires_at: float | None
    scope: str | None
    token_type: str = "Bearer"

    def __repr__(self) -> str:
        return "TokenAnswer(***)"


def _one_line(value: object, limit: int = 200) -> str:
    text = value if isinstance(value, str) else ""
    return " ".join(text.split())[:limit]


async def token_request(http: Http, token_endpoint: str, client: ClientAuth,
                        form: dict[str, str], *, issuer: str | None = None) -> TokenAnswer:
    """POST ``form`` (a grant) to the token endpoint with ``client``'s authentication
    (a ``private_key_jwt`` assertion is addressed to ``issuer``, RFC 7523bis)."""
    form = dict(form)
    headers: dict[str, str] = {}
    if client.method == "client_secret_basic":
        if not client.client_secret:
            raise OAuthError("client_secret_basic needs a client secret")
        pair = f"{quote(client.client_id, safe='')}:{quote(client.client_secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        form["client_id"] = client.client_id  # OAuth 2.1 allows it; some servers need it
    elif client.method == "client_secret_post":
        if not client.client_secret:
            raise OAuthError("client_secret_post needs a client secret")
        form["client_id"] = client.client_id
        form["client_secret"] = client.client_secret
    elif client.method == "private_key_jwt":
        from agentd.mcp.client.oauth.jwt_assertion import client_assertion

        form["client_id"] = client.client_id
        form["client_assertion_type"] = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        form["client_assertion"] = client_assertion(
            client.client_id, issuer or token_endpoint, client.private_key_pem or b"",
            client.signing_algorithm)
    else:
        form["client_id"] = client.client_id
    reply = await http.request("POST", token_endpoint, "token endpoint", form=form,
                               headers=headers)
    data = reply.data
    if data is None:
        raise OAuthError(f"token endpoint {token_endpoint} answered HTTP {reply.status} "
                         f"with {reply.ctype}, not JSON")
    if reply.status != 200 or "error" in data:
        code = _one_line(data.get("error"), 64) or f"HTTP {reply.status}"
        desc = _one_line(data.get("error_description"))
        raise OAuthError(f"token endpoint refused the {form.get('grant_type')} grant: "
                         f"{code}" + (f": {desc}" if desc else ""), kind="refused", error=code)
    token = data.get("access_token")
    ttype = data.get("token_type")
    if not isinstance(token, str) or not token:
        raise OAuthError(f"token endpoint {token_endpoint} answered without an access_token")
    if not isinstance(ttype, str) or ttype.lower() != "bearer":
        raise OAuthError(f"token endpoint {token_endpoint} issued a {ttype!r} token, "
                         "not a Bearer token")
    register_secret(token)
    refresh = data.get("refresh_token")
    refresh = refresh if isinstance(refresh, str) and refresh else None
    register_secret(refresh)
    expires_in = data.get("expires_in")
    expires_at = None
    if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) \
            and expires_in > 0:
        expires_at = time.time() + float(expires_in)
    scope = data.get("scope")
    return TokenAnswer(token, refresh, expires_at,
                       scope if isinstance(scope, str) and scope else None)
