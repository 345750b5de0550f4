"""An official-SDK MCP server protected by the SDK's own OAuth (real peer).

    python tests/support/oauth_sdk_server.py PORT [--iss right|wrong|omit] [--advertise-iss]
                                          [--public-url URL] [--token-html]

``mcp.server.mcpserver.MCPServer`` with ``AuthSettings`` and an
``OAuthAuthorizationServerProvider``: the SDK serves the authorization server
(metadata, ``/authorize``, ``/token`` with PKCE verification, ``/register``),
the Protected Resource Metadata, and guards ``/mcp`` with its bearer
middleware (401 + ``WWW-Authenticate: Bearer … resource_metadata=…``).  The
provider here is in memory and consents at once (there is no person): its
``/authorize`` redirects straight back with a code, which a ``$BROWSER`` such
as tests/support/oauth_browser.py follows.  Tokens are bound to the ``resource`` the
client asked for and the SDK validates it.

Knobs for the bad-input tests:

``--iss right|wrong|omit``
    the ``iss`` the authorization response carries (RFC 9207); ``wrong`` names
    another issuer (a mix-up attack).
``--advertise-iss``
    metadata says ``authorization_response_iss_parameter_supported``.
``--public-url URL``
    (``{port}`` is replaced by PORT) the URL the server believes it is served at (its PRM, its
    ``resource_metadata`` and the resource its tokens are for): another origin
    or path than the one the client connects to.
``--issuer-path /P``
    the authorization server's issuer is ``http://127.0.0.1:PORT/P`` (a server
    that moved to another authorization server).
``--token-html``
    fault injection, no SDK does it on its own: ``POST /token`` is answered by
    an HTML page (HTTP 200), as from a captive portal or a misrouted proxy.

Control routes: ``POST /test/expire-access`` forgets every access token (the
next request gets a 401), ``POST /test/expire-refresh`` forgets every refresh
token (a refresh gets ``invalid_grant``), ``GET /test/stats`` -> counters.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time


def main() -> None:
    import uvicorn
    from mcp.server.auth.provider import (
        AccessToken,
        AuthorizationCode,
        AuthorizationParams,
        RefreshToken,
        construct_redirect_uri,
    )
    from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
    from mcp.server.mcpserver import MCPServer
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response

    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--iss", choices=("right", "wrong", "omit"), default="right")
    ap.add_argument("--advertise-iss", action="store_true")
    ap.add_argument("--public-url")
    ap.add_argument("--token-html", action="store_true")
    ap.add_argument("--issuer-path", default="")
    args = ap.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    issuer = base + args.issuer_path
    resource = (args.public_url or f"{base}/mcp").replace("{port}", str(args.port))
    stats = {"authorize": 0, "token": 0, "refresh": 0, "register": 0}

    class Provider:
        def __init__(self) -> None:
            self.clients: dict[str, OAuthClientInformationFull] = {}
            self.codes: dict[str, AuthorizationCode] = {}
            self.access: dict[str, AccessToken] = {}
            self.refresh: dict[str, RefreshToken] = {}

        async def get_client(self, client_id: str):
            return self.clients.get(client_id)

        async def register_client(self, info: OAuthClientInformationFull) -> None:
            stats["register"] += 1
            self.clients[info.client_id or ""] = info

        async def authorize(self, client, params: AuthorizationParams) -> str:
            stats["authorize"] += 1
            code = secrets.token_urlsafe(24)
            self.codes[code] = AuthorizationCode(
                code=code, scopes=params.scopes or [], expires_at=time.time() + 300,
                client_id=client.client_id or "", code_challenge=params.code_challenge,
                redirect_uri=params.redirect_uri,
                redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
                resource=params.resource)
            extra = {}
            if args.iss == "right":
                extra["iss"] = issuer
            elif args.iss == "wrong":
                extra["iss"] = "http://127.0.0.1:1/evil-issuer"
            return construct_redirect_uri(str(params.redirect_uri), code=code,
                                          state=params.state, **extra)

        async def load_authorization_code(self, client, code: str):
            return self.codes.get(code)

        def _issue(self, client_id: str, scopes: list[str], res: str | None) -> OAuthToken:
            at, rt = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
            self.access[at] = AccessToken(token=at, client_id=client_id, scopes=scopes,
                                          expires_at=int(time.time()) + 3600, resource=res)
            self.refresh[rt] = RefreshToken(token=rt, client_id=client_id, scopes=scopes,
                                            resource=res)
            return OAuthToken(access_token=at, token_type="Bearer", expires_in=3600,
                              scope=" ".join(scopes) or None, refresh_token=rt)

        async def exchange_authorization_code(self, client, code: AuthorizationCode):
            stats["token"] += 1
            self.codes.pop(code.code, None)
            return self._issue(code.client_id, code.scopes, code.resource)

        async def load_refresh_token(self, client, refresh_token: str):
            return self.refresh.get(refresh_token)

        async def exchange_refresh_token(self, client, refresh_token: RefreshToken, scopes):
            stats["refresh"] += 1
            self.refresh.pop(refresh_token.token, None)  # rotated
            return self._issue(refresh_token.client_id, scopes or refresh_token.scopes,
                               refresh_token.resource)

        async def load_access_token(self, token: str):
            return self.access.get(token)

        async def revoke_token(self, token) -> None:
            self.access.pop(getattr(token, "token", ""), None)

    provider = Provider()
    server = MCPServer(
        "oauth-sdk-server", auth_server_provider=provider,
        auth=AuthSettings(issuer_url=issuer, resource_server_url=resource,
                          validate_token_resource=True, required_scopes=["mcp:tools"],
                          client_registration_options=ClientRegistrationOptions(
                              enabled=True, valid_scopes=["mcp:tools", "mcp:admin"],
                              default_scopes=["mcp:tools"])))

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @server.custom_route("/test/expire-access", methods=["POST"])
    async def expire_access(request: Request) -> Response:
        provider.access.clear()
        return JSONResponse({"ok": True})

    @server.custom_route("/test/expire-refresh", methods=["POST"])
    async def expire_refresh(request: Request) -> Response:
        provider.refresh.clear()
        provider.access.clear()
        return JSONResponse({"ok": True})

    @server.custom_route("/test/stats", methods=["GET"])
    async def get_stats(request: Request) -> Response:
        return JSONResponse(stats)

    app = server.streamable_http_app()

    async def wrapped(scope, receive, send):
        path = scope.get("path", "")
        if args.issuer_path and scope["type"] == "http":
            # the SDK serves its AS at the root: map the issuer's path onto it
            if path == "/.well-known/oauth-authorization-server" + args.issuer_path:
                path = "/.well-known/oauth-authorization-server"
            elif path.startswith(args.issuer_path + "/"):
                path = path[len(args.issuer_path):]
            scope = {**scope, "path": path, "raw_path": path.encode()}
        if scope["type"] == "http" and path == "/.well-known/oauth-authorization-server" \
                and args.advertise_iss:
            chunks: list[bytes] = []
            start: dict = {}

            async def capture(message):
                if message["type"] == "http.response.start":
                    start.update(message)
                elif message["type"] == "http.response.body":
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body"):
                        doc = json.loads(b"".join(chunks))
                        doc["authorization_response_iss_parameter_supported"] = True
                        body = json.dumps(doc).encode()
                        headers = [(k, v) for k, v in start.get("headers", [])
                                   if k.lower() != b"content-length"]
                        headers.append((b"content-length", str(len(body)).encode()))
                        await send({**start, "headers": headers})
                        await send({"type": "http.response.body", "body": body})

            return await app(scope, receive, capture)
        if scope["type"] == "http" and path == "/token" and args.token_html:
            page = HTMLResponse("<html><body><h1>Sign in to the network</h1></body></html>")
            return await page(scope, receive, send)
        return await app(scope, receive, send)

    uvicorn.run(wrapped, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
