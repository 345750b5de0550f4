"""The Streamable HTTP MCP server engine (MCP 2025-11-25 transport) on aiohttp.web.

One endpoint path (``/mcp``) serves a :class:`~agentd.mcp.server.handler.Handler`:

* ``POST`` carries one JSON-RPC message.  ``initialize`` (without a session)
  mints ``Mcp-Session-Id`` (``secrets.token_urlsafe``); every other message
  needs it: ``400`` without, ``404`` for an unknown or ended session.  A
  request is answered ``application/json``, or ``text/event-stream`` when the
  handler sends request-related messages ahead of its response (or the client
  accepts only SSE).  A notification or response is answered ``202``.
  A sessionless request for a method this server does not serve (e.g. a
  ``server/discover`` probe) gets ``-32601`` so newer clients fall back.
* ``GET`` opens the session's SSE stream: every unsolicited message
  (``notifications/resources/updated``) is an event with an id; a client
  resuming with ``Last-Event-ID`` gets every later event still in the bounded
  buffer, a fresh GET gets the events no stream has carried yet.  A new GET
  supersedes the previous stream of the session.
* ``DELETE`` ends the session (``200``); it then answers ``404``.
* A session answers only the principal that opened it: another principal's
  POST, GET or DELETE with its id is ``404``, as for an unknown id
  (``agentd.mcp.server.http.sessions``).
* ``MCP-Protocol-Version`` (when sent) must be one we speak: else ``400``.
* MCP 2026-07-28 on the same path: a POST whose ``MCP-Protocol-Version`` is
  not a session revision's, or a sessionless one whose ``params._meta``
  carries ``io.modelcontextprotocol/protocolVersion``, is one stateless
  exchange (``agentd.mcp.server.rules.revision`` chooses the revision once per
  request; ``agentd.mcp.server.rules.stateless`` holds its rules: envelope,
  headers, versions, ``server/discover``, result fields, error statuses); no
  session is minted or read.  ``subscriptions/listen`` answers with an SSE stream that
  stays open (acknowledgement first), bounded per principal -> ``429``, in
  total -> ``503``; a GET or
  DELETE at 2026-07-28 is ``405``.
* ``Host`` and ``Origin`` are checked on every request (DNS rebinding): a
  loopback listener only accepts loopback names; an ``Origin`` must be a
  loopback origin there, and elsewhere the request's own host or an allowed
  origin.  Otherwise ``403``.
* Auth (``agentd.mcp.server.auth``): mTLS happens in the TLS handshake; a bearer
  mismatch is ``401`` + ``WWW-Authenticate: Bearer`` and nothing else.
* Limits (:class:`Limits`, defaults in docs/server.md and docs/security.md):
  body size (``413``) and read time (``408``), header line/field size and
  count (``400``), the first head of a connection (``431``), header-read and
  keep-alive timeouts, connections (``agentd.mcp.server.http.limits``), sessions and
  GET streams per principal (``429``), sessions in total (``503``), idle
  session timeout, SSE buffer, stream age and stalled stream write timeout.
  Media types, the request target and duplicate ``Host``/``Origin`` are
  checked by ``agentd.mcp.server.http.checks``.  401s and limit hits are logged
  throttled (``agentd.log_bridge``).

While tracing is on (``agentd.obs.trace``), each POST is handled inside its
``mcp.server {method}`` span, which continues the caller's trace
(``agentd.obs.served``: ``_meta.traceparent``, else the ``traceparent``
header), made from the message as decoded here.

Everything is owned by aiohttp's runner: request handlers (including SSE
streams) are its tasks, and the idle-session reaper lives in the app's
``cleanup_ctx``.  A peer's mistake is answered and logged, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from agentd.errors import RPCError
from agentd.log import log, register_secret
from agentd.log_bridge import route_stdlib, throttled
from agentd.mcp.server.handler import Handler, ServerSession
from agentd.mcp.server.http import checks as http_checks
from agentd.mcp.server.http.guard import Guard
from agentd.mcp.server.http.limits import (
    Gate,
    GatedSite,
    Limits,
    env_limits,
)
from agentd.mcp.server.http.listens import Listens
from agentd.mcp.server.http.responses import JSON, PostStream, closing, plain, rpc_error
from agentd.mcp.server.http.sessions import Sessions
from agentd.mcp.server.rules import revision, stateless
from agentd.mcp.server.rules.sessions import SERVED_METHODS
from agentd.netaddr import is_loopback_host
from agentd.obs import served, trace
from agentd.wire import codec
from agentd.wire import mcp2026 as m
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import INVALID_REQUEST, METHOD_NOT_FOUND, Notification, Request

__all__ = ["HttpServer", "Limits", "Runner", "serve"]

_log = log.bind(component="mcp.http_server")


class HttpServer(served.SpansOwnRequests):
    """The aiohttp application serving one handler at ``path``: the routes, which
    hand each request to its concern -- the guard (``agentd.mcp.server.http.guard``),
    the 2025-11-25 sessions (``agentd.mcp.server.http.sessions``), the 2026-07-28
    exchanges (one :class:`~agentd.mcp.server.handler.ServerSession` per request) and
    listen streams (``agentd.mcp.server.http.listens``), the answers
    (``agentd.mcp.server.http.responses``)."""

    def __init__(self, handler: Handler, *, limits: Limits | None = None,
                 bearer: str | None = None, mtls: bool = False, loopback: bool = True,
                 bearers: dict[str, str] | None = None, extra_paths: tuple[str, ...] = (),
                 allowed_hosts: set[str] | frozenset[str] | None = None,
                 allowed_origins: set[str] | frozenset[str] | None = None,
                 path: str = "/mcp") -> None:
        self.handler = handler
        self.hub = handler.hub
        self.limits = limits or Limits()
        self.path = path
        self.guard = Guard(bearer=bearer, bearers=bearers, mtls=mtls, loopback=loopback,
                           allowed_hosts=allowed_hosts, allowed_origins=allowed_origins)
        self.auth = self.guard.auth
        self.sessions = Sessions(handler, self.limits, self.auth)
        self.listens = Listens(handler, self.limits, self.auth)
        self.app = web.Application(client_max_size=self.limits.max_body)
        for route in (path, *extra_paths):  # the self-MCP answers at / as well as /mcp
            self.app.router.add_route("POST", route, self._post)
            self.app.router.add_route("GET", route, self._get)
            self.app.router.add_route("DELETE", route, self._delete)
        self.app.cleanup_ctx.append(self._reaper_ctx)

    @property
    def gate(self) -> Gate | None:
        return self.guard.gate

    @gate.setter
    def gate(self, gate: Gate | None) -> None:
        """Set when the listener starts (serve()): the guard tells it who authenticated."""
        self.guard.gate = gate

    # -------------------------------------------------------------- POST
    async def _post(self, request: web.Request) -> web.StreamResponse:
        denied = self.guard.check(request)
        if denied is not None:
            return denied
        if not http_checks.is_json(request.headers.get("Content-Type")):
            return plain(415, "Unsupported Media Type: expected application/json")
        accept = request.headers.get("Accept")
        accept_json = http_checks.accepts(accept, "application/json")
        accept_sse = accept is not None and http_checks.accepts(accept, "text/event-stream")
        if not (accept_json or accept_sse):
            return plain(406, "Not Acceptable: accept application/json or text/event-stream")
        length = request.content_length
        if length is not None and length > self.limits.max_body:
            throttled(_log, "warning", "mcp.serve.refused", key="body_size", reason="body_size",
                      size=length)
            return closing(413, "Payload Too Large")
        try:
            if request.content.is_eof():  # the whole body is buffered: no wait to bound
                body = await request.read()
            else:
                async with asyncio.timeout(self.limits.body_timeout):
                    body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            throttled(_log, "warning", "mcp.serve.refused", key="body_size", reason="body_size")
            return closing(413, "Payload Too Large")
        except TimeoutError:
            throttled(_log, "warning", "mcp.serve.limit", key="body_timeout", reason="body_timeout")
            return closing(408, "Request Timeout: the body was not received in time")
        try:
            msg = codec.decode(body)
            if not trace.enabled:
                return await self._route(request, msg, accept_json, accept_sse)
            # tracing: the request's server span continues its caller's trace (from the
            # message decoded here: `agentd.obs.served` reads `_meta` of its raw params)
            named = msg if isinstance(msg, Request | Notification) else None  # a response: none
            with served.span(named.method if named is not None else None,
                             named.params if named is not None else None, request.headers):
                return await self._route(request, msg, accept_json, accept_sse)
        except RPCError as exc:  # the message, or a rule that read more of it
            if exc.side == "remote":  # not ours to answer with
                raise
            throttled(_log, "info", "mcp.serve.rejected", key=str(exc.code), code=exc.code,
                      reason=exc.message[:120])
            return rpc_error(400, exc)

    async def _route(self, request: web.Request, msg: Any, accept_json: bool,
                     accept_sse: bool) -> web.StreamResponse:
        """One decoded message: a 2026-07-28 exchange, an ``initialize``, or a
        message of a session (the revision it arrives at, chosen once)."""
        sid = request.headers.get("Mcp-Session-Id")
        req = msg if type(msg) is Request else None
        if not revision.arriving(request.headers.get("MCP-Protocol-Version"), sid,
                                 req).sessions:
            return await self._exchange(request, msg, accept_json, accept_sse)
        if sid is None:
            if req is not None and req.method == t.INITIALIZE:
                return await self.sessions.initialize(request, req)
            if req is not None and req.method not in SERVED_METHODS:
                return rpc_error(200, RPCError(METHOD_NOT_FOUND,
                                               f"Method not found: {req.method}", id=req.id,
                                               side="local"))
            return plain(400, "Bad Request: Mcp-Session-Id header is required")
        live = self.sessions.owned(sid)
        if live is None:  # unknown, ended, or another principal's
            return plain(404, "Not Found: unknown or ended session")
        session = live.session
        assert session is not None
        if req is None:
            await session.receive(msg)
            return web.Response(status=202)
        stream = PostStream(request) if accept_sse else None
        out, _ = await session.serve(req, stream.emit if stream is not None else None)
        if stream is not None and (stream.resp is not None or not accept_json):
            return await stream.finish(out)
        return web.Response(body=out, headers=JSON)

    # ------------------------------------------------- 2026-07-28 (stateless)
    async def _exchange(self, request: web.Request, msg: Any, accept_json: bool,
                        accept_sse: bool) -> web.StreamResponse:
        """One self-contained 2026-07-28 message: the rules are
        ``agentd.mcp.server.rules.stateless``'s; auth, Host/Origin and body limits
        were applied exactly as for a session."""
        if type(msg) is Notification:  # no client notifications are defined: accept, drop
            try:
                stateless.check_version(request.headers.get("MCP-Protocol-Version"))
            except RPCError as exc:
                return rpc_error(400, exc)
            return web.Response(status=202)
        if type(msg) is not Request:
            return rpc_error(400, RPCError(INVALID_REQUEST,
                                           "Invalid Request: clients send no responses",
                                           side="local"))
        try:
            env = stateless.classify(msg, request.headers)
        except RPCError as exc:
            if _log.enabled("debug"):  # a peer's mistake, answered: never a log flood
                _log.debug("mcp.serve.rejected", method=msg.method, code=exc.code)
            return rpc_error(stateless.http_status(exc.code), exc)
        if msg.method == m.SUBSCRIPTIONS_LISTEN:
            return await self.listens.listen(request, msg, env, accept_sse)
        session = ServerSession.per_request(self.handler, env, auth=self.auth,
                                            client=request.remote or "?")
        stream = PostStream(request) if accept_sse else None
        out, status = await session.serve(msg, stream.emit if stream is not None else None,
                                          request.headers)
        if stream is not None and (stream.resp is not None or not accept_json):
            return await stream.finish(out)
        return web.Response(status=status, body=out, headers=JSON)

    # --------------------------------------------------------- GET, DELETE
    async def _get(self, request: web.Request) -> web.StreamResponse:
        denied = self.guard.check(request)
        if denied is not None:
            return denied
        accept = request.headers.get("Accept", "")
        if "text/event-stream" not in accept and "*/*" not in accept:
            return plain(406, "Not Acceptable: the GET stream is text/event-stream")
        return await self.sessions.get(request)

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        denied = self.guard.check(request)
        if denied is not None:
            return denied
        return self.sessions.delete(request)

    # ------------------------------------------------------------ ending
    def close_all(self) -> None:
        """Shutdown: every session ends, every listen stream ends with its result."""
        self.sessions.close_all()
        self.listens.close_all()

    def reap(self, now: float | None = None) -> int:
        """End sessions idle (no request, no open stream) beyond the timeout."""
        return self.sessions.reap(now)

    async def _reaper_ctx(self, app: web.Application) -> AsyncIterator[None]:
        async def reaper() -> None:
            period = max(0.05, min(30.0, self.limits.idle_timeout / 4))
            while True:
                await asyncio.sleep(period)
                try:
                    self.reap()
                except Exception as exc:  # never let bookkeeping kill the reaper
                    _log.error("mcp.serve.reaper_error", error=repr(exc))

        task = asyncio.create_task(reaper(), name="mcp-session-reaper")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.close_all()


class Runner:
    """A listening server; ``await runner.stop()`` (or ``async with``) ends it."""

    def __init__(self, server: HttpServer, app_runner: web.AppRunner, host: str, port: int,
                 scheme: str) -> None:
        self.server = server
        self.handler = server.handler
        self._app_runner = app_runner
        self.host = host
        self.port = port
        self.scheme = scheme
        self._stopped = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.server.path}"

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.server.close_all()  # wakes every SSE stream so it ends
        await self._app_runner.cleanup()
        _log.info("mcp.serve.stopped", url=self.url)

    async def __aenter__(self) -> Runner:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


async def serve(handler: Handler, *, host: str = "127.0.0.1", port: int = 0,
                ssl_context: ssl.SSLContext | None = None, bearer: str | None = None,
                limits: Limits | None = None, allowed_hosts: set[str] | None = None,
                allowed_origins: set[str] | None = None, path: str = "/mcp",
                bearers: dict[str, str] | None = None,
                extra_paths: tuple[str, ...] = (),
                mount: Callable[[HttpServer], None] | None = None) -> Runner:
    """Serve ``handler`` over Streamable HTTP(S) at ``path``; returns a :class:`Runner`.

    ``port=0`` picks a free port (``runner.port``).  ``ssl_context`` from
    :func:`agentd.mcp.server.auth.server_ssl_context` (mTLS when it requires client
    certificates); ``bearer`` enables the bearer check.  ``mount(server)`` adds
    routes to ``server.app`` before it starts (the ``/metrics`` and probes of
    ``agentd.obs.http``, guarded by ``server.guard.check``).
    """
    limits = limits or env_limits()
    register_secret(bearer)
    for token in (bearers or {}).values():
        register_secret(token)
    mtls = ssl_context is not None and ssl_context.verify_mode == ssl.CERT_REQUIRED
    loopback = is_loopback_host(host)
    if not loopback and not mtls and not bearer and not bearers:
        raise ValueError(f"refusing an unauthenticated non-loopback listener on {host}")
    server = HttpServer(handler, limits=limits, bearer=bearer, mtls=mtls, loopback=loopback,
                        allowed_hosts=allowed_hosts, allowed_origins=allowed_origins, path=path,
                        bearers=bearers, extra_paths=extra_paths)
    if mount is not None:
        mount(server)
    route_stdlib(None)  # aiohttp's own records become agentd JSON lines
    app_runner = web.AppRunner(
        server.app, access_log=None, handle_signals=False,
        shutdown_timeout=limits.shutdown_timeout, keepalive_timeout=limits.keepalive_timeout,
        lingering_time=min(2.0, limits.body_timeout),  # reading an unread body after an answer
        max_line_size=limits.max_line, max_field_size=limits.max_field,
        max_headers=limits.max_headers)
    await app_runner.setup()
    site = GatedSite(app_runner, host, port, limits=limits, ssl_context=ssl_context,
                     backlog=1024, reuse_address=True)
    try:
        await site.start()
    except BaseException:
        await app_runner.cleanup()
        raise
    server.gate = site.gate
    bound = site.port
    scheme = "https" if ssl_context is not None else "http"
    runner = Runner(server, app_runner, host, bound, scheme)
    if server.auth == "none":
        _log.warning("mcp.serve.unauthenticated", url=runner.url,
                     note="loopback http without auth: for local development only")
    _log.info("mcp.serve.listening", url=runner.url, auth=server.auth)
    return runner
