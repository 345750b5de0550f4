"""2025-11-25 sessions through any pool worker: an aiohttp middleware on the MCP paths.

A session's ``Mcp-Session-Id`` names the worker holding it
(:func:`agentd.pool.handles.mint_session`: ``<owner>.<mac>.<server's id>``).
On the way out, the id the server minted in an ``initialize`` answer is
replaced by the pool id; on the way in:

* the pool id of a session this worker holds is turned back into the
  server's own id, and the request is served here;
* the pool id of a session a peer holds is proxied to that peer, after this
  worker's own guard has checked it exactly as a direct request
  (``Host``/``Origin``, the bearer, the mTLS certificate: a refusal here is
  the refusal the caller would get directly);
* anything else (no id, a forged or altered one) is left as it is: the
  server answers 404 for an id it does not hold, exactly as without a pool.

Who the caller is crosses the hop as a claim the owner can check, never as
the link's own identity: the proxied request carries the caller's principal
(as this worker's guard authenticated it) in ``Agentd-Pool-Principal`` and
``Agentd-Pool-Auth``, the relay's request MAC
(:func:`agentd.pool.handles.sign_request`) over the sending worker, a
timestamp, a nonce, the *receiving* worker, the body's SHA-256, the method and a
target naming the path and the session id, so the claim is good for that one
request to that one owner.  The owner checks it
before reading the body (:class:`~agentd.pool.handles.RelayVerifier`: the
MAC, the timestamp window, the nonce memory shared with ``/pool/relay``, the
sender a member), then the body against its digest, and serves the request
as that principal (:meth:`agentd.mcp.server.http.guard.Guard.vouch`): the forwarding
worker's TLS certificate never names the caller, so two clients proxied
through one worker stay two principals, and the session answers only the
principal that opened it.  A claim that fails is ``401`` and closes the
connection.  The caller's bearer and ``Origin`` stay at the first worker.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import aiohttp
from aiohttp import web

from agentd.errors import PoolError
from agentd.log import log
from agentd.log_bridge import throttled
from agentd.obs import metrics
from agentd.pool import handles
from agentd.pool.link.relay import Relay, read_whole

__all__ = ["SESSION_HEADER", "Guarded", "proxy_target", "session_middleware"]

SESSION_HEADER: Final = "Mcp-Session-Id"
# the request headers the owner's MCP endpoint reads; the caller's credentials
# (Authorization) and Origin were checked here and never cross, nor hop-by-hop ones
_FORWARD: Final = ("Content-Type", "Accept", "Last-Event-ID", SESSION_HEADER,
                   "MCP-Protocol-Version", "traceparent", "tracestate")
_BACK: Final = ("Content-Type", "Cache-Control", SESSION_HEADER, "Retry-After",
                "WWW-Authenticate")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_log = log.bind(component="pool")


class Guarded(Protocol):
    """The listener's guard as the proxy uses it (``agentd.mcp.server.http.guard.Guard``):
    passed in by the composition root, so the pool does not import the server."""

    def check(self, request: web.Request) -> web.StreamResponse | None: ...

    def caller(self) -> str: ...

    def vouch(self, request: web.Request, principal: str) -> None: ...


def _plain(status: int, text: str, *, close: bool = False) -> web.Response:
    resp = web.Response(status=status, text=text)
    if close:  # its input is not trusted: the connection ends after the answer
        resp.force_close()
    return resp


def proxy_target(path: str, session_id: str) -> str:
    """What a proxied request's MAC names as its target: the path and the session
    (``#`` never occurs in a path); the head binds the receiver and the body."""
    return f"{path}#{session_id}"


def session_middleware(relay: Relay, guard: Guarded, paths: tuple[str, ...], *, max_body: int,
                       body_timeout: float) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The middleware for ``paths`` (the MCP endpoint) of one pool worker; a proxied
    body is held to ``max_body`` bytes read within ``body_timeout`` s, the
    listener's own bounds for a direct one."""
    key, me = relay.key, relay.me

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in paths:
            return await handler(request)
        sid = request.headers.get(SESSION_HEADER)
        ref = handles.verify_session(key, sid) if sid is not None else None
        if ref is None or sid is None:  # no session, or not a pool id: served as it is
            return _minted(await handler(request), key, me)
        if ref[0] != me:
            denied = guard.check(request)  # the same checks as a direct request
            if denied is not None:
                return denied
            metrics.POOL_RELAYED.inc("out", "session")
            try:  # the body bounds of a direct request: size and read time
                async with asyncio.timeout(body_timeout):
                    body = await read_whole(request.content.iter_any(), max_body)
            except TimeoutError:
                return _plain(408, "Request Timeout: the body was not received in time",
                              close=True)
            if body is None:
                return _plain(413, "Payload Too Large", close=True)
            return await _proxy(relay, ref[0], sid, request, body, guard.caller())
        # ours: the server knows it by its own id
        headers = request.headers.copy()
        headers[SESSION_HEADER] = ref[1]
        request = request.clone(headers=headers)
        if handles.RELAY_HEADER in request.headers:  # proxied by a peer
            refused = await _vouch(relay, guard, request, sid)
            if refused is not None:
                return refused
        return await handler(request)

    return middleware


def _minted(response: web.StreamResponse, key: handles.PoolKey, me: str) -> web.StreamResponse:
    """An ``initialize`` answer's session id, renamed to the pool's (naming this worker)."""
    minted = response.headers.get(SESSION_HEADER)
    if minted is not None and handles.verify_session(key, minted) is None:
        response.headers[SESSION_HEADER] = handles.mint_session(key, me, minted)
        _log.debug("pool.session", owner=me)
    return response


def _unvouched(reason: str) -> web.StreamResponse:
    throttled(_log, "warning", "pool.relay_refused", key=f"session:{reason}", reason=reason,
              op="session")
    return _plain(401, "Unauthorized: pool authentication failed", close=True)


async def _vouch(relay: Relay, guard: Guarded, request: web.Request,
                 sid: str) -> web.StreamResponse | None:
    """Put the caller's principal a peer proved in ``request`` (None), or the 401."""
    headers = request.headers
    principal = headers.get(handles.RELAY_PRINCIPAL_HEADER)
    try:  # the claim first: nothing of a stranger's body is read
        signed = relay.verifier.verify(
            headers.get(handles.RELAY_HEADER), principal, relay.clock(), request.method,
            proxy_target(request.path, sid))
    except PoolError as exc:  # kind "auth"
        return _unvouched(str(exc))
    if signed.sender == relay.me or (signed.sender not in relay.peers
                                     and not relay.open_members):
        return _unvouched("sender is not a pool member")
    try:  # a member's body, within this listener's own bound (client_max_size)
        body = await request.read()
        relay.verifier.check_body(signed, body)
    except web.HTTPRequestEntityTooLarge:
        return _plain(413, "Payload Too Large", close=True)
    except PoolError as exc:
        return _unvouched(str(exc))
    assert principal is not None  # verify refuses a head without one
    guard.vouch(request, principal)
    return None


async def _proxy(relay: Relay, owner: str, sid: str, request: web.Request, body: bytes,
                 principal: str) -> web.StreamResponse:
    """``request`` (its ``body`` read) sent to ``owner`` for ``principal``, as this
    worker's guard authenticated the caller; the owner's answer streamed back."""
    base = relay.peers.get(owner)
    if base is None:
        return _plain(404, "Not Found: unknown or ended session")
    headers = {k: v for k in _FORWARD if (v := request.headers.get(k)) is not None}
    headers.update(handles.sign_request(
        relay.key, relay.me, relay.clock(), secrets.token_hex(12), request.method,
        proxy_target(request.path, sid), body, principal, receiver=owner))
    session = relay.client()
    try:
        upstream = await session.request(request.method, base + request.path, data=body or None,
                                         headers=headers, ssl=relay.ssl_arg(),
                                         timeout=aiohttp.ClientTimeout(
                                             total=None, sock_connect=relay.connect_timeout))
    except (aiohttp.ClientError, OSError, TimeoutError):
        log.warning("pool.relay_failed", peer=owner, op="session")
        return web.Response(status=502, text=f"Bad Gateway: pool worker {owner} is unreachable")
    async with upstream:
        out = web.StreamResponse(status=upstream.status, headers={
            k: v for k in _BACK if (v := upstream.headers.get(k)) is not None})
        await out.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await out.write(chunk)
        except (aiohttp.ClientError, OSError, ConnectionResetError):
            log.warning("pool.relay_failed", peer=owner, op="session_stream")
        await out.write_eof()
        return out
