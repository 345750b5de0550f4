"""The authorization code flow with PKCE (S256) for a person at a terminal.

A loopback redirect listener (``http://127.0.0.1:PORT/callback``, RFC 8252
§7.3) is started, the authorization URL is opened with Python's
:mod:`webbrowser` -- so ``$BROWSER`` is honoured -- and always printed on
stderr (a headless host copies it to a browser elsewhere).  ``webbrowser``
blocks until a ``$BROWSER`` command exits, so it runs in a thread: the listener
on this loop must keep answering meanwhile.

The callback is checked before anything acts on it: ``state`` must be the one
sent (anything else is ignored and the wait goes on), then ``iss`` per
RFC 9207 §2.4 as MCP 2026-07-28 tabulates it -- present: it must equal the
recorded issuer exactly (no normalisation); absent: refused only when the
server's metadata promises it.  On an ``iss`` mismatch even an ``error`` in
the response is neither acted on nor shown.  Only then is the code redeemed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import secrets
import sys
import webbrowser
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from agentd.log import log
from agentd.mcp.client.oauth.errors import OAuthError

__all__ = ["LOGIN_TIMEOUT", "AuthorizationResult", "Callback", "pkce_pair"]

LOGIN_TIMEOUT: Final = 300.0  # how long a person has to finish the login in a browser
_PAGE_OK: Final = ("<!doctype html><title>agentd</title><p>agentd: authorization received. "
                   "You can close this window.</p>")
_PAGE_BAD: Final = ("<!doctype html><title>agentd</title><p>agentd: this authorization "
                    "response was not accepted.</p>")


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge) per RFC 7636."""
    verifier = secrets.token_urlsafe(64)[:96]
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass
class AuthorizationResult:
    code: str
    redirect_uri: str
    verifier: str

    def __repr__(self) -> str:
        return "AuthorizationResult(***)"


class Callback:
    """The loopback redirect listener for one login."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self._runner: web.AppRunner | None = None
        self._result: asyncio.Future | None = None
        self._state = ""
        self._issuer = ""
        self._iss_required = False

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/callback", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.port = sock.getsockname()[1]

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        q = request.query
        fut = self._result
        if fut is None or fut.done():
            return web.Response(status=410, text=_PAGE_BAD, content_type="text/html")
        if not secrets.compare_digest(q.get("state", ""), self._state):
            log.warning("oauth.callback.state_mismatch")  # a stray or forged response
            return web.Response(status=400, text=_PAGE_BAD, content_type="text/html")
        iss = q.get("iss")
        if iss is not None and iss != self._issuer:
            fut.set_exception(OAuthError(
                f"the authorization response came from issuer {iss[:200]!r}, not the "
                f"recorded {self._issuer!r} (RFC 9207 mix-up defence): refused"))
            return web.Response(status=400, text=_PAGE_BAD, content_type="text/html")
        if iss is None and self._iss_required:
            fut.set_exception(OAuthError(
                f"the authorization response carries no iss although {self._issuer} "
                "advertises authorization_response_iss_parameter_supported: refused"))
            return web.Response(status=400, text=_PAGE_BAD, content_type="text/html")
        if "error" in q:
            desc = " ".join(q.get("error_description", "").split())[:200]
            fut.set_exception(OAuthError(
                f"the authorization server refused: {q['error'][:64]}"
                + (f": {desc}" if desc else "")))
            return web.Response(status=400, text=_PAGE_BAD, content_type="text/html")
        code = q.get("code")
        if not code:
            fut.set_exception(OAuthError("the authorization response has no code"))
            return web.Response(status=400, text=_PAGE_BAD, content_type="text/html")
        fut.set_result(code)
        return web.Response(text=_PAGE_OK, content_type="text/html")

    async def authorize(self, authorization_endpoint: str, params: dict[str, str], *,
                        issuer: str, iss_required: bool, server: str,
                        open_browser: bool = True,
                        limit: float = LOGIN_TIMEOUT) -> AuthorizationResult:
        """Send a person to the authorization endpoint; the code that comes back."""
        verifier, challenge = pkce_pair()
        self._state = secrets.token_urlsafe(32)
        self._issuer = issuer
        self._iss_required = iss_required
        self._result = asyncio.get_running_loop().create_future()
        query = dict(params)
        query.update({"response_type": "code", "redirect_uri": self.redirect_uri,
                      "state": self._state, "code_challenge": challenge,
                      "code_challenge_method": "S256"})
        sep = "&" if urlsplit(authorization_endpoint).query else "?"
        url = f"{authorization_endpoint}{sep}{urlencode(query)}"
        print(f"agentd: to authorize {server}, open this URL in a browser:\n  {url}",
              file=sys.stderr, flush=True)
        opener: asyncio.Task | None = None
        if open_browser:
            opener = asyncio.create_task(asyncio.to_thread(_open, url))
        try:
            async with asyncio.timeout(limit):
                code = await self._result
        except TimeoutError:
            raise OAuthError(f"no authorization response within {limit:g}s") from None
        finally:
            if opener is not None:
                if not opener.done():
                    # a $BROWSER command still running: it is not waited for
                    opener.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait({opener}, timeout=0)
        return AuthorizationResult(code, self.redirect_uri, verifier)


def _open(url: str) -> bool:
    try:
        return webbrowser.open(url)
    except Exception:  # no usable browser: the printed URL is the way
        return False
