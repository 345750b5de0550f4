"""Bounds on the served endpoint below the request handlers: connections and heads.

aiohttp's ``RequestHandler`` parses whatever a socket delivers: a read is up
to 256 KiB, and a parser that has failed is fed every later read of the same
connection (each failure copies the chunk into its exception message).  Its
keep-alive timer only fires for a handler that is idle, and nothing caps the
number of connections, so idle sockets run the process out of descriptors.
:class:`Gate` sits between the event loop and aiohttp -- it is the protocol
factory handed to ``loop.create_server`` and wraps each ``RequestHandler`` --
and enforces, before any request reaches auth:

* **the first request head** of a connection is scanned for its end
  (``CRLF CRLF``) as it arrives; more than ``Limits.max_head`` bytes without
  it is answered ``431`` and the connection closed: those bytes never reach
  the parser;
* **a header-read timeout**: a connection whose first request head has not
  been parsed within ``Limits.header_timeout`` is closed (later requests are
  bounded by aiohttp's keep-alive timer, ``Limits.keepalive_timeout``, which
  also covers a half-sent next head);
* **a connection cap** (``Limits.max_connections``, by default half the
  descriptor soft limit, at most 4096) with its own small budget for
  connections that have not yet made an authenticated request
  (``Limits.max_unauth_connections``): a new connection beyond that budget
  evicts the oldest unauthenticated one that has had a quarter of the header
  timeout to send its head, so idle or half-sent sockets can neither exhaust
  descriptors nor lock out a client that authenticates (aiohttp's handler and
  its task are only made when a connection's first bytes arrive);
* **memory goes back to the system**: glibc's malloc raises its mmap
  threshold to the largest block freed, after which 256 KiB read buffers come
  from the heap and stay resident.  :func:`return_memory` pins the threshold
  and trims the heap after a burst of rejected connections.

Over https the listener runs its own accept loop (:class:`_TlsServer`) so a
refused or abandoned TLS handshake is one throttled ``mcp.serve.tls_refused``
line naming the peer's address and the reason; the handshake is bounded by
``Limits.header_timeout``.

A cap or timeout being hit is one throttled ``mcp.serve.limit`` line.  Caps
on sessions and streams count per principal (``agentd.mcp.server.auth.principal``)
and live in ``agentd.mcp.server.http.server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import resource
import socket
import ssl
import sys
from collections.abc import Coroutine
from typing import Any, Final

import msgspec
from aiohttp import web

from agentd.log import log
from agentd.log_bridge import throttled

MIB: Final = 1024 * 1024
ACCEPT_RETRY: Final = 1.0  # s the TLS accept loop waits after a failed accept (as asyncio's)


class Limits(msgspec.Struct, frozen=True):
    """Bounds of the served endpoint (documented in docs/server.md)."""

    max_body: int = 4 * MIB  # bytes of one POST body -> 413 beyond
    max_line: int = 8190  # bytes of the request line / one header line -> 400 beyond
    max_field: int = 8190  # bytes of one header field
    max_headers: int = 64  # number of header fields
    sessions_per_client: int = 1024  # live sessions per principal (not address) -> 429 beyond
    max_sessions: int = 8192  # live sessions in total -> 503 beyond
    idle_timeout: float = 900.0  # s without a request or an open stream -> session ended
    event_buffer: int = 512  # SSE events kept per session for Last-Event-ID replay
    keepalive: float = 15.0  # s between SSE comment pings on an idle stream
    write_timeout: float = 30.0  # s a stalled SSE write may block before the stream is dropped
    shutdown_timeout: float = 2.0  # s open streams get on stop()
    listen_per_client: int = 32  # open 2026-07-28 listen streams per principal -> 429
    max_listens: int = 4096  # open listen streams in total -> 503 beyond
    listen_buffer: int = 256  # undelivered frames one listen stream may queue before it is ended
    # connections (agentd.mcp.server.http.limits): enforced before any request reaches auth
    max_head: int = 32 * 1024  # bytes of a connection's first request head -> 431 and closed
    header_timeout: float = 10.0  # s to receive a new connection's first request head (and TLS)
    keepalive_timeout: float = 15.0  # s an idle keep-alive connection (or half-sent head) lives
    body_timeout: float = 30.0  # s to read one request body -> 408 and closed
    max_connections: int = 0  # open connections; 0: half the fd soft limit, at most 4096
    max_unauth_connections: int = 256  # connections before their first authenticated request
    streams_per_principal: int = 64  # open GET SSE streams per principal -> 429 beyond
    stream_max_age: float = 300.0  # s a GET stream stays open; the client resumes (Last-Event-ID)


LIMITS_ENV: Final = "AGENTD_SERVE_LIMITS"


def env_limits() -> Limits:
    """The defaults, with any fields the operator set in ``AGENTD_SERVE_LIMITS``
    (a JSON object, e.g. ``{"body_timeout": 10}``); a bad value is a ValueError."""
    raw = os.environ.get(LIMITS_ENV)
    if not raw:
        return Limits()
    try:
        fields = msgspec.json.decode(raw, type=dict[str, Any])
        unknown = sorted(set(fields) - set(Limits.__struct_fields__))
        if unknown:
            raise ValueError(f"{LIMITS_ENV}: unknown field(s) {', '.join(unknown)}")
        return msgspec.convert(fields, Limits)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"{LIMITS_ENV}: {exc}") from None



__all__ = ["Gate", "GatedSite", "default_max_connections", "return_memory"]

_log = log.bind(component="mcp.http_server")

_HEAD_END: Final = b"\r\n\r\n"
_TOO_LARGE: Final = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                     b"Content-Type: text/plain\r\nContent-Length: 36\r\nConnection: close\r\n\r\n"
                     b"Request Header Fields Too Large\r\n\r\n")
_CONN_CAP_HARD: Final = 4096


def default_max_connections() -> int:
    """Half the descriptor soft limit, at most 4096: the rest is headroom for
    children's pipes, spawns and the outgoing MCP connections."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return _CONN_CAP_HARD
    return max(16, min(_CONN_CAP_HARD, soft // 2))


# ---------------------------------------------------------------- memory
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_libc: Any = None


def _glibc() -> Any:
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                lib = ctypes.CDLL("libc.so.6", use_errno=True)
                _ = lib.mallopt, lib.malloc_trim
                _libc = lib
    return _libc


def return_memory(*, pin: bool = False) -> None:
    """``pin``: fix malloc's mmap/trim thresholds (once per process, before
    serving) so large buffers are mmapped and unmapped on free; otherwise
    ``malloc_trim(0)``: give the heap's free pages back now."""
    lib = _glibc()
    if not lib:
        return
    if pin:
        lib.mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
        lib.mallopt(_M_TRIM_THRESHOLD, 1024 * 1024)
    else:
        lib.malloc_trim(0)


# ------------------------------------------------------------ connections
class _Conn(asyncio.Protocol):
    """One accepted connection: the gate's bookkeeping around aiohttp's handler."""

    __slots__ = ("_dead", "_gate", "_head", "_inner", "_tail", "_timer", "authed", "born",
                 "headed", "transport")

    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        self._inner: Any = None  # aiohttp's RequestHandler, made at the first bytes
        self.transport: asyncio.Transport | None = None
        self.headed = False  # the first request head is complete
        self.authed = False  # a request passed auth
        self._head = 0  # bytes of the first head seen so far (while scanning)
        self._tail = b""  # the last bytes of the scanned head (a CRLFCRLF across reads)
        self._timer: asyncio.TimerHandle | None = None
        self._dead = False
        self.born = 0.0

    # asyncio.Protocol -----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        gate = self._gate
        self.born = gate.loop.time()
        if not gate.admit(self):
            self._dead = True
            transport.abort()  # type: ignore[attr-defined]
            return
        self._timer = gate.loop.call_later(gate.limits.header_timeout, self._head_timeout)

    def data_received(self, data: bytes) -> None:
        if self._dead:
            return
        if self._head >= 0 and not self._scan(data):
            return
        inner = self._inner
        if inner is None:  # aiohttp's handler (and its task) only once bytes arrive
            inner = self._inner = self._gate.server()
            assert self.transport is not None  # connection_made came first
            inner.connection_made(self.transport)
        inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._dead or self._inner is None:
            return None
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._gate.forget(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        inner, self._inner = self._inner, None
        self._dead = True
        if inner is not None:
            inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    # gate ---------------------------------------------------------------
    def _scan(self, data: bytes) -> bool:
        """Track the first request head; False when it is over the limit (431 sent)."""
        limit = self._gate.limits.max_head
        probe = self._tail + data[:limit + 4] if self._tail else data[:limit + 4]
        end = probe.find(_HEAD_END)
        if end >= 0:
            size = self._head - len(self._tail) + end + 4
            if size <= limit:
                self._head = -1  # the head is complete: stop scanning this connection
                self._tail = b""
                self.saw_request()  # and its header timer has done its work
                return True
        else:
            size = self._head + len(data)
            if size <= limit:
                self._head = size
                self._tail = probe[-3:]
                return True
        self._gate.over_limit("head_size", size=size)
        self.kill(_TOO_LARGE)
        return False

    def _head_timeout(self) -> None:
        self._timer = None
        if not self.headed and not self._dead:
            self._gate.over_limit("header_timeout")
            self.kill()

    def saw_request(self) -> None:
        self.headed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def kill(self, reply: bytes = b"") -> None:
        """Close now, answering ``reply`` first when given; nothing more is parsed."""
        self._dead = True
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if reply:
            with contextlib.suppress(Exception):
                transport.write(reply)
            transport.close()
        else:
            transport.abort()


class Gate:
    """The protocol factory for ``loop.create_server``: admits, caps and times
    out connections, then hands each to aiohttp's ``Server`` (``server()``)."""

    def __init__(self, server: web.Server, limits: Limits) -> None:
        self.server = server
        self.limits = limits
        self.loop = asyncio.get_running_loop()
        self.max_connections = limits.max_connections or default_max_connections()
        self.live: dict[asyncio.BaseTransport, _Conn] = {}
        self.unauth: dict[_Conn, None] = {}  # insertion order = age: the oldest first
        self.rejected = 0
        self._trim: asyncio.TimerHandle | None = None
        self._handshakes: set[asyncio.Task[None]] = set()  # TLS upgrades in flight
        return_memory(pin=True)

    def __call__(self) -> _Conn:
        return _Conn(self)

    # admission ------------------------------------------------------------
    def admit(self, conn: _Conn) -> bool:
        """Over the total cap the oldest unauthenticated connection makes room
        (else the new one is refused); over the unauthenticated budget, the
        oldest one that has had ``header_timeout / 4`` to send its head does
        (a burst of new clients that are still connecting is let in)."""
        lim = self.limits
        if len(self.live) >= self.max_connections:
            if not self._evict_oldest("connections"):
                self.over_limit("connections", live=len(self.live))
                return False
        elif len(self.unauth) >= lim.max_unauth_connections:
            self._evict_oldest("unauthenticated_connections",
                               older=conn.born - lim.header_timeout / 4)
        assert conn.transport is not None
        self.live[conn.transport] = conn
        self.unauth[conn] = None
        return True

    def _evict_oldest(self, reason: str, older: float | None = None) -> bool:
        victim = next(iter(self.unauth), None)
        if victim is None or (older is not None and victim.born > older):
            return False
        self.over_limit(reason, live=len(self.live))
        self.forget(victim)
        victim.kill()
        return True

    def forget(self, conn: _Conn) -> None:
        if conn.transport is not None:
            self.live.pop(conn.transport, None)
        self.unauth.pop(conn, None)

    def over_limit(self, reason: str, **fields: Any) -> None:
        """One throttled line per reason; a heap trim soon after a burst."""
        self.rejected += 1
        throttled(_log, "warning", "mcp.serve.limit", key=reason, reason=reason, **fields)
        if self._trim is None:
            self._trim = self.loop.call_later(1.0, self._trim_now)

    def _trim_now(self) -> None:
        self._trim = None
        return_memory()

    # what the app learns about a request ------------------------------------
    def conn_of(self, request: web.BaseRequest) -> _Conn | None:
        transport = request.transport
        return self.live.get(transport) if transport is not None else None

    def authenticated(self, request: web.BaseRequest) -> None:
        conn = self.conn_of(request)
        if conn is not None and not conn.authed:
            conn.authed = True
            self.unauth.pop(conn, None)

    def handshake(self, upgrade: Coroutine[Any, Any, None]) -> None:
        """Run one connection's TLS handshake; the gate holds it until it ends."""
        task = self.loop.create_task(upgrade)
        self._handshakes.add(task)
        task.add_done_callback(self._handshake_done)

    def _handshake_done(self, task: asyncio.Task[None]) -> None:
        self._handshakes.discard(task)
        if not task.cancelled() and task.exception() is not None:  # a bug: the peer's are logged
            exc = task.exception()
            _log.error("mcp.serve.internal_error", method="tls_accept",
                       error=type(exc).__name__, detail=str(exc)[:500])

    def close(self) -> None:
        if self._trim is not None:
            self._trim.cancel()
            self._trim = None
        for task in list(self._handshakes):
            task.cancel()


class _TlsServer(asyncio.AbstractServer):
    """The TLS listener: its own accept loop, so a refused handshake is seen.

    The loop's server-side TLS drops a refused handshake silently (asyncio and
    uvloop log it in debug mode only), so a pool peer without the pool CA's
    certificate, or a client speaking the wrong protocol, left no trace.  Here
    each accepted socket is wrapped by ``loop.connect_accepted_socket`` -- the
    same TLS machinery, context and handshake bound, the gate's protocol made
    once the handshake completed, as before -- and a handshake that fails is one
    throttled ``mcp.serve.tls_refused`` line (per reason) naming the peer's
    address and OpenSSL's reason (never certificate content); a peer that hangs
    up or stalls mid-handshake is the same line at ``info``."""

    def __init__(self, sockets: list[socket.socket], gate: Gate, ctx: ssl.SSLContext) -> None:
        self._sockets = sockets
        self._gate = gate
        self._ctx = ctx
        self._accepting = [gate.loop.create_task(self._accept(s)) for s in sockets]

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._gate.loop

    def is_serving(self) -> bool:
        return any(not t.done() for t in self._accepting)

    def close(self) -> None:
        """Stop accepting; each accept loop closes its socket as it ends (after the
        loop has dropped its interest in the descriptor, so it is never reused
        under a pending accept)."""
        for task in self._accepting:
            task.cancel()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._accepting, return_exceptions=True)

    async def start_serving(self) -> None:
        """Serving from construction (aiohttp never defers it)."""

    async def serve_forever(self) -> None:
        await self.wait_closed()

    async def _accept(self, sock: socket.socket) -> None:
        loop = self._gate.loop
        try:
            while True:
                try:
                    conn, addr = await loop.sock_accept(sock)
                except OSError as exc:  # out of descriptors, ...: asyncio's server waits too
                    throttled(_log, "warning", "mcp.serve.limit", key="accept",
                              reason="accept", error=type(exc).__name__)
                    await asyncio.sleep(ACCEPT_RETRY)
                    continue
                self._gate.handshake(self._handshake(conn, addr))
        finally:
            sock.close()

    async def _handshake(self, conn: socket.socket, addr: Any) -> None:
        gate = self._gate
        try:
            await gate.loop.connect_accepted_socket(
                gate, conn, ssl=self._ctx, ssl_handshake_timeout=gate.limits.header_timeout)
        except (OSError, TimeoutError) as exc:  # the peer's handshake failed
            conn.close()
            peer = _address(addr)
            refused = isinstance(exc, ssl.SSLError)  # a TLS refusal, not a hang-up
            reason = _tls_reason(exc)  # the throttle's key: a small set, unlike addresses
            throttled(_log, "warning" if refused else "info", "mcp.serve.tls_refused",
                      key=reason, peer=peer, reason=reason)


async def _listening(host: str | None, port: int, backlog: int,
                     reuse_port: bool | None) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for ``host:port``, as ``create_server``
    binds them (every address the host resolves to; IPv6 sockets v6-only)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    out: list[socket.socket] = []
    try:
        for family, kind, proto, _, addr in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in out:
            sock.close()
        raise
    return out


def _address(peername: Any) -> str:
    """``host:port`` of a socket's peer (``?`` when the platform does not say)."""
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"{peername[0]}:{peername[1]}"
    return "?"


def _tls_reason(exc: BaseException) -> str:
    """OpenSSL's reason code (``CERTIFICATE_VERIFY_FAILED``, ...) or the error's type."""
    reason = exc.reason if isinstance(exc, ssl.SSLError) else None
    return str(reason)[:80] if reason else type(exc).__name__


class GatedSite(web.TCPSite):
    """``web.TCPSite`` whose protocol factory is a :class:`Gate` (and whose TLS
    handshake, run by :class:`_TlsServer`, is bounded by the header timeout)."""

    __slots__ = ("gate", "limits")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, limits: Limits,
                 **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.limits = limits
        self.gate: Gate | None = None

    async def start(self) -> None:
        self._runner._reg_site(self)  # BaseSite.start: what TCPSite.start does first
        server = self._runner.server
        assert server is not None
        gate = self.gate = Gate(server, self.limits)
        sockets: tuple[Any, ...]
        if self._ssl_context is not None:  # its own accept loop: refusals are logged
            tls = _TlsServer(await _listening(self._host, self._port, self._backlog,
                                              self._reuse_port), gate, self._ssl_context)
            self._server, sockets = tls, tls.sockets
        else:
            plain = await asyncio.get_running_loop().create_server(
                gate, self._host, self._port, backlog=self._backlog,
                reuse_address=self._reuse_address, reuse_port=self._reuse_port)
            self._server, sockets = plain, plain.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

    async def stop(self) -> None:
        if self.gate is not None:
            self.gate.close()
        await super().stop()
