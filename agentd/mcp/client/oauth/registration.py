"""Client registration, in the MCP spec's order of preference.

1. **Pre-registered** (config ``client_id`` [+ ``client_secret``] [+ ``issuer``]):
   bound to its issuer.  With ``issuer`` configured, a server whose
   authorization server is another one is an error, never a silent reuse.
   Without it, the first issuer it is used with is recorded in the store and
   the same rule holds from then on.
2. **Client ID Metadata Document** (config ``client_id_metadata_url``, an
   https URL with a path that the operator hosts) when the authorization
   server advertises ``client_id_metadata_document_supported``: the URL is the
   ``client_id``; a public client (``none``).  Portable across issuers.
3. **Dynamic Client Registration** (RFC 7591) as the fallback, with
   ``application_type: "native"`` (MCP 2026-07-28: a CLI on a loopback
   redirect), the loopback redirect URI, and ``authorization_code`` +
   ``refresh_token`` grants.  The answer is stored per issuer; a changed
   authorization server finds no registration and registers anew.

The token endpoint authentication method is picked from what the server's
metadata allows: ``none`` for a public client, else ``client_secret_basic``,
then ``client_secret_post``.
"""

from __future__ import annotations

import time

from agentd import __version__
from agentd.mcp.client.oauth.discovery import ASMetadata
from agentd.mcp.client.oauth.errors import OAuthError
from agentd.mcp.client.oauth.grants import ClientAuth
from agentd.mcp.client.oauth.http import Http
from agentd.mcp.client.oauth.store import ClientRecord, TokenStore

__all__ = ["CLIENT_NAME", "pick_method", "register_client", "secret_method"]

CLIENT_NAME = "agentd"


def secret_method(meta: ASMetadata) -> str:
    allowed = meta.auth_methods()
    for m in ("client_secret_basic", "client_secret_post"):
        if m in allowed:
            return m
    raise OAuthError(f"{meta.issuer} allows neither client_secret_basic nor "
                     f"client_secret_post for a client with a secret (it allows "
                     f"{', '.join(allowed)})")


def pick_method(meta: ASMetadata) -> str:
    """What to ask for at registration: public if allowed, else a secret method."""
    allowed = meta.auth_methods()
    if "none" in allowed:
        return "none"
    return secret_method(meta)


async def register_client(http: Http, store: TokenStore, meta: ASMetadata, *,
                          client_id: str | None, client_secret: str | None,
                          issuer: str | None, cimd_url: str | None,
                          redirect_uri: str, server: str) -> ClientAuth:
    """The client to use with ``meta.issuer`` (see the module docstring)."""
    if client_id:
        bound = issuer
        if bound is None:  # bound by its first use: a later, other issuer is refused
            first = [r.issuer for r in store.clients()
                     if r.method == "pre-registered" and r.client_id == client_id]
            bound = first[0] if first else meta.issuer
            if not first:
                store.save_client(ClientRecord(issuer=meta.issuer, client_id=client_id,
                                               method="pre-registered",
                                               registered_at=time.time()))
        if bound != meta.issuer:
            raise OAuthError(f"{server}: the configured client {client_id!r} is registered "
                             f"with {bound}, but the server's authorization server is now "
                             f"{meta.issuer}: refusing to send it there (update the config)")
        method = secret_method(meta) if client_secret else "none"
        if method == "none" and "none" not in meta.auth_methods():
            raise OAuthError(f"{meta.issuer} does not accept public clients: configure "
                             "client_secret for the pre-registered client")
        return ClientAuth(client_id, method, client_secret)
    if cimd_url and meta.client_id_metadata_document_supported:
        return ClientAuth(cimd_url, "none")
    rec = store.load_client(meta.issuer)
    if rec is not None and rec.method == "dcr" and redirect_uri in rec.redirect_uris:
        return ClientAuth(rec.client_id, rec.token_endpoint_auth_method, rec.client_secret)
    if not meta.registration_endpoint:
        hint = (" (its metadata does not advertise client_id_metadata_document_supported)"
                if cimd_url else "")
        raise OAuthError(f"{server}: {meta.issuer} offers no dynamic client registration"
                         f"{hint}: configure client_id (and client_secret) for this server")
    method = pick_method(meta)
    body = {"client_name": CLIENT_NAME, "software_id": "agentd",
            "software_version": __version__, "application_type": "native",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"], "token_endpoint_auth_method": method}
    reply = await http.request("POST", meta.registration_endpoint, "registration endpoint",
                               json=body)
    data = reply.data
    if data is None:
        raise OAuthError(f"registration endpoint {meta.registration_endpoint} answered HTTP "
                         f"{reply.status} with {reply.ctype}, not JSON")
    if reply.status not in (200, 201) or "error" in data:
        code = str(data.get("error") or f"HTTP {reply.status}")[:64]
        desc = " ".join(str(data.get("error_description") or "").split())[:200]
        raise OAuthError(f"{server}: registration with {meta.issuer} was refused: {code}"
                         + (f": {desc}" if desc else ""))
    cid = data.get("client_id")
    if not isinstance(cid, str) or not cid:
        raise OAuthError(f"registration with {meta.issuer} returned no client_id")
    secret = data.get("client_secret")
    secret = secret if isinstance(secret, str) and secret else None
    got = data.get("token_endpoint_auth_method")
    if not isinstance(got, str) or not got:
        got = method if (secret or method == "none") else "none"
    if got not in ("none", "client_secret_basic", "client_secret_post"):
        raise OAuthError(f"registration with {meta.issuer} assigned the unsupported "
                         f"token endpoint authentication {got!r}")
    if got != "none" and not secret:
        raise OAuthError(f"registration with {meta.issuer} assigned {got} without a secret")
    store.save_client(ClientRecord(issuer=meta.issuer, client_id=cid, client_secret=secret,
                                   token_endpoint_auth_method=got,
                                   redirect_uris=[redirect_uri], method="dcr",
                                   registered_at=time.time()))
    return ClientAuth(cid, got, secret)

