"""What an MCP server's HTTP fault means to the person who configured it, and the fix.

The transport (agentd.mcp.client.transport) sees each fault first, with the URL
it was sent to; it words the fault here, once, so every later layer (the
handshake, the fault policy, the result) carries the cause in the user's words
and the flag, config key or URL part that fixes it, instead of aiohttp's text
(`Cannot connect to host 127.0.0.1:3999 ssl:default`, `Server disconnected`)
or the decoder's (`JSON is malformed: invalid character (byte 0)` for an HTML
page).  Wording only: what is retried and what ends a run stays the fault
policy's (agentd.mcp.client.rules.faults).  docs/operations.md lists the messages.
"""

from __future__ import annotations

import errno
import ssl
from typing import Final

import aiohttp
from yarl import URL

from agentd.mcp.client.oauth.errors import STATIC_TOKEN_FIX

MCP_PATH: Final = "/mcp"


def _where(url: URL) -> str:
    return f"{url.host}:{url.port}"


def connect_fault(url: URL, exc: aiohttp.ClientError) -> str:
    """A connection that never carried the request: refused, untrusted, not TLS."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return (f"the TLS certificate of {_where(url)} is not trusted "
                f"({exc.certificate_error}): for a private CA, set ca_file to its CA "
                "bundle (PEM) in the server's mcp_servers entry of --config")
    if isinstance(exc, aiohttp.ClientSSLError) and url.scheme == "https" and isinstance(
            getattr(exc, "os_error", None), ssl.SSLError) and "WRONG_VERSION_NUMBER" in str(exc):
        return (f"{_where(url)} does not speak TLS: use http:// in the URL "
                f"({url.with_scheme('http')}; loopback only)")
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, OSError) and os_error.errno == errno.ECONNREFUSED:
        return (f"nothing is listening on {_where(url)}: is the server running? "
                "(--mcp NAME=URL)")
    return str(exc) or type(exc).__name__


def exchange_fault(url: URL, exc: BaseException) -> str:
    """A fault after the request may have been sent; a plain-HTTP request that a TLS
    port dropped without an answer is the usual `Server disconnected`."""
    if isinstance(exc, aiohttp.ServerDisconnectedError) and url.scheme == "http":
        return (f"{_where(url)} closed the connection without an HTTP answer: if it "
                f"speaks TLS, use https:// in the URL ({url.with_scheme('https')})")
    return str(exc) or type(exc).__name__


def status_hint(url: URL, status: int, *, sent_authorization: bool) -> str:
    """What fixes a refused first request (no session yet): "" when nothing is known."""
    if status in (401, 403):
        if sent_authorization:
            return ("the server refused the Authorization header agentd sent: "
                    f"check {STATIC_TOKEN_FIX}")
        return f"the server wants credentials: set {STATIC_TOKEN_FIX}"
    if status in (404, 405):
        if not url.path.rstrip("/").endswith(MCP_PATH):
            return (f"is {url} the MCP endpoint? most servers serve it at the {MCP_PATH} "
                    f"path ({url.with_path(url.path.rstrip('/') + MCP_PATH)})")
        return f"is {url} the MCP endpoint? check the URL's path"
    return ""


def html_answer(url: URL) -> str:
    return f"the server answered HTML, not JSON: is {url} the MCP endpoint?"


def is_html(content_type: str, text: str) -> bool:
    return content_type.startswith("text/html") or text.lstrip()[:1] == "<"
