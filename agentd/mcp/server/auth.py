"""Trust for the served MCP endpoint: TLS (mTLS) contexts and the bearer check.

Trust is minted per request, never by the transport (spec §2):

* mTLS (primary): :func:`server_ssl_context` with a client CA sets
  ``CERT_REQUIRED``, so a client without a certificate from that CA fails the
  TLS handshake and never reaches HTTP;
* bearer (alternative): :class:`BearerAuth` compares the whole
  ``Authorization`` header in constant time (``hmac.compare_digest`` over
  SHA-256 digests, so neither content nor length leaks through timing);
  a mismatch is answered ``401`` with ``WWW-Authenticate: Bearer`` and no body
  detail.  When both are configured, both are required.

Origins recorded on every served call: ``stdio`` for the in-process caller,
``management`` for a request that arrived over HTTP(S) (its ``auth`` field
says ``mtls``, ``bearer``, ``mtls+bearer``, or ``none`` for a loopback dev
listener).  See docs/security.md.
"""

from __future__ import annotations

import hashlib
import hmac
import ssl
from typing import Final

from agentd.mcp.server.rules.sessions import ORIGIN_MANAGEMENT, ORIGIN_STDIO

__all__ = [
    "ORIGIN_MANAGEMENT",
    "ORIGIN_STDIO",
    "UNAUTHORIZED_HEADERS",
    "BearerAuth",
    "NamedBearers",
    "auth_label",
    "cert_subject",
    "principal",
    "server_ssl_context",
]

UNAUTHORIZED_HEADERS: Final = {"WWW-Authenticate": "Bearer"}


def server_ssl_context(cert: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    """A TLS server context (TLS >= 1.2); with ``client_ca``, mTLS: a client
    certificate issued by that CA is required in the handshake."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if client_ca:
        ctx.load_verify_locations(cafile=client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class BearerAuth:
    """Constant-time check of ``Authorization: Bearer <token>``."""

    __slots__ = ("_expected",)

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an empty bearer token")
        self._expected = _digest(b"Bearer " + token.encode())

    def check(self, header: str | None) -> bool:
        given = _digest(header.encode("utf-8", "surrogateescape") if header else b"")
        return hmac.compare_digest(given, self._expected)

    def __repr__(self) -> str:  # never show the token
        return "BearerAuth(***)"


class NamedBearers:
    """Several bearer tokens, each with a name (the principal it mints).

    ``match(header)`` compares the header with *every* token in constant time
    (no early exit, so which token matched does not leak through timing) and
    returns the matching name, or None.
    """

    __slots__ = ("_tokens",)

    def __init__(self, tokens: dict[str, str]) -> None:
        if not tokens or not all(tokens.values()):
            raise ValueError("named bearers need at least one non-empty token each")
        self._tokens = [(name, _digest(b"Bearer " + token.encode()))
                        for name, token in tokens.items()]

    def match(self, header: str | None) -> str | None:
        given = _digest(header.encode("utf-8", "surrogateescape") if header else b"")
        found = None
        for name, expected in self._tokens:
            if hmac.compare_digest(given, expected) and found is None:
                found = name
        return found

    def check(self, header: str | None) -> bool:
        return self.match(header) is not None

    def __repr__(self) -> str:  # never show a token
        return f"NamedBearers({', '.join(n for n, _ in self._tokens)})"


_RDN_NAMES: Final = {"commonName": "CN", "organizationName": "O",
                     "organizationalUnitName": "OU", "countryName": "C",
                     "localityName": "L", "stateOrProvinceName": "ST",
                     "emailAddress": "emailAddress", "serialNumber": "serialNumber"}


def cert_subject(peercert: dict | None) -> str | None:
    """A verified client certificate's subject as ``CN=…,O=…`` (None without one)."""
    if not peercert:
        return None
    parts = []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            parts.append(f"{_RDN_NAMES.get(key, key)}={value}")
    return ",".join(parts) or None


def principal(*, subject: str | None, bearer_name: str | None) -> str:
    """The principal a served run belongs to (docs/security.md)."""
    parts = []
    if subject:
        parts.append(f"cert:{subject}")
    if bearer_name:
        parts.append(f"bearer:{bearer_name}")
    return "+".join(parts) or "anonymous"


def auth_label(*, mtls: bool, bearer: bool) -> str:
    if mtls and bearer:
        return "mtls+bearer"
    if mtls:
        return "mtls"
    if bearer:
        return "bearer"
    return "none"
