"""``OAuth``: the authorization of one MCP server, as the transport sees it.

The transport asks :meth:`OAuth.headers` for every request (the bearer, if
any, refreshed shortly before it expires) and calls
:meth:`OAuth.on_unauthorized` on a 401 or a 403: True means "new credentials,
send the request again" (the transport bounds how often).  While connecting
(``deferred``), anything beyond using a token already at hand raises
an :class:`OAuthError` of kind "required", so discovery, registration and a
login run outside the handshake's timeouts (``MCPClient`` calls ``resolve()``
and connects again).

What happens on a 401 (see docs/security.md):

1. discovery (:mod:`.discovery`): PRM, then the authorization server's
   metadata; the configured ``issuer``, if any, must be among the PRM's;
2. a stored login for that issuer and resource: refreshed (a refresh token
   only ever goes to the token endpoint of the issuer that issued it);
3. ``client_credentials`` servers get a new token (no person, no store);
4. otherwise a person logs in (authorization code + PKCE, :mod:`.browser`)
   -- during a run only with ``--auth-interactive``; without it the server
   fails its handshake with one line naming ``agentd auth login NAME``.

A 403 with ``error="insufficient_scope"`` is a step-up: the union of the
scopes asked for so far and the challenge's, re-authorized at most
``MAX_STEP_UPS`` times per scope set (then the 403 stands).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from agentd.errors import HandshakeError
from agentd.log import log, register_secret
from agentd.mcp.client.oauth.challenge import Challenge, parse_challenge
from agentd.mcp.client.oauth.errors import STATIC_TOKEN_FIX, OAuthError, authorization_required
from agentd.mcp.client.oauth.store import TokenRecord, TokenStore

if TYPE_CHECKING:
    from agentd.config.model import ServerSpec
    from agentd.mcp.client.oauth.discovery import ASMetadata, ProtectedResource
    from agentd.mcp.client.oauth.grants import ClientAuth, TokenAnswer
    from agentd.mcp.client.oauth.http import Http

__all__ = ["MAX_STEP_UPS", "REFRESH_MARGIN", "OAuth"]

REFRESH_MARGIN: Final = 60.0  # refresh a token this many seconds before it expires
MAX_STEP_UPS: Final = 2  # re-authorizations for one scope set before a 403 stands


def _union(*scopes: str | None) -> str | None:
    out: list[str] = []
    for s in scopes:
        for part in (s or "").split():
            if part not in out:
                out.append(part)
    return " ".join(out) or None


class OAuth:
    """See the module docstring.  One per connected server; never shows a token."""

    def __init__(self, spec: ServerSpec, *, secrets_dir: str, state_dir: str | None,
                 interactive: bool, open_browser: bool = True,
                 login_timeout: float | None = None, force_login: bool = False) -> None:
        from agentd.mcp.client.oauth.discovery import canonical_resource

        self.spec = spec
        self.name = spec.name
        self.server_url = canonical_resource(spec.url)
        self.kind = spec.auth.type if spec.auth is not None else "oauth"
        self.secrets_dir = secrets_dir
        self.store = TokenStore(state_dir)
        self.interactive = interactive
        self.open_browser = open_browser
        self.login_timeout = login_timeout
        self.deferred = True  # set by MCPClient while connecting
        self._record: TokenRecord | None = None
        self._loaded = force_login  # force_login: ignore a stored login at first
        self.force_login = force_login
        self._meta: ASMetadata | None = None
        self._prm: ProtectedResource | None = None
        self._resource: str | None = None
        self._requested: str | None = None  # scopes asked for so far
        self._step_ups: dict[str, int] = {}
        self._http: Http | None = None
        self._lock = asyncio.Lock()
        self.log = log.bind(server=spec.name)

    def __repr__(self) -> str:
        return f"OAuth({self.name!r}, {self.kind})"

    @property
    def record(self) -> TokenRecord | None:
        return self._record

    def _client_http(self) -> Http:
        if self._http is None:
            from agentd.mcp.client.oauth.http import Http

            self._http = Http(self.spec.ca_file)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    # ------------------------------------------------------------ the transport's hooks

    async def headers(self) -> Mapping[str, str]:
        """``Authorization: Bearer …`` when a token is at hand (refreshed near expiry)."""
        if not self._loaded:
            self._loaded = True
            if self.kind == "oauth":
                found = [t for t in self.store.tokens() if t.server == self.server_url]
                if found:
                    self._record = max(found, key=lambda t: t.obtained_at)
                    self._requested = self._record.scope
        rec = self._record
        if rec is None:
            return {}
        if rec.refresh_token and rec.expires_within(REFRESH_MARGIN) and not self.deferred:
            async with self._lock:
                if self._record is rec:
                    try:
                        await self._refresh(rec)
                    except OAuthError as exc:
                        self.log.warning("oauth.refresh.failed", error=str(exc)[:300])
            rec = self._record
            if rec is None:
                return {}
        return {"Authorization": f"Bearer {rec.access_token}"}

    async def on_unauthorized(self, status: int, headers: Mapping[str, str]) -> bool:
        """A 401/403 arrived: True when there are new credentials to retry with."""
        challenge = parse_challenge(_all(headers, "WWW-Authenticate"))
        if status == 403 and (challenge is None or not challenge.insufficient_scope):
            return False  # forbidden for another reason: not ours to fix
        if self.deferred:
            raise authorization_required(self, status, challenge)
        try:
            return await self.authorize(status, challenge)
        except HandshakeError as exc:
            self.log.warning("oauth.unauthorized", status=status, error=str(exc)[:300])
            return False
        except OAuthError as exc:
            self.log.warning("oauth.failed", status=status, error=str(exc)[:300])
            return False

    # ------------------------------------------------------------ the slow path

    async def authorize(self, status: int, challenge: Challenge | None) -> bool:
        """Discover, then refresh / fetch / log in.  Raises ``HandshakeError``
        (one line) when it cannot; returns True with new credentials."""
        self.deferred = False
        async with self._lock:
            try:
                return await self._authorize(status, challenge)
            except OAuthError as exc:
                # no `auth` table: OAuth was only tried; the server may take a static token
                hint = "" if self.spec.auth is not None else \
                    f"; if it takes a static token, set {STATIC_TOKEN_FIX}"
                raise HandshakeError(f"{self.name}: authorization failed: {exc}{hint}") from None

    async def _discover(self, challenge: Challenge | None) -> ASMetadata:
        from agentd.mcp.client.oauth.discovery import (
            discover_as,
            discover_prm,
            server_origin_issuer,
        )

        http = self._client_http()
        prm = await discover_prm(http, self.server_url, challenge)
        wanted = self.spec.auth.issuer if self.spec.auth is not None else None
        if prm is None:
            issuer = server_origin_issuer(self.server_url)
            meta = await discover_as(http, issuer, legacy=True)
            resource = self.server_url
        else:
            if wanted and wanted not in prm.authorization_servers:
                raise OAuthError(f"the configured issuer {wanted} is not among the server's "
                                 f"authorization servers ({', '.join(prm.authorization_servers)})")
            issuer = wanted or prm.authorization_servers[0]
            meta = await discover_as(http, issuer)
            resource = prm.resource
        self._prm, self._meta, self._resource = prm, meta, resource
        self.log.info("oauth.discovered", issuer=meta.issuer, resource=resource,
                      prm=prm.url if prm else None)
        return meta

    def _scope_for(self, status: int, challenge: Challenge | None) -> str | None:
        meta, prm = self._meta, self._prm
        asked = challenge.scope if challenge else None
        configured = " ".join(self.spec.auth.scopes) if self.spec.auth is not None else ""
        if status == 403:
            scope = _union(self._requested, asked)
        elif configured:  # the operator's, plus what the challenge says it needs
            scope = _union(configured, asked, self._requested)
        elif asked:
            scope = asked
        elif prm is not None and prm.scopes_supported:
            scope = " ".join(prm.scopes_supported)
        else:
            scope = self._requested
        if (scope and self.kind == "oauth" and meta is not None
                and "offline_access" in (meta.scopes_supported or [])):
            scope = _union(scope, "offline_access")  # SEP-2207: ask for a refresh token
        return scope

    async def _authorize(self, status: int, challenge: Challenge | None) -> bool:
        meta = await self._discover(challenge)
        resource = self._resource or self.server_url
        old = self._record
        if old is not None and old.issuer != meta.issuer:
            # another authorization server now: its tokens are never sent there
            self.log.warning("oauth.issuer.changed", was=old.issuer, now=meta.issuer)
            self._record = old = None
        scope = self._scope_for(status, challenge)
        if status == 403:
            key = scope or ""
            n = self._step_ups.get(key, 0)
            if n >= MAX_STEP_UPS:
                self.log.warning("oauth.step_up.exhausted", scope=scope)
                return False
            self._step_ups[key] = n + 1
        if status == 401 and old is None and self.kind == "oauth" and not self.force_login:
            stored = self.store.load_token(meta.issuer, resource)
            if stored is not None:  # a login made since (another process's)
                self._record = stored
                self._requested = stored.scope
                return True
            old = stored
        if status == 401 and old is not None and old.refresh_token:
            try:
                await self._refresh(old)
                return True
            except OAuthError as exc:
                self.log.info("oauth.refresh.failed", error=str(exc)[:300])
        from agentd.config.model import ClientCredentialsAuth

        auth = self.spec.auth
        if isinstance(auth, ClientCredentialsAuth):  # self.kind == "client_credentials"
            answer = await self._client_credentials(meta, resource, scope)
            self._adopt(meta, resource, answer, scope, client_id=auth.client_id, persist=False)
            return True
        if not self.interactive:
            why = ("more scope is needed" if status == 403 else
                   "the stored login was refused" if old is not None else "a login is needed")
            raise HandshakeError(f"{self.name}: {meta.issuer} requires authorization "
                                 f"({why}): run `agentd auth login {self.name}`"
                                 + (" or use --auth-interactive" if status == 403 else ""))
        await self._login(meta, resource, scope)
        self.force_login = False
        return True

    def _adopt(self, meta: ASMetadata, resource: str, answer: TokenAnswer, scope: str | None,
               *, client_id: str, persist: bool, refresh_token: str | None = None) -> None:
        rec = TokenRecord(issuer=meta.issuer, resource=resource, server=self.server_url,
                          access_token=answer.access_token,
                          refresh_token=answer.refresh_token or refresh_token,
                          expires_at=answer.expires_at, scope=answer.scope or scope,
                          client_id=client_id, obtained_at=time.time())
        rec.secrets()
        self._record = rec
        self._requested = _union(self._requested, scope)
        if persist:
            self.store.save_token(rec)
        self.log.info("oauth.token", issuer=meta.issuer, resource=resource,
                      scope=rec.scope, expires_in=(round(rec.expires_at - time.time())
                                                   if rec.expires_at else None),
                      refresh=bool(rec.refresh_token), stored=persist)

    async def _refresh(self, rec: TokenRecord) -> None:
        """Refresh at the issuer that issued ``rec`` (its metadata, rediscovered)."""
        from agentd.mcp.client.oauth.discovery import discover_as
        from agentd.mcp.client.oauth.grants import token_request

        meta = self._meta
        if meta is None or meta.issuer != rec.issuer:
            meta = await discover_as(self._client_http(), rec.issuer)
        client = await self._client(meta, redirect_uri=None)
        if client.client_id != rec.client_id:
            raise OAuthError("the client that obtained this login is no longer configured")
        form = {"grant_type": "refresh_token", "refresh_token": rec.refresh_token or "",
                "resource": rec.resource}
        try:
            answer = await token_request(self._client_http(), meta.token_endpoint or "",
                                         client, form, issuer=meta.issuer)
        except OAuthError as exc:
            if exc.kind == "refused" and exc.error in ("invalid_grant", "invalid_client",
                                                        "unauthorized_client"):
                self.store.delete_token(rec.issuer, rec.resource)  # expired or revoked
                if self._record is rec:
                    self._record = None
            raise
        self._meta = meta
        self._adopt(meta, rec.resource, answer, rec.scope, client_id=rec.client_id,
                    persist=self.kind == "oauth", refresh_token=rec.refresh_token)

    async def _client(self, meta: ASMetadata, *, redirect_uri: str | None) -> ClientAuth:
        from agentd.config.model import OAuthAuth
        from agentd.mcp.client.oauth.grants import ClientAuth
        from agentd.mcp.client.oauth.registration import register_client

        a = self.spec.auth
        secret = self._secret(a.client_secret) if a is not None else None
        cimd = a.client_id_metadata_url if isinstance(a, OAuthAuth) else None
        if redirect_uri is None and not (a is not None and a.client_id):
            # a refresh: the registration that exists (a pre-registration goes on below)
            if cimd and meta.client_id_metadata_document_supported:
                return ClientAuth(cimd, "none")
            rec = self.store.load_client(meta.issuer)
            if rec is None:
                raise OAuthError(f"no client registration for {meta.issuer}")
            return ClientAuth(rec.client_id, rec.token_endpoint_auth_method, rec.client_secret)
        return await register_client(
            self._client_http(), self.store, meta,
            client_id=a.client_id if a is not None else None, client_secret=secret,
            issuer=a.issuer if a is not None else None,
            cimd_url=cimd,
            redirect_uri=redirect_uri or "", server=self.name)

    def _secret(self, ref: str | None) -> str | None:
        if not ref:
            return None
        from agentd.secrets import substitute

        value = substitute(ref, self.secrets_dir)
        register_secret(value)
        return value

    async def _client_credentials(self, meta: ASMetadata, resource: str,
                                  scope: str | None) -> TokenAnswer:
        from agentd.config.model import ClientCredentialsAuth
        from agentd.mcp.client.oauth.grants import ClientAuth, token_request

        a = self.spec.auth
        assert a is not None
        key_file = a.private_key_file if isinstance(a, ClientCredentialsAuth) else None
        if key_file:
            try:
                key = await asyncio.to_thread(Path(key_file).read_bytes)
            except OSError as exc:
                raise OAuthError(f"private_key_file {key_file}: "
                                 f"{exc.strerror or exc}") from None
            allowed = meta.auth_methods()
            if "private_key_jwt" not in allowed:
                raise OAuthError(f"{meta.issuer} does not accept private_key_jwt "
                                 f"(it allows {', '.join(allowed)})")
            client = ClientAuth(a.client_id or "", "private_key_jwt", private_key_pem=key,
                                signing_algorithm=(a.signing_algorithm if isinstance(
                                    a, ClientCredentialsAuth) else None) or "ES256")
        else:
            from agentd.mcp.client.oauth.registration import secret_method

            client = ClientAuth(a.client_id or "", secret_method(meta),
                                self._secret(a.client_secret))
        form = {"grant_type": "client_credentials", "resource": resource}
        if scope:
            form["scope"] = scope
        return await token_request(self._client_http(), meta.token_endpoint or "", client,
                                   form, issuer=meta.issuer)

    async def _login(self, meta: ASMetadata, resource: str, scope: str | None) -> None:
        from agentd.mcp.client.oauth.browser import LOGIN_TIMEOUT, Callback
        from agentd.mcp.client.oauth.grants import token_request

        if not meta.authorization_endpoint:
            raise OAuthError(f"{meta.issuer} has no authorization_endpoint")
        if "S256" not in (meta.code_challenge_methods_supported or []):
            raise OAuthError(f"{meta.issuer} does not advertise PKCE S256 "
                             "(code_challenge_methods_supported): refusing to authorize")
        port = 0
        stored = self.store.load_client(meta.issuer)
        if stored is not None and stored.method == "dcr" and stored.redirect_uris:
            from urllib.parse import urlsplit

            port = urlsplit(stored.redirect_uris[0]).port or 0
        cb = Callback(port)
        try:
            await cb.start()
        except OSError:
            cb = Callback(0)  # the registered port is taken: a new one (re-registers)
            await cb.start()
        try:
            client = await self._client(meta, redirect_uri=cb.redirect_uri)
            params = {"client_id": client.client_id, "resource": resource}
            if scope:
                params["scope"] = scope
            self.log.info("oauth.login", issuer=meta.issuer, resource=resource, scope=scope,
                          client_id=client.client_id)
            result = await cb.authorize(
                meta.authorization_endpoint, params, issuer=meta.issuer,
                iss_required=meta.authorization_response_iss_parameter_supported,
                server=self.name, open_browser=self.open_browser,
                limit=self.login_timeout or LOGIN_TIMEOUT)
        finally:
            await cb.close()
        form = {"grant_type": "authorization_code", "code": result.code,
                "redirect_uri": result.redirect_uri, "code_verifier": result.verifier,
                "resource": resource}
        answer = await token_request(self._client_http(), meta.token_endpoint or "", client,
                                     form, issuer=meta.issuer)
        self._adopt(meta, resource, answer, scope, client_id=client.client_id, persist=True)


def _all(headers: Mapping[str, str], name: str) -> list[str]:
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return list(getall(name, []))
    value = headers.get(name)
    return [value] if value else []
