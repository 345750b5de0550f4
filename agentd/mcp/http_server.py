"""The Streamable HTTP MCP server engine (MCP 2025-11-25 transport) on aiohttp.web.

One endpoint path (``/mcp``) serves a :class:`~agentd.mcp.server_session.Handler`:

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
* ``Host`` and ``Origin`` are checked on every request (DNS rebinding): a
  loopback listener only accepts loopback names; an ``Origin`` must be a
  loopback origin there, and elsewhere the request's own host or an allowed
  origin.  Otherwise ``403``.
* Auth (``agentd.mcp.auth``): mTLS happens in the TLS handshake; a bearer
  mismatch is ``401`` + ``WWW-Authenticate: Bearer`` and nothing else.
* Limits (:class:`Limits`, defaults in docs/server.md): body size (``413``),
  header line/field size and count (``400``), sessions per client (``429``),
  sessions in total (``503``), idle session timeout, SSE buffer and stalled
  stream write timeout.

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
from collections.abc import AsyncIterator
from typing import Any, Final
from urllib.parse import urlsplit

import msgspec
from aiohttp import web

from agentd.config import is_loopback_host
from agentd.log import log, register_secret
from agentd.mcp.auth import UNAUTHORIZED_HEADERS, BearerAuth, auth_label
from agentd.mcp.server_session import (
    ORIGIN_MANAGEMENT,
    SERVED_METHODS,
    Handler,
    ServerSession,
)
from agentd.wire import codec
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import METHOD_NOT_FOUND, ProtocolError, Request

__all__ = ["HttpServer", "Limits", "Runner", "serve"]

_log = log.bind(component="mcp.http_server")

MIB: Final = 1024 * 1024


class Limits(msgspec.Struct, frozen=True):
    """Bounds of the served endpoint (documented in docs/server.md)."""

    max_body: int = 4 * MIB  # bytes of one POST body -> 413 beyond
    max_line: int = 8190  # bytes of the request line / one header line -> 400 beyond
    max_field: int = 8190  # bytes of one header field
    max_headers: int = 64  # number of header fields
    sessions_per_client: int = 1024  # live sessions per client address -> 429 beyond
    max_sessions: int = 8192  # live sessions in total -> 503 beyond
    idle_timeout: float = 900.0  # s without a request or an open stream -> session ended
    event_buffer: int = 512  # SSE events kept per session for Last-Event-ID replay
    keepalive: float = 15.0  # s between SSE comment pings on an idle stream
    write_timeout: float = 30.0  # s a stalled SSE write may block before the stream is dropped
    shutdown_timeout: float = 2.0  # s open streams get on stop()


_JSON: Final = {"Content-Type": "application/json"}
_SSE_HEADERS: Final = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                       "X-Accel-Buffering": "no"}
_SUPPORTED: Final = frozenset(t.SUPPORTED_PROTOCOL_VERSIONS)
_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})


def _plain(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=text, headers=headers)


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

    def __init__(self, handler: Handler, *, limits: Limits | None = None,
                 bearer: str | None = None, mtls: bool = False, loopback: bool = True,
                 allowed_hosts: set[str] | frozenset[str] | None = None,
                 allowed_origins: set[str] | frozenset[str] | None = None,
                 path: str = "/mcp") -> None:
        self.handler = handler
        self.hub = handler.hub
        self.limits = limits or Limits()
        self.path = path
        self.loopback = loopback
        self._bearer = BearerAuth(bearer) if bearer else None
        self.auth = auth_label(mtls=mtls, bearer=bool(bearer))
        hosts = {h.lower().strip("[]") for h in (allowed_hosts or ())}
        if loopback:
            hosts |= _LOOPBACK_NAMES
        self._allowed_hosts: frozenset[str] | None = frozenset(hosts) if hosts else None
        self._allowed_origins = frozenset(o.lower().rstrip("/") for o in (allowed_origins or ()))
        self._host_ok: dict[str, bool] = {}
        self.channels: dict[str, _Channel] = {}
        self._per_client: dict[str, int] = {}
        self.app = web.Application(client_max_size=self.limits.max_body)
        self.app.router.add_route("POST", path, self._post)
        self.app.router.add_route("GET", path, self._get)
        self.app.router.add_route("DELETE", path, self._delete)
        self.app.cleanup_ctx.append(self._reaper_ctx)

    # ------------------------------------------------------------ guards
    def _guard(self, request: web.Request) -> web.StreamResponse | None:
        """Host/Origin (403) and bearer (401) checks, for every method."""
        headers = request.headers
        host = headers.get("Host")
        if self._allowed_hosts is not None:
            ok = self._host_ok.get(host) if host is not None else False
            if ok is None:
                ok = _hostname(host) in self._allowed_hosts  # type: ignore[arg-type]
                if len(self._host_ok) >= 256:
                    self._host_ok.clear()
                self._host_ok[host] = ok  # type: ignore[index]
            if not ok:
                _log.warning("mcp.serve.refused", reason="host", method=request.method)
                return _plain(403, "Forbidden")
        origin = headers.get("Origin")
        if origin is not None and not self._origin_ok(origin, host):
            _log.warning("mcp.serve.refused", reason="origin", method=request.method)
            return _plain(403, "Forbidden")
        if self._bearer is not None and not self._bearer.check(headers.get("Authorization")):
            _log.warning("mcp.serve.refused", reason="auth", method=request.method)
            return web.Response(status=401, headers=UNAUTHORIZED_HEADERS)
        version = headers.get("MCP-Protocol-Version")
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
        ctype = request.headers.get("Content-Type", "")
        if not ctype.startswith("application/json"):
            return _plain(415, "Unsupported Media Type: expected application/json")
        accept = request.headers.get("Accept", "")
        accept_json = not accept or "application/json" in accept or "*/*" in accept
        accept_sse = "text/event-stream" in accept
        if not (accept_json or accept_sse):
            return _plain(406, "Not Acceptable: accept application/json or text/event-stream")
        length = request.content_length
        if length is not None and length > self.limits.max_body:
            _log.warning("mcp.serve.refused", reason="body_size", size=length)
            return _plain(413, "Payload Too Large")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            _log.warning("mcp.serve.refused", reason="body_size")
            return _plain(413, "Payload Too Large")
        try:
            msg = codec.decode(body)
        except ProtocolError as exc:
            return _rpc_error(400, exc)

        sid = request.headers.get("Mcp-Session-Id")
        is_request = type(msg) is Request
        if sid is None:
            if is_request and msg.method == t.INITIALIZE:
                return await self._initialize(request, msg)
            if is_request and msg.method not in SERVED_METHODS:
                return _rpc_error(200, ProtocolError(METHOD_NOT_FOUND,
                                                     f"Method not found: {msg.method}", id=msg.id))
            return _plain(400, "Bad Request: Mcp-Session-Id header is required")
        ch = self.channels.get(sid)
        if ch is None:
            return _plain(404, "Not Found: unknown or ended session")
        version = request.headers.get("MCP-Protocol-Version")
        if version is not None and version not in _SUPPORTED:
            return _plain(400, "Bad Request: unsupported MCP-Protocol-Version")
        session = ch.session
        assert session is not None
        if not is_request:
            await session.receive(msg)
            return web.Response(status=202)
        session.last_active = time.monotonic()
        stream = _PostStream(request) if accept_sse else None
        out = await session.request(msg, stream.emit if stream is not None else None)
        if stream is not None and (stream.resp is not None or not accept_json):
            return await stream.finish(out)
        return web.Response(body=out, headers=_JSON)

    async def _initialize(self, request: web.Request, msg: Request) -> web.StreamResponse:
        client = request.remote or "?"
        lim = self.limits
        if self._per_client.get(client, 0) >= lim.sessions_per_client:
            _log.warning("mcp.serve.refused", reason="sessions_per_client")
            return _plain(429, "Too Many Requests: session limit for this client",
                          {"Retry-After": "60"})
        if len(self.channels) >= lim.max_sessions:
            _log.warning("mcp.serve.refused", reason="max_sessions")
            return _plain(503, "Service Unavailable: session limit", {"Retry-After": "60"})
        sid = secrets.token_urlsafe(32)
        ch = _Channel(client, lim.event_buffer)
        session = ServerSession(self.handler, self.hub, sid, origin=ORIGIN_MANAGEMENT,
                                auth=self.auth, client=client, outbox=ch.push)
        ch.session = session
        out = await session.request(msg)
        if session.protocol_version is None:  # initialize failed: no session
            return web.Response(body=out, headers=_JSON)
        self.channels[sid] = ch
        self.hub.add(session)
        self._per_client[client] = self._per_client.get(client, 0) + 1
        return web.Response(body=out, headers={"Content-Type": "application/json",
                                               "Mcp-Session-Id": sid})

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
        ch.streams += 1
        try:
            await resp.write(b": stream open\n\n")
            while ch.session is not None and not ch.session.closed and gen == ch.gen:
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
                    async with asyncio.timeout(lim.keepalive):
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
                allowed_origins: set[str] | None = None, path: str = "/mcp") -> Runner:
    """Serve ``handler`` over Streamable HTTP(S) at ``path``; returns a :class:`Runner`.

    ``port=0`` picks a free port (``runner.port``).  ``ssl_context`` from
    :func:`agentd.mcp.auth.server_ssl_context` (mTLS when it requires client
    certificates); ``bearer`` enables the bearer check.
    """
    limits = limits or Limits()
    register_secret(bearer)
    mtls = ssl_context is not None and ssl_context.verify_mode == ssl.CERT_REQUIRED
    loopback = is_loopback_host(host)
    if not loopback and not mtls and not bearer:
        raise ValueError(f"refusing an unauthenticated non-loopback listener on {host}")
    server = HttpServer(handler, limits=limits, bearer=bearer, mtls=mtls, loopback=loopback,
                        allowed_hosts=allowed_hosts, allowed_origins=allowed_origins, path=path)
    app_runner = web.AppRunner(
        server.app, access_log=None, handle_signals=False,
        shutdown_timeout=limits.shutdown_timeout,
        max_line_size=limits.max_line, max_field_size=limits.max_field,
        max_headers=limits.max_headers)
    await app_runner.setup()
    site = web.TCPSite(app_runner, host, port, ssl_context=ssl_context, backlog=1024,
                       reuse_address=True)
    try:
        await site.start()
    except BaseException:
        await app_runner.cleanup()
        raise
    bound = port
    srv = site._server  # the asyncio Server: its sockets tell the bound port
    if srv is not None and getattr(srv, "sockets", None):
        bound = srv.sockets[0].getsockname()[1]
    scheme = "https" if ssl_context is not None else "http"
    runner = Runner(server, app_runner, host, bound, scheme)
    if server.auth == "none":
        _log.warning("mcp.serve.unauthenticated", url=runner.url,
                     note="loopback http without auth: for local development only")
    _log.info("mcp.serve.listening", url=runner.url, auth=server.auth)
    return runner
