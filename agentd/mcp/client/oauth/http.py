"""HTTP to authorization servers: bounded, JSON-only, https (or loopback http).

Every endpoint an authorization server or a metadata document names is
untrusted text until it passes :func:`check_url`: ``https://``, or ``http://``
on a loopback host (the same rule as MCP endpoints, so a same-host dev
authorization server works).  Answers are read up to a limit, must be JSON
objects, and a non-JSON answer (an HTML login page, a proxy's error page) is a
clear :class:`OAuthError` naming the endpoint and what came back.
"""

from __future__ import annotations

import ssl
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
import orjson

from agentd import __version__
from agentd.config.endpoints import check_endpoint
from agentd.errors import ConfigError
from agentd.mcp.client.oauth.errors import OAuthError
from agentd.wire.guard import PEER_FAULTS

__all__ = ["HTTP_TIMEOUT", "MAX_BODY", "Http", "Reply", "check_url", "origin"]

HTTP_TIMEOUT: Final = 15.0  # one request to an authorization server
MAX_BODY: Final = 1024 * 1024  # metadata and token answers are small


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``; :class:`OAuthError` when it is no URL."""
    try:
        p = urlsplit(url)
        port = p.port
    except ValueError as exc:  # a peer's metadata: "https://[x", port 99999
        raise OAuthError(f"{url[:200]!r} is not a URL: {exc}") from None
    default = {"https": 443, "http": 80}.get(p.scheme)
    host = (p.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{p.scheme.lower()}://{host}" + (f":{port}" if port and port != default else "")


def check_url(url: object, what: str) -> str:
    """``url`` if it is an absolute https:// URL (or http:// on loopback), without
    a fragment; else :class:`OAuthError`."""
    if not isinstance(url, str) or not url or len(url) > 2048:
        raise OAuthError(f"{what}: not a URL")
    try:
        check_endpoint(url, what)  # the rule MCP endpoints follow (and a URL at all)
    except ConfigError as exc:
        raise OAuthError(str(exc)) from None
    if urlsplit(url).fragment:
        raise OAuthError(f"{what} {url!r}: a fragment is not allowed")
    return url


class Reply:
    __slots__ = ("ctype", "data", "status")

    def __init__(self, status: int, ctype: str, data: Any) -> None:
        self.status = status
        self.ctype = ctype
        self.data = data  # a dict for a JSON object answer, else None


class Http:
    """One aiohttp session for authorization-server traffic (no cookies, no redirects)."""

    def __init__(self, ca_file: str | None = None) -> None:
        self._ca_file = ca_file
        self._session: aiohttp.ClientSession | None = None

    def _get(self) -> aiohttp.ClientSession:
        if self._session is None:
            ctx = ssl.create_default_context(cafile=self._ca_file)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ctx, limit=8),
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": f"agentd/{__version__}"},
                timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT))
        return self._session

    async def close(self) -> None:
        s, self._session = self._session, None
        if s is not None:
            await s.close()

    async def request(self, method: str, url: str, what: str, *,
                      form: dict[str, str] | None = None, json: Any = None,
                      headers: dict[str, str] | None = None) -> Reply:
        """One request; the answer's JSON object (if it is one) in ``Reply.data``."""
        check_url(url, what)
        hdrs = {"Accept": "application/json"}
        if headers:
            hdrs.update(headers)
        body: bytes | None = None
        if form is not None:
            from urllib.parse import urlencode

            body = urlencode(form).encode()
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        elif json is not None:
            body = orjson.dumps(json)
            hdrs["Content-Type"] = "application/json"
        try:
            async with self._get().request(method, url, data=body, headers=hdrs,
                                           allow_redirects=False) as resp:
                ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
                raw = await resp.content.read(MAX_BODY + 1)
                status = resp.status
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise OAuthError(f"{what} {url}: {type(exc).__name__}: {exc}"[:300]) from None
        if len(raw) > MAX_BODY:
            raise OAuthError(f"{what} {url}: answer larger than {MAX_BODY} bytes")
        data = None
        if ctype == "application/json" or ctype.endswith("+json"):
            try:
                data = orjson.loads(raw) if raw else None
            except PEER_FAULTS:  # not JSON, nested too deeply: no document
                data = None
            if not isinstance(data, dict):
                data = None
        return Reply(status, ctype or "no content type", data)

    async def get_json(self, url: str, what: str) -> dict | None:
        """A metadata document: its JSON object on 200, None on 4xx (not here)."""
        r = await self.request("GET", url, what)
        if r.status == 200:
            if r.data is None:
                raise OAuthError(f"{what} {url}: answered {r.ctype}, not a JSON object")
            return r.data
        if 400 <= r.status < 500:
            return None
        raise OAuthError(f"{what} {url}: HTTP {r.status}")
