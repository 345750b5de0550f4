"""The HTTP+SSE client transport of MCP 2024-11-05, for servers declared with it.

A server declared with ``transport = "sse"`` (the config file's ``mcp_servers``,
an ACP ``sse`` entry) is spoken to the old way: a ``GET`` of the declared URL
opens an SSE stream whose first event, ``endpoint``, names the URL to POST to
(resolved, and refused unless it is on the declared URL's origin:
:mod:`agentd.mcp.client.rules.sse_endpoint`); every JSON-RPC message is then
POSTed there (the server says 202) and every answer, request and notification
of the server comes on the stream as a ``message`` event.  The stream IS the
session: it is opened by the first send after a fresh start (``initialize``),
and when it ends the session is gone -- the requests waiting on it fail with
:class:`TransportError` and :meth:`listen` raises, so the client's fault
policy reconnects (a new stream, a new ``initialize``).

:class:`LegacySSETransport` has the face :class:`~agentd.mcp.client.connection.Connection`
and the client's parts use of :class:`~agentd.mcp.client.transport.StreamableHTTPTransport`,
and is composed of one: that transport's HTTP session, TLS, auth hook, header
set and bounded POST do the HTTP here too (the POST aimed at the endpoint),
and its GET opens the stream.  The same bounds hold: an SSE event past
``sse_event_bytes`` drops the stream (the fault names the bound), a POST's
answer body is read up to ``mcp_max_bytes``, and every message goes to the
session's guarded decoding.  The stream's reader is a task of the client's
own group (``spawn``), cancelled when the stream is forgotten or closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
from yarl import URL

from agentd.mcp.client.answered import Answered
from agentd.mcp.client.rules.faults import TransportError
from agentd.mcp.client.rules.sse_endpoint import endpoint_url
from agentd.mcp.client.transport import OnMessage, StreamableHTTPTransport
from agentd_native import SSEEventTooLarge, SSEParser

__all__ = ["LegacySSETransport"]

# the client's owned-task starter (MCPClient._spawn): None once the client is closing
Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any] | None"]


class _Stream:
    """One open SSE stream (one session): its endpoint, its reader, how it ended."""

    __slots__ = ("ended", "endpoint", "lost", "task", "waiters")

    def __init__(self, endpoint: URL) -> None:
        self.endpoint = endpoint
        self.ended = asyncio.Event()
        self.lost: TransportError | None = None
        self.task: asyncio.Task[Any] | None = None
        self.waiters: set[asyncio.Event] = set()  # the sends waiting for an answer on it

    def end(self, lost: TransportError) -> None:
        if self.lost is None:
            self.lost = lost
        self.ended.set()
        for waiter in self.waiters:
            waiter.set()

    def gone(self) -> TransportError:
        """The fault of a send on an ended stream (unsent: safe to send again)."""
        return TransportError(f"the SSE stream is gone ({self.lost})", sent=False)


class LegacySSETransport:
    """HTTP+SSE (2024-11-05) for one MCP server; see the module docstring."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, *,
                 on_message: OnMessage, spawn: Spawn, **http: Any) -> None:
        self.url = url
        self._url = URL(url)
        self.on_message = on_message
        self._spawn = spawn
        self._http = StreamableHTTPTransport(url, headers, on_message=on_message, **http)
        self.bounds = self._http.bounds
        self.get_known = asyncio.Event()  # set while `get_offered` is True or False
        self.get_offered: bool | None = None  # True while the stream is open
        self.not_offered = 0
        self.session_id: str | None = None  # the endpoint, while its stream is open
        self.protocol_version: str | None = None
        self._stream: _Stream | None = None
        self._opening = asyncio.Lock()

    # ------------------------------------------------------------ set-up

    async def open(self) -> None:
        await self._http.open()

    async def reopen(self) -> None:
        self.forget_session()
        await self._http.reopen()

    def set_protocol_version(self, version: str) -> None:
        """Kept for the log; 2024-11-05 has no ``MCP-Protocol-Version`` header."""
        self.protocol_version = version

    def forget_session(self) -> None:
        """Drop the stream (and the session with it): the next send opens a new one."""
        st, self._stream = self._stream, None
        self.session_id = None
        self.protocol_version = None
        self.get_offered = None
        self.get_known.clear()
        if st is not None:
            st.end(TransportError("the session was replaced", sent=True))
            if st.task is not None:
                st.task.cancel()

    # ------------------------------------------------------------ the stream

    async def _opened(self) -> _Stream:
        """The open stream, opened now if there is none (its endpoint read)."""
        async with self._opening:
            st = self._stream
            if st is not None and not st.ended.is_set():
                return st
            resp = await self._http.get_stream(None)
            if resp is None:
                raise TransportError(
                    f"{self.url}: no SSE stream (HTTP {self._http.not_offered} on GET): the "
                    "server does not speak the HTTP+SSE transport of 2024-11-05; declare it "
                    "with transport = \"streamable-http\"", sent=False)
            parser = self.bounds.parser()
            try:
                endpoint = await self._endpoint(resp, parser)
            except BaseException:
                parser.close()
                resp.release()
                raise
            st = self._stream = _Stream(endpoint)
            task = self._spawn(self._read(st, resp, parser), "sse-stream")
            if task is None:  # the client is closing
                parser.close()
                resp.release()
                raise TransportError("the client is closing", sent=False)
            st.task = task
            self.session_id = str(endpoint)
            self.get_offered = True
            self.get_known.set()
            return st

    async def _endpoint(self, resp: aiohttp.ClientResponse, parser: SSEParser) -> URL:
        """Read up to the ``endpoint`` event (the stream's first) and resolve it."""
        try:
            while chunk := await resp.content.readany():
                events, too_large = self._feed(parser, chunk)
                for ev in events:
                    if ev.event == "endpoint":
                        return endpoint_url(self._url, ev.data)
                    raise TransportError(
                        f"{self.url}: the SSE stream's first event is not \"endpoint\"; is "
                        "the server's transport really \"sse\"? (else set transport = "
                        "\"streamable-http\")", sent=False)
                if too_large is not None:
                    raise too_large
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as exc:
            raise TransportError(f"{self.url}: the SSE stream was cut before its endpoint "
                                 f"event: {exc or type(exc).__name__}", sent=False) from None
        raise TransportError(f"{self.url}: the SSE stream ended before its endpoint event",
                             sent=False)

    @staticmethod
    def _feed(parser: SSEParser, chunk: bytes) -> tuple[list[Any], TransportError | None]:
        """The chunk's events; past ``sse_event_bytes``, those before the big one
        and the fault that drops the stream (it names the bound)."""
        try:
            return parser.feed(chunk), None
        except SSEEventTooLarge as exc:
            return exc.events, TransportError(
                f"SSE event past {exc.limit} bytes (sse_event_bytes); stream dropped",
                sent=True, limit="sse_event_bytes", size=exc.size)

    async def _read(self, st: _Stream, resp: aiohttp.ClientResponse, parser: SSEParser) -> None:
        """Hand every ``message`` event to ``on_message`` until the stream ends."""
        on_message = self.on_message
        lost = TransportError("the SSE stream ended (with it the HTTP+SSE session)", sent=True)
        try:
            while chunk := await resp.content.readany():
                events, too_large = self._feed(parser, chunk)
                for ev in events:
                    if ev.data and (ev.event == "message" or not ev.event):
                        on_message(ev.data)
                if too_large is not None:
                    lost = too_large
                    break
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as exc:
            lost = TransportError(f"the SSE stream was cut: {exc or type(exc).__name__}",
                                  sent=True)
        finally:
            parser.close()
            resp.release()
            st.end(lost)
            if self._stream is st:  # the session ended with it: a reconnect initializes
                self.session_id = None

    # ------------------------------------------------------------ sending

    async def post(self, body: bytes, answer: Answered | None = None, *,
                   initialize: bool = False, headers: Any = (), resumable: bool = True,
                   error_bodies: bool = False) -> None:
        """POST one message to the endpoint; for a request, wait for its answer
        on the stream (or the stream's end: the fault it ended with).

        ``headers`` (a later revision's per-request headers), ``resumable`` and
        ``error_bodies`` do not apply to this transport; ``initialize`` opens
        the stream first when there is none.
        """
        st = await self._opened() if initialize else self._stream
        if st is None:
            raise TransportError("no SSE stream is open (the session is being replaced)",
                                 sent=False)
        if st.ended.is_set():
            raise st.gone()
        if answer is None:
            await self._http.post(body, None, url=st.endpoint)
            return
        woken = asyncio.Event()
        answer.watch(woken.set)
        st.waiters.add(woken)
        try:
            await self._http.post(body, None, url=st.endpoint)
            if not answer.is_set():
                await woken.wait()
            if not answer.is_set():
                raise st.lost or TransportError("the SSE stream ended", sent=True)
        finally:
            st.waiters.discard(woken)
            answer.watch(None)

    async def listen(self) -> None:
        """Hold until the stream ends; its end is a lost session (raises)."""
        st = self._stream
        if st is None:
            raise TransportError("no SSE stream is open", sent=True)
        await st.ended.wait()
        if self._stream is st:
            raise st.lost or TransportError("the SSE stream ended", sent=True)

    # ------------------------------------------------------------ shutdown

    async def close(self, *, delete_within: float = 0.0) -> None:
        """Drop the stream (ending the session: 2024-11-05 has no DELETE) and the
        connections."""
        self.forget_session()
        with contextlib.suppress(TransportError):
            await self._http.close(delete_within=delete_within)
