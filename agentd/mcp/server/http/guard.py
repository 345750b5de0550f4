"""The served endpoint's guard: who may ask, checked before anything is read.

Every request (POST, GET, DELETE, and the routes others mount on the same
listener: ``/metrics``, the A2A agent) passes :meth:`Guard.check` first:

* duplicate ``Host``/``Origin`` and an absolute-form target naming another
  host (``agentd.mcp.server.http.checks``) -> ``403``;
* ``Host`` (DNS rebinding): a loopback listener only accepts loopback names,
  others the names they were told -> ``403``;
* ``Origin``: a loopback origin on a loopback listener, elsewhere the
  request's own host or an allowed origin -> ``403``;
* the bearer (one ``--serve-bearer`` and/or named ones, constant-time) ->
  ``401`` + ``WWW-Authenticate: Bearer`` and nothing else; mTLS happened in
  the handshake;
* then the caller's principal is set for this request's task
  (``agentd.mcp.server.handler.current_principal``), and a 2026-07-28 GET or DELETE
  is ``405``, an unsupported ``MCP-Protocol-Version`` on them ``400``.

A request a pool peer proxied (``agentd.pool.link.session_relay``) arrives over that
peer's connection: its TLS certificate and missing bearer say who the *peer*
is, not who the caller is.  The pool's middleware verifies the peer's MAC over
the caller's principal before the guard runs and hands it over with
:meth:`Guard.vouch` (under the request key ``VOUCHED``); the guard then takes that principal instead of the bearer and
the certificate (the first worker checked those, and Host/Origin, as for a
direct request).  Nothing else sets the key, so a client cannot claim it.

A refusal is logged throttled (``mcp.serve.refused``) and closes the connection.
Routes with a credential of their own (``/pool/relay``, ``/pool/probe``: the
pool key's MAC) skip :meth:`Guard.check` and call :meth:`Guard.authenticated`
once their credential holds, so the connection gate counts them as
authenticated like any other caller.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from aiohttp import web

from agentd.log import log
from agentd.log_bridge import throttled
from agentd.mcp.server.auth import (
    UNAUTHORIZED_HEADERS,
    BearerAuth,
    NamedBearers,
    auth_label,
    cert_subject,
    principal,
)
from agentd.mcp.server.handler import current_principal
from agentd.mcp.server.http import checks as http_checks
from agentd.mcp.server.http.limits import Gate
from agentd.mcp.server.http.responses import plain
from agentd.mcp.server.rules import revision
from agentd.netaddr import is_loopback_host
from agentd.obs import metrics

__all__ = ["Guard", "hostname"]

_log = log.bind(component="mcp.http_server")

_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_HOST_CACHE: Final = 256  # Host values remembered with their verdict (then forgotten at once)
# the caller's principal a pool peer proved for this request (set by the pool's middleware)
VOUCHED: Final = web.RequestKey("agentd.pool.vouched", str)


def hostname(host: str) -> str:
    """The hostname of a Host header value (``[::1]:8080`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else host
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


def _refused(request: web.Request, reason: str) -> web.Response:
    """403 (401 for auth), logged throttled; the connection is closed after it."""
    throttled(_log, "warning", "mcp.serve.refused", key=reason, reason=reason,
              method=request.method)
    metrics.SERVED.inc("-", "unauthorized" if reason == "auth" else "forbidden")
    resp = web.Response(status=401, headers=UNAUTHORIZED_HEADERS) if reason == "auth" \
        else plain(403, "Forbidden")
    resp.force_close()
    return resp


class Guard:
    """Host/Origin, bearer and mTLS identity for one listener."""

    def __init__(self, *, bearer: str | None = None, bearers: dict[str, str] | None = None,
                 mtls: bool = False, loopback: bool = True,
                 allowed_hosts: set[str] | frozenset[str] | None = None,
                 allowed_origins: set[str] | frozenset[str] | None = None) -> None:
        self.loopback = loopback
        # one bearer (``--serve-bearer``, principal ``bearer:default``) and/or named ones
        named = {**({"default": bearer} if bearer else {}), **(bearers or {})}
        self._bearer: BearerAuth | NamedBearers | None = NamedBearers(named) if named else None
        self._mtls = mtls
        self.auth = auth_label(mtls=mtls, bearer=bool(named))
        hosts = {h.lower().strip("[]") for h in (allowed_hosts or ())}
        if loopback:
            hosts |= _LOOPBACK_NAMES
        self._allowed_hosts: frozenset[str] | None = frozenset(hosts) if hosts else None
        self._allowed_origins = frozenset(o.lower().rstrip("/") for o in (allowed_origins or ()))
        self._host_ok: dict[str, bool] = {}
        self.gate: Gate | None = None  # set when the listener starts: told who authenticated

    def check(self, request: web.Request) -> web.StreamResponse | None:
        """Host/Origin (403) and bearer (401) checks, for every method; None: go on."""
        headers = request.headers
        host = headers.get("Host")
        dup = http_checks.duplicate_identity_header(headers)
        if dup is not None:
            return _refused(request, f"duplicate_{dup.lower()}")
        target = http_checks.target_host(request.raw_path)
        if target is not None and (host is None or hostname(target) != hostname(host)):
            return _refused(request, "target_host")  # absolute form naming another host
        if self._allowed_hosts is not None:
            ok = self._host_ok.get(host) if host is not None else False
            if ok is None:
                ok = hostname(host) in self._allowed_hosts  # type: ignore[arg-type]
                if len(self._host_ok) >= _HOST_CACHE:
                    self._host_ok.clear()
                self._host_ok[host] = ok  # type: ignore[index]
            if not ok:
                return _refused(request, "host")
        origin = headers.get("Origin")
        if origin is not None and not self._origin_ok(origin, host):
            return _refused(request, "origin")
        vouched = request.get(VOUCHED)
        name = None
        if self._bearer is not None and vouched is None:
            name = self._bearer.match(headers.get("Authorization"))  # type: ignore[union-attr]
            if name is None:
                return _refused(request, "auth")
        self.authenticated(request)
        if vouched is None:
            subject = None
            if self._mtls and request.transport is not None:
                subject = cert_subject(request.transport.get_extra_info("peercert"))
            vouched = principal(subject=subject, bearer_name=name)
        # the principal served runs belong to; this request's task only
        current_principal.set(vouched)
        version = headers.get("MCP-Protocol-Version")
        if version is not None and request.method != "POST":  # a GET or DELETE
            rev = revision.by_version(version)
            if rev is None:
                return plain(400, "Bad Request: unsupported MCP-Protocol-Version")
            if not rev.sessions:
                return plain(405, "Method Not Allowed: 2026-07-28 has no GET stream or session",
                             {"Allow": "POST"})
        return None

    @staticmethod
    def vouch(request: web.Request, principal: str) -> None:
        """Serve ``request`` as ``principal``, which a pool peer proved (before :meth:`check`)."""
        request[VOUCHED] = principal

    @staticmethod
    def caller() -> str:
        """The principal :meth:`check` authenticated for this request's task."""
        return current_principal.get() or "anonymous"

    def authenticated(self, request: web.BaseRequest) -> None:
        """``request`` passed auth (this guard's, or a route's own: the pool link's
        MAC), so its connection stops counting against the gate's budget for
        unauthenticated connections and is never evicted as one."""
        if self.gate is not None:
            self.gate.authenticated(request)

    def _origin_ok(self, origin: str, host: str | None) -> bool:
        o = origin.strip().lower().rstrip("/")
        if o in self._allowed_origins:
            return True
        try:
            parts = urlsplit(o)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null", file:, extensions...
        if self.loopback:
            return is_loopback_host(parts.hostname)
        return host is not None and parts.netloc == host.strip().lower()
