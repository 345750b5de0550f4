"""The Streamable HTTP MCP server engine (MCP 2025-11-25 transport) on aiohttp.web.

One endpoint path (``/mcp``) serves a :class:`~agentd.mcp.handler.Handler`:

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
* ``MCP-Protocol-Version`` (when sent) must be one we speak: else ``400``.
* MCP 2026-07-28 on the same path: a POST whose ``MCP-Protocol-Version`` is
  not an initialize-era version, or a sessionless one whose ``params._meta``
  carries ``io.modelcontextprotocol/protocolVersion``, is one stateless
  exchange (``agentd.mcp.stateless`` holds the rules: envelope, headers,
  versions, ``server/discover``, result fields, error statuses); no session is
  minted or read.  ``subscriptions/listen`` answers with an SSE stream that
  stays open (acknowledgement first), bounded per principal -> ``429``, in
  total -> ``503``; a GET or
  DELETE at 2026-07-28 is ``405``.
* ``Host`` and ``Origin`` are checked on every request (DNS rebinding): a
  loopback listener only accepts loopback names; an ``Origin`` must be a
  loopback origin there, and elsewhere the request's own host or an allowed
  origin.  Otherwise ``403``.
* Auth (``agentd.mcp.auth``): mTLS happens in the TLS handshake; a bearer
  mismatch is ``401`` + ``WWW-Authenticate: Bearer`` and nothing else.
* Limits (:class:`Limits`, defaults in docs/server.md and docs/security.md):
  body size (``413``) and read time (``408``), header line/field size and
  count (``400``), the first head of a connection (``431``), header-read and
  keep-alive timeouts, connections (``agentd.mcp.http_limits``), sessions and
  GET streams per principal (``429``), sessions in total (``503``), idle
  session timeout, SSE buffer, stream age and stalled stream write timeout.
  Media types, the request target and duplicate ``Host``/``Origin`` are
  checked by ``agentd.mcp.http_checks``.  401s and limit hits are logged
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
import secrets
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Final
from urllib.parse import urlsplit

from aiohttp import web

from agentd.log import log, register_secret
from agentd.log_bridge import route_stdlib, throttled
from agentd.mcp import http_checks, stateless
from agentd.mcp.auth import (
    UNAUTHORIZED_HEADERS,
    BearerAuth,
    NamedBearers,
    auth_label,
    cert_subject,
    principal,
)
from agentd.mcp.handler import Handler, ServerSession, current_principal
from agentd.mcp.http_limits import (
    Gate,
    GatedSite,
    Limits,
    env_limits,
)
from agentd.mcp.server_session import ORIGIN_MANAGEMENT, SERVED_METHODS
from agentd.netaddr import is_loopback_host
from agentd.obs import served, trace
from agentd.wire import codec
from agentd.wire import mcp2026 as m
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    Notification,
    ProtocolError,
    Request,
)

__all__ = ["HttpServer", "Limits", "Runner", "serve"]

_log = log.bind(component="mcp.http_server")

_JSON: Final = {"Content-Type": "application/json"}
_SSE_HEADERS: Final = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                       "X-Accel-Buffering": "no"}
_SUPPORTED: Final = frozenset(t.SUPPORTED_PROTOCOL_VERSIONS)
_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})


def _plain(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=text, headers=headers)


def _closing(status: int, text: str) -> web.Response:
    """An answer after which the connection is closed (its input is not trusted)."""
    resp = _plain(status, text)
    resp.force_close()
    return resp


def _refused(request: web.Request, reason: str) -> web.Response:
    """403 (401 for auth), logged throttled; the connection is closed after it."""
    throttled(_log, "warning", "mcp.serve.refused", key=reason, reason=reason,
              method=request.method)
    resp = web.Response(status=401, headers=UNAUTHORIZED_HEADERS) if reason == "auth" \
        else _plain(403, "Forbidden")
    resp.force_close()
    return resp


def _rpc_error(status: int, exc: ProtocolError) -> web.Response:
    return web.Response(status=status, body=codec.encode_error(exc.id, exc.code, exc.message,
                                                               exc.data), headers=_JSON)


def _hostname(host: str) -> str:
    """The hostname of a Host header value (``[::1]:8080`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else host
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


def _sse_event(event_id: int | None, data: bytes) -> bytes:
    head = b"id: %d\nevent: message\ndata: " % event_id if event_id is not None \
        else b"event: message\ndata: "
    return head + data + b"\n\n"


class _Channel:
    """The transport side of one session: its SSE event buffer and streams."""

    __slots__ = ("client", "delivered", "events", "gen", "next_id", "session", "streams", "wake")

    def __init__(self, client: str, buffer: int) -> None:
        self.client = client
        self.events: deque[tuple[int, bytes]] = deque(maxlen=buffer)
        self.next_id = 0
        self.delivered = 0  # the highest event id some stream has written
        self.gen = 0  # the current GET stream's generation
        self.streams = 0  # open GET streams
        self.wake = asyncio.Event()
        self.session: ServerSession | None = None

    def push(self, data: bytes) -> None:
        self.next_id += 1
        self.events.append((self.next_id, data))
        self.wake.set()

    def pending(self, cursor: int) -> list[tuple[int, bytes]]:
        return [e for e in self.events if e[0] > cursor]


class _PostStream:
    """A POST answered as SSE: messages the handler sends first, then the response."""

    __slots__ = ("request", "resp")

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.resp: web.StreamResponse | None = None

    async def emit(self, data: bytes) -> None:
        if self.resp is None:
            self.resp = web.StreamResponse(headers=_SSE_HEADERS)
            await self.resp.prepare(self.request)
        await self.resp.write(_sse_event(None, data))

    async def finish(self, data: bytes) -> web.StreamResponse:
        await self.emit(data)
        assert self.resp is not None
        await self.resp.write_eof()
        return self.resp


class HttpServer:
    """The aiohttp application serving one handler at ``path``."""

    # its POST routes make their own server span (``agentd.obs.http`` leaves them be)
    traces_requests: Final = True

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
        self.channels: dict[str, _Channel] = {}
        self._per_client: dict[str, int] = {}  # live sessions per principal
        self._streams: dict[str, int] = {}  # open GET streams per principal
        self.gate: Gate | None = None  # set when the listener starts (serve())
        self.listeners: set[stateless.Listener] = set()  # open 2026-07-28 listen streams
        self._listens_per_client: dict[str, int] = {}
        self._listen_seq = 0
        self._stopping = False
        self._listen_wake: dict[stateless.Listener, asyncio.Event] = {}
        self.app = web.Application(client_max_size=self.limits.max_body)
        for route in (path, *extra_paths):  # the self-MCP answers at / as well as /mcp
            self.app.router.add_route("POST", route, self._post)
            self.app.router.add_route("GET", route, self._get)
            self.app.router.add_route("DELETE", route, self._delete)
        self.app.cleanup_ctx.append(self._reaper_ctx)

    # ------------------------------------------------------------ guards
    def _guard(self, request: web.Request) -> web.StreamResponse | None:
        """Host/Origin (403) and bearer (401) checks, for every method."""
        headers = request.headers
        host = headers.get("Host")
        dup = http_checks.duplicate_identity_header(headers)
        if dup is not None:
            return _refused(request, f"duplicate_{dup.lower()}")
        target = http_checks.target_host(request.raw_path)
        if target is not None and (host is None or _hostname(target) != _hostname(host)):
            return _refused(request, "target_host")  # absolute form naming another host
        if self._allowed_hosts is not None:
            ok = self._host_ok.get(host) if host is not None else False
            if ok is None:
                ok = _hostname(host) in self._allowed_hosts  # type: ignore[arg-type]
                if len(self._host_ok) >= 256:
                    self._host_ok.clear()
                self._host_ok[host] = ok  # type: ignore[index]
            if not ok:
                return _refused(request, "host")
        origin = headers.get("Origin")
        if origin is not None and not self._origin_ok(origin, host):
            return _refused(request, "origin")
        name = None
        if self._bearer is not None:
            name = self._bearer.match(headers.get("Authorization"))  # type: ignore[union-attr]
            if name is None:
                return _refused(request, "auth")
        if self.gate is not None:
            self.gate.authenticated(request)
        subject = None
        if self._mtls and request.transport is not None:
            subject = cert_subject(request.transport.get_extra_info("peercert"))
        # the principal served runs belong to; this request's task only
        current_principal.set(principal(subject=subject, bearer_name=name))
        version = headers.get("MCP-Protocol-Version")
        if version in m.MODERN_PROTOCOL_VERSIONS and request.method != "POST":
            return _plain(405, "Method Not Allowed: 2026-07-28 has no GET stream or session",
                          {"Allow": "POST"})
        if version is not None and version not in _SUPPORTED and request.method != "POST":
            return _plain(400, "Bad Request: unsupported MCP-Protocol-Version")
        return None

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

    def _session(self, request: web.Request) -> tuple[_Channel | None, web.StreamResponse | None]:
        sid = request.headers.get("Mcp-Session-Id")
        if sid is None:
            return None, _plain(400, "Bad Request: Mcp-Session-Id header is required")
        ch = self.channels.get(sid)
        if ch is None:
            return None, _plain(404, "Not Found: unknown or ended session")
        return ch, None

    # -------------------------------------------------------------- POST
    async def _post(self, request: web.Request) -> web.StreamResponse:
        denied = self._guard(request)
        if denied is not None:
            return denied
        if not http_checks.is_json(request.headers.get("Content-Type")):
            return _plain(415, "Unsupported Media Type: expected application/json")
        accept = request.headers.get("Accept")
        accept_json = http_checks.accepts(accept, "application/json")
        accept_sse = accept is not None and http_checks.accepts(accept, "text/event-stream")
        if not (accept_json or accept_sse):
            return _plain(406, "Not Acceptable: accept application/json or text/event-stream")
        length = request.content_length
        if length is not None and length > self.limits.max_body:
            throttled(_log, "warning", "mcp.serve.refused", key="body_size", reason="body_size",
                      size=length)
            return _closing(413, "Payload Too Large")
        try:
            if request.content.is_eof():  # the whole body is buffered: no wait to bound
                body = await request.read()
            else:
                async with asyncio.timeout(self.limits.body_timeout):
                    body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            throttled(_log, "warning", "mcp.serve.refused", key="body_size", reason="body_size")
            return _closing(413, "Payload Too Large")
        except TimeoutError:
            throttled(_log, "warning", "mcp.serve.limit", key="body_timeout", reason="body_timeout")
            return _closing(408, "Request Timeout: the body was not received in time")
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
        except ProtocolError as exc:  # the message, or a rule that read more of it
            throttled(_log, "info", "mcp.serve.rejected", key=str(exc.code), code=exc.code,
                      reason=exc.message[:120])
            return _rpc_error(400, exc)

    async def _route(self, request: web.Request, msg: Any, accept_json: bool,
                     accept_sse: bool) -> web.StreamResponse:
        """One decoded message: a 2026-07-28 exchange, an ``initialize``, or a
        message of a session."""
        sid = request.headers.get("Mcp-Session-Id")
        req = msg if type(msg) is Request else None
        version = request.headers.get("MCP-Protocol-Version")
        if (version is not None and version not in _SUPPORTED) or \
                (sid is None and req is not None and stateless.is_modern_request(req)):
            return await self._modern(request, msg, accept_json, accept_sse)
        if sid is None:
            if req is not None and req.method == t.INITIALIZE:
                return await self._initialize(request, req)
            if req is not None and req.method not in SERVED_METHODS:
                return _rpc_error(200, ProtocolError(METHOD_NOT_FOUND,
                                                     f"Method not found: {req.method}", id=req.id))
            return _plain(400, "Bad Request: Mcp-Session-Id header is required")
        ch = self.channels.get(sid)
        if ch is None:
            return _plain(404, "Not Found: unknown or ended session")
        session = ch.session
        assert session is not None
        if req is None:
            await session.receive(msg)
            return web.Response(status=202)
        session.last_active = time.monotonic()
        stream = _PostStream(request) if accept_sse else None
        out, _ = await session.serve(req, stream.emit if stream is not None else None)
        if stream is not None and (stream.resp is not None or not accept_json):
            return await stream.finish(out)
        return web.Response(body=out, headers=_JSON)

    async def _initialize(self, request: web.Request, msg: Request) -> web.StreamResponse:
        client = request.remote or "?"
        owner = current_principal.get() or "anonymous"  # caps count per principal
        lim = self.limits
        if self._per_client.get(owner, 0) >= lim.sessions_per_client:
            throttled(_log, "warning", "mcp.serve.limit", key="sessions_per_principal",
                      reason="sessions_per_principal")
            return _plain(429, "Too Many Requests: session limit for this principal",
                          {"Retry-After": "60"})
        if len(self.channels) >= lim.max_sessions:
            throttled(_log, "warning", "mcp.serve.limit", key="max_sessions",
                      reason="max_sessions")
            return _plain(503, "Service Unavailable: session limit", {"Retry-After": "60"})
        sid = secrets.token_urlsafe(32)
        ch = _Channel(owner, lim.event_buffer)
        session = ServerSession.opening(self.handler, sid, auth=self.auth, client=client,
                                        outbox=ch.push)
        ch.session = session
        out, _ = await session.serve(msg)
        if session.protocol_version is None:  # initialize failed: no session
            return web.Response(body=out, headers=_JSON)
        self.channels[sid] = ch
        self.hub.add(session)
        self._per_client[owner] = self._per_client.get(owner, 0) + 1
        return web.Response(body=out, headers={"Content-Type": "application/json",
                                               "Mcp-Session-Id": sid})

    # ------------------------------------------------- 2026-07-28 (stateless)
    async def _modern(self, request: web.Request, msg: Any, accept_json: bool,
                      accept_sse: bool) -> web.StreamResponse:
        """One self-contained 2026-07-28 message: the rules are ``agentd.mcp.stateless``'s;
        auth, Host/Origin and body limits were applied exactly as for a session."""
        if type(msg) is Notification:  # no client notifications are defined: accept, drop
            version = request.headers.get("MCP-Protocol-Version")
            if version not in m.MODERN_PROTOCOL_VERSIONS:
                return _rpc_error(400, ProtocolError(
                    m.UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                    m.UnsupportedVersionData(supported=stateless.SUPPORTED_VERSIONS,
                                             requested=version)))
            return web.Response(status=202)
        if type(msg) is not Request:
            return _rpc_error(400, ProtocolError(INVALID_REQUEST,
                                                 "Invalid Request: clients send no responses"))
        try:
            env = stateless.classify(msg, request.headers)
        except ProtocolError as exc:
            if _log.enabled("debug"):  # a peer's mistake, answered: never a log flood
                _log.debug("mcp.serve.rejected", method=msg.method, code=exc.code)
            return _rpc_error(stateless.http_status(exc.code), exc)
        if msg.method == m.SUBSCRIPTIONS_LISTEN:
            return await self._listen(request, msg, env, accept_sse)
        session = ServerSession.per_request(self.handler, env, auth=self.auth,
                                            client=request.remote or "?")
        stream = _PostStream(request) if accept_sse else None
        out, status = await session.serve(msg, stream.emit if stream is not None else None,
                                          request.headers)
        if stream is not None and (stream.resp is not None or not accept_json):
            return await stream.finish(out)
        return web.Response(status=status, body=out, headers=_JSON)

    async def _listen(self, request: web.Request, msg: Request, env: stateless.Envelope,
                      accept_sse: bool) -> web.StreamResponse:
        """``subscriptions/listen``: the response is an SSE stream that stays open,
        acknowledgement first; bounded per client and in total."""
        if not accept_sse:
            return _plain(406, "Not Acceptable: a listen stream is text/event-stream")
        try:
            params = stateless.listen_params(msg)
        except ProtocolError as exc:
            return _rpc_error(400, exc)
        client = current_principal.get() or "anonymous"  # bounded per principal, as sessions
        lim = self.limits
        if self._listens_per_client.get(client, 0) >= lim.listen_per_client:
            throttled(_log, "warning", "mcp.serve.limit", key="listens_per_principal",
                      reason="listens_per_principal")
            return _rpc_error(429, ProtocolError(
                stateless.LIMIT_EXCEEDED, "Too many open subscriptions/listen streams for this "
                f"principal (limit {lim.listen_per_client})", id=msg.id))
        if len(self.listeners) >= lim.max_listens or self._stopping:
            throttled(_log, "warning", "mcp.serve.limit", key="max_listens",
                      reason="max_listens")
            return _rpc_error(503, ProtocolError(
                stateless.LIMIT_EXCEEDED, "Too many open subscriptions/listen streams", id=msg.id))
        self._listen_seq += 1
        listener = stateless.Listener(self.handler, msg.id, env,
                                      listen_id=f"listen:{self._listen_seq}",
                                      origin=ORIGIN_MANAGEMENT, auth=self.auth, client=client,
                                      max_frames=lim.listen_buffer)
        self.listeners.add(listener)
        self._listens_per_client[client] = self._listens_per_client.get(client, 0) + 1
        wake = asyncio.Event()
        self._listen_wake[listener] = wake
        resp = web.StreamResponse(headers=_SSE_HEADERS)  # prepared once the listen is open
        try:
            try:
                ack = await listener.open(params)
            except Exception as exc:  # a handler bug never kills the server
                _log.error("mcp.serve.internal_error", method=msg.method,
                           error=type(exc).__name__, detail=str(exc)[:500])
                return _rpc_error(200, ProtocolError(INTERNAL_ERROR, "Internal error",
                                                     id=msg.id))
            listener.outbox = lambda _data: wake.set()
            _log.info("mcp.serve.listen", auth=self.auth, subscription=str(msg.id)[:32],
                      uris=len(listener.subscriptions))
            await resp.prepare(request)
            frames = listener.frames
            async with asyncio.timeout(lim.write_timeout):
                await resp.write(_sse_event(None, ack))
            idle = 0.0
            tick = min(lim.keepalive, 1.0)
            while True:
                if frames:
                    data = b"".join(_sse_event(None, f) for f in frames)
                    frames.clear()
                    async with asyncio.timeout(lim.write_timeout):
                        await resp.write(data)
                    continue
                if listener.overflowed:
                    _log.warning("mcp.serve.listen.overflow", subscription=str(msg.id)[:32])
                    break  # abrupt end: the client re-listens and re-reads
                if listener.exhausted or self._stopping:
                    async with asyncio.timeout(lim.write_timeout):
                        await resp.write(_sse_event(None, listener.result()))
                    break
                transport = request.transport
                if transport is None or transport.is_closing():
                    break  # the client went away
                wake.clear()
                try:
                    async with asyncio.timeout(tick):
                        await wake.wait()
                    idle = 0.0
                except TimeoutError:
                    idle += tick
                    if idle >= lim.keepalive:
                        idle = 0.0
                        async with asyncio.timeout(lim.write_timeout):
                            await resp.write(b": keepalive\n\n")
        except (ConnectionError, TimeoutError, RuntimeError):
            pass  # the client went away or stalled: nothing to resume at 2026-07-28
        finally:
            listener.close()
            self.listeners.discard(listener)
            self._listen_wake.pop(listener, None)
            n = self._listens_per_client.get(client, 0) - 1
            if n > 0:
                self._listens_per_client[client] = n
            else:
                self._listens_per_client.pop(client, None)
        return resp

    # --------------------------------------------------------------- GET
    async def _get(self, request: web.Request) -> web.StreamResponse:
        denied = self._guard(request)
        if denied is not None:
            return denied
        accept = request.headers.get("Accept", "")
        if "text/event-stream" not in accept and "*/*" not in accept:
            return _plain(406, "Not Acceptable: the GET stream is text/event-stream")
        ch, err = self._session(request)
        if ch is None:
            return err  # type: ignore[return-value]
        lim = self.limits
        owner = current_principal.get() or "anonymous"
        if self._streams.get(owner, 0) >= lim.streams_per_principal:
            throttled(_log, "warning", "mcp.serve.limit", key="streams_per_principal",
                      reason="streams_per_principal")
            return _plain(429, "Too Many Requests: stream limit for this principal",
                          {"Retry-After": "5"})
        self._streams[owner] = self._streams.get(owner, 0) + 1
        try:
            return await self._stream(request, ch)
        finally:
            n = self._streams.pop(owner, 1) - 1
            if n > 0:
                self._streams[owner] = n

    async def _stream(self, request: web.Request, ch: _Channel) -> web.StreamResponse:
        """The session's GET stream, until superseded, ended, stalled or too old
        (``stream_max_age``: an unread stream cannot live forever; a reading
        client resumes with ``Last-Event-ID``)."""
        cursor = ch.delivered
        last = request.headers.get("Last-Event-ID")
        if last is not None:
            try:
                cursor = int(last)
            except ValueError:
                cursor = 0
        ch.gen += 1
        gen = ch.gen
        ch.wake.set()  # a previous stream of this session sees it is superseded
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        await resp.prepare(request)
        lim = self.limits
        ends = time.monotonic() + lim.stream_max_age
        ch.streams += 1
        try:
            await resp.write(b": stream open\n\n")
            while ch.session is not None and not ch.session.closed and gen == ch.gen:
                left = ends - time.monotonic()
                if left <= 0:
                    break
                batch = ch.pending(cursor)
                if batch:
                    data = b"".join(_sse_event(i, d) for i, d in batch)
                    async with asyncio.timeout(lim.write_timeout):
                        await resp.write(data)
                    cursor = batch[-1][0]
                    if cursor > ch.delivered:
                        ch.delivered = cursor
                    continue
                ch.wake.clear()
                try:
                    async with asyncio.timeout(min(lim.keepalive, left)):
                        await ch.wake.wait()
                except TimeoutError:
                    async with asyncio.timeout(lim.write_timeout):
                        await resp.write(b": keepalive\n\n")
        except (ConnectionError, TimeoutError, RuntimeError):
            pass  # the client went away or stalled; its session stays resumable
        finally:
            ch.streams -= 1
            if ch.session is not None:
                ch.session.last_active = time.monotonic()
        return resp

    # ------------------------------------------------------------ DELETE
    async def _delete(self, request: web.Request) -> web.StreamResponse:
        denied = self._guard(request)
        if denied is not None:
            return denied
        ch, err = self._session(request)
        if ch is None:
            return err  # type: ignore[return-value]
        self._end(ch, "deleted")
        return web.Response(status=200)

    # ---------------------------------------------------------- sessions
    def _end(self, ch: _Channel, why: str) -> None:
        session = ch.session
        if session is None:
            return
        self.channels.pop(session.id, None)
        n = self._per_client.get(ch.client, 0) - 1
        if n > 0:
            self._per_client[ch.client] = n
        else:
            self._per_client.pop(ch.client, None)
        session.close()
        ch.wake.set()
        _log.info("mcp.serve.session.end", session=session.id[:8], reason=why)

    def close_all(self) -> None:
        for ch in list(self.channels.values()):
            self._end(ch, "shutdown")
        self._stopping = True  # listen streams end with their result
        for wake in self._listen_wake.values():
            wake.set()

    def reap(self, now: float | None = None) -> int:
        """End sessions idle (no request, no open stream) beyond the timeout."""
        now = time.monotonic() if now is None else now
        limit = self.limits.idle_timeout
        idle = [ch for ch in self.channels.values() if ch.streams == 0 and ch.session is not None
                and now - ch.session.last_active > limit]
        for ch in idle:
            self._end(ch, "idle")
        return len(idle)

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
    :func:`agentd.mcp.auth.server_ssl_context` (mTLS when it requires client
    certificates); ``bearer`` enables the bearer check.  ``mount(server)`` adds
    routes to ``server.app`` before it starts (the ``/metrics`` and probes of
    ``agentd.obs.http``, guarded by ``server._guard``).
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
