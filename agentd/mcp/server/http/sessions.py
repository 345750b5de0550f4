"""The served endpoint's 2025-11-25 sessions: minted, looked up, streamed, ended.

:class:`Sessions` owns every live session of one listener: ``initialize``
(without a session) mints ``Mcp-Session-Id`` (``secrets.token_urlsafe``) within
the per-principal (``429``) and total (``503``) caps; every other message
needs the id (``400`` without, ``404`` for an unknown or ended session).  Each
session has a :class:`SessionStream`, the transport side of it: the bounded SSE
event buffer its unsolicited messages go to and its ``GET`` stream, which
replays from ``Last-Event-ID`` (a fresh ``GET`` gets what no stream has carried
yet), supersedes the previous stream of the session, and ends when it is too
old (``stream_max_age``) or stalls.  ``DELETE`` and the idle reaper end a
session; shutdown ends them all.

A session belongs to the principal that opened it (MCP 2025-11-25, security
best practices: a session id is not a credential, so it is bound to the user).
Every later request of the session -- a POST, the GET stream (which carries
its ``notifications/resources/updated``), the DELETE -- is answered only for
that principal; another principal presenting the id gets the very ``404`` an
unknown id gets (no hint that it exists), logged throttled as
``mcp.serve.refused`` with ``reason=session_principal``.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque

from aiohttp import web

from agentd.log import log
from agentd.log_bridge import throttled
from agentd.mcp.server.handler import Handler, ServerSession, current_principal
from agentd.mcp.server.http.limits import Limits
from agentd.mcp.server.http.responses import JSON, SSE_HEADERS, plain, sse_event
from agentd.wire.jsonrpc import Request

__all__ = ["SessionStream", "Sessions"]

_log = log.bind(component="mcp.http_server")


class SessionStream:
    """The transport side of one session: its SSE event buffer and streams."""

    __slots__ = ("client", "delivered", "events", "gen", "next_id", "open_gets", "session",
                 "wake")

    def __init__(self, client: str, buffer: int) -> None:
        self.client = client
        self.events: deque[tuple[int, bytes]] = deque(maxlen=buffer)
        self.next_id = 0
        self.delivered = 0  # the highest event id some stream has written
        self.gen = 0  # the current GET stream's generation
        self.open_gets = 0  # open GET streams
        self.wake = asyncio.Event()
        self.session: ServerSession | None = None

    def push(self, data: bytes) -> None:
        self.next_id += 1
        self.events.append((self.next_id, data))
        self.wake.set()

    def pending(self, cursor: int) -> list[tuple[int, bytes]]:
        return [e for e in self.events if e[0] > cursor]


class Sessions:
    """Every live 2025-11-25 session of one listener, by id."""

    def __init__(self, handler: Handler, limits: Limits, auth: str) -> None:
        self.handler = handler
        self.limits = limits
        self.auth = auth
        self.live: dict[str, SessionStream] = {}
        self._per_client: dict[str, int] = {}  # live sessions per principal
        self._gets: dict[str, int] = {}  # open GET streams per principal

    def owned(self, sid: str) -> SessionStream | None:
        """Session ``sid`` if this request's principal opened it; else None (unknown)."""
        ss = self.live.get(sid)
        if ss is None:
            return None
        if ss.client != (current_principal.get() or "anonymous"):
            throttled(_log, "warning", "mcp.serve.refused", key="session_principal",
                      reason="session_principal")
            return None
        return ss

    def lookup(self, request: web.Request
               ) -> tuple[SessionStream | None, web.StreamResponse | None]:
        """The request's session, or the answer for a missing (400) or unknown (404) id
        (another principal's session is unknown to this one)."""
        sid = request.headers.get("Mcp-Session-Id")
        if sid is None:
            return None, plain(400, "Bad Request: Mcp-Session-Id header is required")
        ss = self.owned(sid)
        if ss is None:
            return None, plain(404, "Not Found: unknown or ended session")
        return ss, None

    async def initialize(self, request: web.Request, msg: Request) -> web.StreamResponse:
        """``initialize`` without a session: a new session, or the refusal."""
        client = request.remote or "?"
        owner = current_principal.get() or "anonymous"  # caps count per principal
        lim = self.limits
        if self._per_client.get(owner, 0) >= lim.sessions_per_client:
            throttled(_log, "warning", "mcp.serve.limit", key="sessions_per_principal",
                      reason="sessions_per_principal")
            return plain(429, "Too Many Requests: session limit for this principal",
                         {"Retry-After": "60"})
        if len(self.live) >= lim.max_sessions:
            throttled(_log, "warning", "mcp.serve.limit", key="max_sessions",
                      reason="max_sessions")
            return plain(503, "Service Unavailable: session limit", {"Retry-After": "60"})
        sid = secrets.token_urlsafe(32)
        ss = SessionStream(owner, lim.event_buffer)
        session = ServerSession.opening(self.handler, sid, auth=self.auth, client=client,
                                        outbox=ss.push)
        ss.session = session
        out, _ = await session.serve(msg)
        if session.protocol_version is None:  # initialize failed: no session
            return web.Response(body=out, headers=JSON)
        self.live[sid] = ss
        self.handler.hub.add(session)
        self._per_client[owner] = self._per_client.get(owner, 0) + 1
        return web.Response(body=out, headers={"Content-Type": "application/json",
                                               "Mcp-Session-Id": sid})

    # --------------------------------------------------------------- GET
    async def get(self, request: web.Request) -> web.StreamResponse:
        """``GET``: the session's SSE stream, within the per-principal stream cap."""
        ss, err = self.lookup(request)
        if ss is None:
            return err  # type: ignore[return-value]
        lim = self.limits
        owner = current_principal.get() or "anonymous"
        if self._gets.get(owner, 0) >= lim.streams_per_principal:
            throttled(_log, "warning", "mcp.serve.limit", key="streams_per_principal",
                      reason="streams_per_principal")
            return plain(429, "Too Many Requests: stream limit for this principal",
                         {"Retry-After": "5"})
        self._gets[owner] = self._gets.get(owner, 0) + 1
        try:
            return await self._stream(request, ss)
        finally:
            n = self._gets.pop(owner, 1) - 1
            if n > 0:
                self._gets[owner] = n

    async def _stream(self, request: web.Request, ss: SessionStream) -> web.StreamResponse:
        """The session's GET stream, until superseded, ended, stalled or too old
        (``stream_max_age``: an unread stream cannot live forever; a reading
        client resumes with ``Last-Event-ID``)."""
        cursor = ss.delivered
        last = request.headers.get("Last-Event-ID")
        if last is not None:
            try:
                cursor = int(last)
            except ValueError:
                cursor = 0
        ss.gen += 1
        gen = ss.gen
        ss.wake.set()  # a previous stream of this session sees it is superseded
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        lim = self.limits
        ends = time.monotonic() + lim.stream_max_age
        ss.open_gets += 1
        try:
            await resp.write(b": stream open\n\n")
            while ss.session is not None and not ss.session.closed and gen == ss.gen:
                left = ends - time.monotonic()
                if left <= 0:
                    break
                batch = ss.pending(cursor)
                if batch:
                    data = b"".join(sse_event(i, d) for i, d in batch)
                    async with asyncio.timeout(lim.write_timeout):
                        await resp.write(data)
                    cursor = batch[-1][0]
                    if cursor > ss.delivered:
                        ss.delivered = cursor
                    continue
                ss.wake.clear()
                try:
                    async with asyncio.timeout(min(lim.keepalive, left)):
                        await ss.wake.wait()
                except TimeoutError:
                    async with asyncio.timeout(lim.write_timeout):
                        await resp.write(b": keepalive\n\n")
        except (ConnectionError, TimeoutError, RuntimeError):
            pass  # the client went away or stalled; its session stays resumable
        finally:
            ss.open_gets -= 1
            if ss.session is not None:
                ss.session.last_active = time.monotonic()
        return resp

    # ------------------------------------------------------------ DELETE
    def delete(self, request: web.Request) -> web.StreamResponse:
        ss, err = self.lookup(request)
        if ss is None:
            return err  # type: ignore[return-value]
        self.end(ss, "deleted")
        return web.Response(status=200)

    # ------------------------------------------------------------ ending
    def end(self, ss: SessionStream, why: str) -> None:
        session = ss.session
        if session is None:
            return
        self.live.pop(session.id, None)
        n = self._per_client.get(ss.client, 0) - 1
        if n > 0:
            self._per_client[ss.client] = n
        else:
            self._per_client.pop(ss.client, None)
        session.close()
        ss.wake.set()
        _log.info("mcp.serve.session.end", session=session.log_id, reason=why)

    def close_all(self) -> None:
        for ss in list(self.live.values()):
            self.end(ss, "shutdown")

    def reap(self, now: float | None = None) -> int:
        """End sessions idle (no request, no open stream) beyond the timeout."""
        now = time.monotonic() if now is None else now
        limit = self.limits.idle_timeout
        idle = [ss for ss in self.live.values() if ss.open_gets == 0 and ss.session is not None
                and now - ss.session.last_active > limit]
        for ss in idle:
            self.end(ss, "idle")
        return len(idle)
