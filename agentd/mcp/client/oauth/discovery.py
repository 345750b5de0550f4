"""Discovery: Protected Resource Metadata (RFC 9728), then Authorization Server
Metadata (RFC 8414 and OpenID Connect Discovery), in the MCP spec's order.

* PRM: the ``resource_metadata`` URL of the 401's ``WWW-Authenticate`` -- only
  when it is on the MCP server's own origin (a server's header never makes us
  fetch from elsewhere) -- then ``/.well-known/oauth-protected-resource/<path>``
  and ``/.well-known/oauth-protected-resource``.  The document's ``resource``
  must name the MCP server: the same origin, and a path that is the server's
  path or a parent of it (RFC 9728 §3.3, §7.3).  Otherwise nothing is
  authorized at all.
* No PRM at all is a 2025-03-26 server: its origin is the authorization server
  (that revision's discovery), and the metadata's ``issuer`` must be on it.
* AS metadata for an issuer with a path ``/t``:
  ``/.well-known/oauth-authorization-server/t``,
  ``/.well-known/openid-configuration/t``, ``/t/.well-known/openid-configuration``;
  without a path: ``/.well-known/oauth-authorization-server``,
  ``/.well-known/openid-configuration``.  The document's ``issuer`` must be
  exactly the issuer asked for (RFC 8414 §3.3), and every endpoint in it must
  pass :func:`agentd.mcp.client.oauth.http.check_url`.
"""

from __future__ import annotations

from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import msgspec

from agentd.mcp.client.oauth.challenge import Challenge
from agentd.mcp.client.oauth.errors import OAuthError
from agentd.mcp.client.oauth.http import Http, check_url, origin
from agentd.wire.guard import convert_peer

_Doc = TypeVar("_Doc")

__all__ = ["ASMetadata", "ProtectedResource", "canonical_resource", "discover_as",
           "discover_prm", "resource_matches"]


class ProtectedResource(msgspec.Struct, kw_only=True):
    resource: str = ""
    authorization_servers: list[str] = []
    scopes_supported: list[str] | None = None
    url: str = ""  # where it was found


class ASMetadata(msgspec.Struct, kw_only=True):
    issuer: str
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    registration_endpoint: str | None = None
    scopes_supported: list[str] | None = None
    response_types_supported: list[str] | None = None
    grant_types_supported: list[str] | None = None
    code_challenge_methods_supported: list[str] | None = None
    token_endpoint_auth_methods_supported: list[str] | None = None
    token_endpoint_auth_signing_alg_values_supported: list[str] | None = None
    client_id_metadata_document_supported: bool = False
    authorization_response_iss_parameter_supported: bool = False
    legacy: bool = False  # found on a 2025-03-26 server without PRM

    def auth_methods(self) -> list[str]:
        # RFC 8414 §2: absent means client_secret_basic
        return list(self.token_endpoint_auth_methods_supported or ["client_secret_basic"])


def canonical_resource(url: str) -> str:
    """The MCP server's canonical URI (RFC 8707 §2): lower-case scheme and host,
    no default port, no query or fragment, no trailing slash."""
    p = urlsplit(url)
    path = p.path.rstrip("/")
    return origin(url) + path


def resource_matches(resource: str, server_url: str) -> bool:
    """``resource`` names the server: same origin, and its path is the server's
    path or a parent of it (segment-wise)."""
    try:
        if origin(resource) != origin(server_url):
            return False
    except OAuthError:
        return False
    rp = urlsplit(resource)
    if rp.query or rp.fragment:
        return False
    want = urlsplit(server_url).path.rstrip("/")
    have = rp.path.rstrip("/")
    return not have or want == have or want.startswith(have + "/")


def _prm_candidates(server_url: str, challenge: Challenge | None) -> list[str]:
    p = urlsplit(server_url)
    base = origin(server_url)
    out: list[str] = []
    hinted = challenge.resource_metadata if challenge else None
    if hinted:
        check_url(hinted, "resource_metadata")
        if origin(hinted) != base:
            raise OAuthError(f"the server's resource_metadata {hinted!r} is on another origin "
                             f"than the server ({base}): refused")
        out.append(hinted)
    path = p.path.rstrip("/")
    if path:
        out.append(f"{base}/.well-known/oauth-protected-resource{path}")
    out.append(f"{base}/.well-known/oauth-protected-resource")
    return list(dict.fromkeys(out))


async def _fetch(http: Http, url: str, what: str, type_: type[_Doc]) -> _Doc | None:
    """One well-known document, validated into ``type_``; None when there is none."""
    doc = await http.get_json(url, what)
    if doc is None:
        return None
    return convert_peer(doc, type_, lambda text: OAuthError(f"{what} {url}: {text}"))


async def discover_prm(http: Http, server_url: str,
                       challenge: Challenge | None) -> ProtectedResource | None:
    """The server's PRM, validated; None when it publishes none (2025-03-26)."""
    for url in _prm_candidates(server_url, challenge):
        prm = await _fetch(http, url, "protected resource metadata", ProtectedResource)
        if prm is None:
            continue
        if not prm.resource or not resource_matches(prm.resource, server_url):
            raise OAuthError(f"protected resource metadata {url} names the resource "
                             f"{prm.resource!r}, not this server ({server_url}): refused")
        if not prm.authorization_servers:
            raise OAuthError(f"protected resource metadata {url} names no authorization server")
        for a in prm.authorization_servers:
            check_url(a, "authorization server")
        prm.url = url
        return prm
    return None


def _as_candidates(issuer: str) -> list[str]:
    p = urlsplit(issuer)
    base = origin(issuer)
    path = p.path.rstrip("/")
    if path:
        return [f"{base}/.well-known/oauth-authorization-server{path}",
                f"{base}/.well-known/openid-configuration{path}",
                f"{base}{path}/.well-known/openid-configuration"]
    return [f"{base}/.well-known/oauth-authorization-server",
            f"{base}/.well-known/openid-configuration"]


async def discover_as(http: Http, issuer: str, *, legacy: bool = False) -> ASMetadata:
    """The authorization server's metadata, validated (see the module docstring)."""
    check_url(issuer, "authorization server")
    for url in _as_candidates(issuer):
        meta = await _fetch(http, url, "authorization server metadata", ASMetadata)
        if meta is None:
            continue
        if legacy:
            # 2025-03-26: no recorded issuer to compare with; it must at least be
            # the server's own origin
            if origin(meta.issuer) != origin(issuer):
                raise OAuthError(f"authorization server metadata {url} names the issuer "
                                 f"{meta.issuer!r} on another origin: refused")
            meta.legacy = True
        elif meta.issuer != issuer:
            raise OAuthError(f"authorization server metadata {url} names the issuer "
                             f"{meta.issuer!r}, not {issuer!r}: refused (RFC 8414 §3.3)")
        for name, value in (("authorization_endpoint", meta.authorization_endpoint),
                            ("token_endpoint", meta.token_endpoint),
                            ("registration_endpoint", meta.registration_endpoint)):
            if value is not None:
                check_url(value, f"{name} of {meta.issuer}")
        if not meta.token_endpoint:
            raise OAuthError(f"authorization server {meta.issuer} has no token_endpoint")
        return meta
    raise OAuthError(f"no authorization server metadata for {issuer} "
                     f"(tried {', '.join(_as_candidates(issuer))})")


def server_origin_issuer(server_url: str) -> str:
    """The 2025-03-26 authorization server of a server without PRM: its origin."""
    p = urlsplit(origin(server_url))
    return urlunsplit((p.scheme, p.netloc, "", "", ""))
