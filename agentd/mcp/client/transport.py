"""Streamable HTTP (MCP 2025-11-25) client transport on aiohttp.

One :class:`StreamableHTTPTransport` per server: one ``aiohttp.ClientSession``
(keep-alive, TLS verified by default, optional custom CA).  It knows HTTP and
SSE, nothing of MCP semantics: every JSON-RPC message that arrives -- a JSON
body, or the ``data`` of an SSE event on a POST answer or on the GET stream --
is handed to ``on_message`` (bytes, or the event's already-decoded str), and the
session layer decides what it is.

* POST each message with ``Accept: application/json, text/event-stream``;
  the answer is a JSON body, an SSE stream (requests and notifications may
  precede the response on it), or 202 for a notification/response.
* ``Mcp-Session-Id`` kept from the initialize answer and sent after;
  ``MCP-Protocol-Version`` sent once negotiated.
* A POST's SSE stream that ends (or is cut mid-event) before our response is
  resumed with ``GET`` + ``Last-Event-ID``, after the server's ``retry`` delay.
* :meth:`listen` runs the standalone GET stream for server-initiated messages
  where the server offers one (405/400/404-without-session mean "not offered");
  it reconnects with ``Last-Event-ID`` honouring ``retry``.
* HTTP 404 on a request carrying our session id, or a 400 whose body says the
  session is unknown (server-everything after a restart), raises
  :class:`SessionExpired` -- on POST and on GET alike.  A GET stream the server
  offered and then no longer offers raises :class:`TransportError` (a lost
  stream, for the client to recover), never a quiet return.
* Every SSE stream is parsed within ``bounds`` (:class:`~agentd.config.model.StreamBounds`):
  an event past ``event_bytes`` drops that stream and raises
  :class:`TransportError` with its ``limit`` set (unless the awaited answer came
  before it); the server's ``retry`` is clamped, so a reconnection is never put
  off for ages.
  A JSON answer body (an error body of a stateless server's included) is read
  up to ``answer_bytes`` only (``--mcp-max-bytes``).
* :meth:`close` DELETEs the session (best effort) and closes the connector.

The transport holds no revision: the caller says per request what its
revision needs.  A 2026-07-28 request carries its per-request headers
(``Mcp-Method``, ``Mcp-Name``, ``Mcp-Param-*``); it is posted with
``resumable=False`` -- an SSE answer is never resumed (the revision has no
``Last-Event-ID``: a cut stream is an error the caller re-issues) -- and
``error_bodies=True`` -- a 4xx answer whose body is a JSON-RPC error is
delivered as that error (the revision answers -32020/-32022/-32601... with
400/404).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Final

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from agentd import __version__
from agentd.config.model import StreamBounds
from agentd.mcp.client import http_hints
from agentd.mcp.client.answered import Answered
from agentd.mcp.client.rules.faults import (
    HTTPStatusError,
    SessionExpired,
    TransportError,
    parse_retry_after,
)
from agentd.mcp.client.rules.negotiate import unknown_session
from agentd.obs import trace
from agentd_native import SSEEventTooLarge, SSEParser

__all__ = ["DEFAULT_RETRY_MS", "DELETE_LIMIT", "MAX_RESUMES", "TAIL_WAIT", "StreamableHTTPTransport"]

DEFAULT_RETRY_MS: Final = 1000  # SSE reconnection delay when the server gave none
MAX_RESUMES: Final = 8
DELETE_LIMIT: Final = 2.0  # seconds a closing session's best-effort DELETE is awaited
MAX_AUTH_RETRIES: Final = 3  # sends of one request after a 401/403 got new credentials
TAIL_WAIT: Final = 0.25  # how long the end of an answered SSE stream is awaited  # consecutive resumptions of one stream without a new event
_ACCEPT_BOTH: Final = "application/json, text/event-stream"
_NOT_OFFERED: Final = frozenset({400, 404, 405, 406, 501})
_CHUNK: Final = 65536
_MAX_ERROR_BODY: Final = 300

OnMessage = Callable[[bytes | str], None]  # an SSE event's data is handed over as str


class _Watch:
    """Which response a request's SSE answer is being read from, and whether the
    request's answer came on it (then its end is awaited, never cut)."""

    __slots__ = ("mine", "over", "resp")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.mine = False
        self.over = False

    def interrupt(self) -> None:
        if not self.mine and not self.over:
            self.resp.close()  # answered elsewhere: stop waiting on this stream


def _is_sse(ctype: str) -> bool:
    return ctype.startswith("text/event-stream")


async def _read_bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """A JSON answer body, never more than ``limit`` bytes held (``--mcp-max-bytes``):
    a chunked one has no Content-Length to refuse up front."""
    chunks: list[bytes] = []
    size = 0
    try:
        while chunk := await resp.content.readany():
            size += len(chunk)
            if size > limit:
                raise TransportError(f"answer past {limit} bytes (mcp_max_bytes); dropped",
                                     sent=True, limit="mcp_max_bytes", size=size)
            chunks.append(chunk)
    except (aiohttp.ClientError, OSError) as exc:
        raise TransportError(str(exc) or type(exc).__name__, sent=True) from None
    return b"".join(chunks)


class StreamableHTTPTransport:
    """HTTP and SSE for one MCP endpoint.  ``on_message`` gets every inbound message."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, *,
                 on_message: OnMessage, ca_file: str | None = None,
                 client_cert: str | None = None, client_key: str | None = None,
                 connect_timeout: float = 10.0, max_connections: int = 128,
                 auth: Any = None, bounds: StreamBounds | None = None) -> None:
        self.url = url
        self.bounds = bounds if bounds is not None else StreamBounds()
        self._default_retry = self.bounds.clamp_ms(DEFAULT_RETRY_MS)
        # OAuth (agentd.mcp.client.oauth): headers() for every request, on_unauthorized()
        # on a 401/403 -- True means new credentials, send again (bounded)
        self.auth = auth
        self._url = URL(url)
        self.on_message = on_message
        self.get_known = asyncio.Event()  # set while `get_offered` is True or False
        self._get_offered: bool | None = None
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.get_offered: bool | None = None  # None until the GET stream was tried
        self.not_offered = 0  # the HTTP status of the last "GET stream not offered"
        self._extra = dict(headers or {})
        self._ca_file = ca_file
        self._client_cert = client_cert
        self._client_key = client_key
        self._connect_timeout = connect_timeout
        self._max_connections = max_connections
        self._http: aiohttp.ClientSession | None = None
        self._post_headers: CIMultiDict[str] = CIMultiDict()
        self._get_headers: CIMultiDict[str] = CIMultiDict()
        self._rebuild_headers()

    # ------------------------------------------------------------ set-up

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.url.startswith("https:"):
            return True
        ctx = ssl.create_default_context(cafile=self._ca_file)  # verify on, always
        if self._client_cert:  # mutual TLS: present our certificate
            ctx.load_cert_chain(self._client_cert, self._client_key)
        return ctx

    async def open(self) -> None:
        if self._http is not None:
            return
        connector = aiohttp.TCPConnector(
            # idle connections are dropped before common servers drop them (5 s), so a
            # request never races a server closing its end of a pooled connection
            limit=self._max_connections, ssl=self._ssl(), keepalive_timeout=4.0,
            enable_cleanup_closed=False)
        self._http = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
            # Lean per-request path: no cookie jar (MCP state is the session id),
            # identity encoding only (nothing to decompress), headers pre-built.
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
            auto_decompress=False,
        )

    @property
    def get_offered(self) -> bool | None:
        """Whether the server offers the standalone GET stream; None until tried."""
        return self._get_offered

    @get_offered.setter
    def get_offered(self, value: bool | None) -> None:
        self._get_offered = value
        if value is None:
            self.get_known.clear()
        else:
            self.get_known.set()

    async def reopen(self) -> None:
        """Drop every pooled connection and the session id (a stale server)."""
        await self._close_http()
        self.session_id = None
        self.protocol_version = None
        self.get_offered = None
        self._rebuild_headers()
        await self.open()

    def _rebuild_headers(self) -> None:
        base = CIMultiDict(self._extra)
        base["User-Agent"] = f"agentd/{__version__}"
        if self.session_id:
            base["Mcp-Session-Id"] = self.session_id
        if self.protocol_version:
            base["MCP-Protocol-Version"] = self.protocol_version
        post = CIMultiDict(base)
        post["Accept"] = _ACCEPT_BOTH
        post["Content-Type"] = "application/json"
        get = CIMultiDict(base)
        get["Accept"] = "text/event-stream"
        self._post_headers = post
        self._get_headers = get

    def set_protocol_version(self, version: str) -> None:
        self.protocol_version = version
        self._rebuild_headers()

    def forget_session(self) -> None:
        """Forget the session id and version (before a fresh initialize)."""
        self.session_id = None
        self.protocol_version = None
        self.get_offered = None
        self._rebuild_headers()

    def _take_session_id(self, resp: aiohttp.ClientResponse) -> None:
        sid = resp.headers.get("Mcp-Session-Id")
        if sid and sid != self.session_id:
            if not sid.isprintable() or len(sid) > 1024:
                return  # a peer's garbage: keep the session we have
            self.session_id = sid
            self._rebuild_headers()

    # ------------------------------------------------------------ POST

    async def post(self, body: bytes, answer: Answered | None = None, *,
                   initialize: bool = False,
                   headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
                   resumable: bool = True, error_bodies: bool = False,
                   url: URL | None = None) -> None:
        """POST one message and feed what comes back to ``on_message``.

        ``answer`` (for a request) is set by the caller once its response is
        settled; an SSE answer is read until it is (resuming a cut stream when
        ``resumable``), else until EOF.  ``error_bodies``: a 4xx JSON body is
        the request's JSON-RPC answer.  ``url``: where to, when not the declared
        URL (the HTTP+SSE transport's endpoint).  Returns once the exchange is
        over; the caller checks its own future.
        """
        http = self._http
        if http is None:
            raise TransportError("transport is closed", sent=False)
        had_session = self.session_id is not None
        hdrs = self._post_headers
        if headers:
            hdrs = CIMultiDict(hdrs)
            hdrs.extend(headers)
        if trace.enabled and (w3c := trace.headers()):  # the live span's W3C trace context
            if hdrs is self._post_headers:  # the prebuilt headers are shared: copy them
                hdrs = CIMultiDict(hdrs)
            hdrs.extend(w3c)
        resp = await self._send_authorized(
            lambda h: http.post(url or self._url, data=body, headers=h), hdrs)
        try:
            status = resp.status
            if initialize and status < 300:
                self._take_session_id(resp)
            if status == 200:
                ctype = resp.headers.get("Content-Type", "")
                if _is_sse(ctype):
                    if answer is not None:
                        await self._read_sse(resp, answer, resumable)
                    else:
                        await self._pump(resp, self.bounds.parser(), None)
                    return
                length = resp.content_length
                limit = self.bounds.answer_bytes
                if length is not None and length > limit:
                    raise TransportError(f"answer of {length} bytes exceeds the "
                                         f"{limit} byte limit (mcp_max_bytes)", sent=True)
                data = await _read_bounded(resp, limit)
                if http_hints.is_html(ctype, data[:64].decode("latin-1")):
                    raise TransportError(http_hints.html_answer(self._url), sent=True)
                if data and answer is not None:  # a JSON body answering a notification: ignored
                    self.on_message(data)
                return
            if status == 202 or status == 204:
                return
            if status == 404 and had_session and not initialize:
                raise SessionExpired(f"session {self.session_id} expired (HTTP 404)",
                                     status=404)
            if (error_bodies and answer is not None and status >= 400
                    and resp.headers.get("Content-Type", "").startswith("application/json")):
                data = b""
                if (resp.content_length or 0) <= self.bounds.answer_bytes:
                    # past the bound (chunked: no length to refuse up front) the
                    # error body is dropped and the status is what the call gets
                    with contextlib.suppress(TimeoutError, TransportError):
                        async with asyncio.timeout(5):
                            data = await _read_bounded(resp, self.bounds.answer_bytes)
                if data:
                    self.on_message(data)  # a JSON-RPC error for our request, or garbage
                if answer.is_set():
                    return
                raise self._status_error(status, data[:_MAX_ERROR_BODY].decode("utf-8", "replace"),
                                         had_session, None)
            text = ""
            try:
                async with asyncio.timeout(2):
                    text = (await resp.content.read(_MAX_ERROR_BODY)).decode("utf-8", "replace")
            except Exception:
                pass
            if 200 < status < 300:
                return
            if not initialize and unknown_session(status, text, had_session=had_session):
                # a 400 saying so (server-everything after a restart) is a 404 too
                raise SessionExpired(f"session {self.session_id} unknown to the server "
                                     f"(HTTP {status}: {text[:100]})", status=status)
            raise self._status_error(status, text, had_session,
                                     parse_retry_after(resp.headers.get("Retry-After")))
        finally:
            resp.release()

    def _status_error(self, status: int, text: str, had_session: bool,
                      retry_after: float | None) -> HTTPStatusError:
        """A refusal, worded: an HTML page is named, not quoted; before a session the
        fix is named too (the URL's path, the credentials: agentd.mcp.client.http_hints)."""
        html = http_hints.is_html("", text)
        hint = "" if had_session else http_hints.status_hint(
            self._url, status, sent_authorization="Authorization" in self._post_headers)
        if html and not hint:
            hint = http_hints.html_answer(self._url)
        return HTTPStatusError(status, "an HTML page" if html else text, retry_after=retry_after,
                               hint=hint)

    async def _send_authorized(
            self, send: Callable[[Any], Awaitable[aiohttp.ClientResponse]], base: Any,
    ) -> aiohttp.ClientResponse:
        """One request with the auth hook's credentials, sent again (bounded) when a
        401/403 got the hook new ones; connection faults become TransportError."""
        for attempt in range(MAX_AUTH_RETRIES + 1):
            hdrs = base
            if self.auth is not None and (bearer := await self.auth.headers()):
                hdrs = CIMultiDict(base)  # a copy only when there is a token to send
                hdrs.popall("Authorization", None)
                hdrs.update(bearer)
            try:
                resp = await send(hdrs)
            except (aiohttp.ClientConnectorError, aiohttp.ClientSSLError) as exc:
                raise TransportError(http_hints.connect_fault(self._url, exc),
                                     sent=False) from None
            except (aiohttp.ClientError, OSError) as exc:
                raise TransportError(http_hints.exchange_fault(self._url, exc),
                                     sent=True) from None
            if attempt == MAX_AUTH_RETRIES or not await self._reauthorized(resp):
                return resp
        raise AssertionError("unreachable: the last attempt returns")

    async def _reauthorized(self, resp: aiohttp.ClientResponse) -> bool:
        """A 401/403 and an auth hook that got new credentials: send again."""
        if self.auth is None or resp.status not in (401, 403):
            return False
        try:
            again = await self.auth.on_unauthorized(resp.status, resp.headers)
        except BaseException:
            resp.release()
            raise
        if again:
            resp.release()
        return bool(again)

    async def _read_sse(self, resp: aiohttp.ClientResponse, answer: Answered,
                        resumable: bool) -> None:
        """Read a POST's SSE answer; resume it with GET + Last-Event-ID if cut short.

        Should ``answer`` be set for another reason (answered on the GET stream,
        failed because the session was replaced) while this stream is quiet,
        the stream is closed so the caller is not held by it.
        """
        if answer.is_set():
            return
        done = answer.is_set
        parser = self.bounds.parser()
        watch = _Watch(resp)
        answer.watch(watch.interrupt)
        resumes = 0
        try:
            while True:
                progressed = await self._pump(watch.resp, parser, done, watch)
                if done():
                    return
                # The stream ended (or broke) before our response: resume it if we can.
                if not resumable or not parser.last_event_id:
                    raise TransportError("SSE stream ended before the response", sent=True)
                resumes = 0 if progressed else resumes + 1
                if resumes >= MAX_RESUMES:
                    raise TransportError("SSE stream keeps ending without the response",
                                         sent=True)
                watch.resp.release()
                await asyncio.sleep((parser.retry if parser.retry is not None
                                     else self._default_retry) / 1000)
                if done():
                    return
                try:
                    nxt = await self.get_stream(parser.last_event_id)
                except (SessionExpired, HTTPStatusError, TransportError) as exc:
                    # The request was accepted before this: it may have run, so this is
                    # "lost mid-request", never "not processed".
                    raise TransportError(f"resuming the answer failed: {exc}",
                                         sent=True) from None
                if nxt is None:
                    raise TransportError("SSE stream could not be resumed (GET not offered)",
                                         sent=True)
                watch.resp = nxt
                if done():
                    return
        finally:
            watch.over = True
            answer.watch(None)
            watch.resp.release()

    async def _pump(self, resp: aiohttp.ClientResponse, parser: SSEParser,
                    done: Callable[[], bool] | None, watch: _Watch | None = None) -> bool:
        """Feed one SSE response's events to on_message until EOF, a cut, or done().

        Returns whether any event arrived.  An event past the bound raises
        :class:`TransportError` (``limit`` set) once the events before it are delivered (none
        if they answered ``done``: then the stream is just over).
        """
        got = False
        on_message = self.on_message
        content = resp.content
        try:
            while True:
                chunk = await content.readany()
                if not chunk:
                    break
                try:
                    events = parser.feed(chunk)
                except SSEEventTooLarge as exc:
                    for ev in exc.events:
                        if ev.data and (ev.event == "message" or not ev.event):
                            on_message(ev.data)
                    if done is not None and done():
                        break
                    raise TransportError(
                        f"SSE event past {exc.limit} bytes (sse_event_bytes); stream dropped",
                        sent=True, limit="sse_event_bytes", size=exc.size) from None
                for ev in events:
                    got = True
                    if ev.data and (ev.event == "message" or not ev.event):
                        on_message(ev.data)
                if done is not None and done():
                    if watch is not None:
                        watch.mine = True
                    # The response is in; the server should end the stream now.  Read
                    # that end (briefly) so the connection goes back to the pool.
                    if not content.is_eof():
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(TAIL_WAIT):
                                while chunk := await content.readany():
                                    for ev in parser.feed(chunk):
                                        if ev.data and (ev.event == "message" or not ev.event):
                                            on_message(ev.data)
                    break
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError, SSEEventTooLarge):
            pass  # cut mid-stream (or a flood after our answer): close() drops what was open
        finally:
            parser.close()
        return got

    # ------------------------------------------------------------ GET

    async def get_stream(self, last_event_id: str | None) -> aiohttp.ClientResponse | None:
        """Open a GET stream; None when the server offers none."""
        http = self._http
        if http is None:
            raise TransportError("transport is closed", sent=False)
        headers = self._get_headers
        if last_event_id:
            headers = CIMultiDict(headers)
            headers["Last-Event-ID"] = last_event_id
        had_session = self.session_id is not None
        resp = await self._send_authorized(lambda h: http.get(self._url, headers=h), headers)
        if resp.status == 200 and _is_sse(resp.headers.get("Content-Type", "")):
            return resp
        status = resp.status
        text = ""
        if status == 400 and had_session:  # is it about our session? (bounded read)
            with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
                async with asyncio.timeout(2):
                    text = (await resp.content.read(_MAX_ERROR_BODY)).decode("utf-8", "replace")
        resp.release()
        if unknown_session(status, text, had_session=had_session):
            raise SessionExpired(f"session {self.session_id} unknown to the server "
                                 f"(HTTP {status} on GET)", status=status)
        if status in _NOT_OFFERED or status == 200:
            self.not_offered = status
            return None
        raise HTTPStatusError(status)

    async def listen(self) -> None:
        """Run the standalone GET stream until it is not offered (returns).

        Reconnects after the server's ``retry`` (with ``Last-Event-ID``) when
        the stream ends; raises :class:`TransportError` when the server cannot
        be reached and :class:`SessionExpired` on a 404 for our session.
        """
        parser = self.bounds.parser()
        quiet = 0
        streamed = False  # this call had a stream: a reconnect's "not offered" is a loss
        while True:
            resp = await self.get_stream(parser.last_event_id or None)
            if resp is None:
                if streamed:  # never a quiet drop; the caller recovers (once per call)
                    raise TransportError(f"the GET stream is no longer offered (HTTP "
                                         f"{self.not_offered})", sent=True)
                self.get_offered = False
                return
            self.get_offered = streamed = True
            try:
                got = await self._pump(resp, parser, None)
            finally:
                resp.release()
            quiet = 0 if got else quiet + 1
            delay = parser.retry if parser.retry is not None else self._default_retry
            # A server that closes the stream at once, again and again, is not hammered.
            await asyncio.sleep(delay / 1000 * (1 if quiet < 3 else min(2 ** (quiet - 2), 30)))

    # ------------------------------------------------------------ shutdown

    async def delete(self, limit: float = DELETE_LIMIT) -> None:
        """End the session (DELETE); best effort, 405 and errors are fine."""
        http, sid = self._http, self.session_id
        if http is None or not sid:
            return
        try:
            async with asyncio.timeout(limit):
                headers = self._get_headers
                if self.auth is not None:
                    headers = CIMultiDict(headers)
                    headers.update(await self.auth.headers())
                resp = await http.delete(self._url, headers=headers)
                resp.release()
        except (TimeoutError, aiohttp.ClientError, OSError):
            pass

    async def _close_http(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    async def close(self, *, delete_within: float = DELETE_LIMIT) -> None:
        """DELETE the session (waiting ``delete_within`` s at most), then drop the
        connections."""
        await self.delete(delete_within)
        await self._close_http()
        if self.auth is not None:
            await self.auth.aclose()
