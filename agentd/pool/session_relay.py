"""2025-11-25 sessions through any pool worker: an aiohttp middleware on the MCP paths.

A session's ``Mcp-Session-Id`` names the worker holding it
(:func:`agentd.pool.handles.mint_session`: ``<owner>.<mac>.<server's id>``).
On the way out, the id the server minted in an ``initialize`` answer is
replaced by the pool id; on the way in:

* the pool id of a session this worker holds is turned back into the
  server's own id, and the request is served here;
* the pool id of a session a peer holds is proxied to that peer unchanged
  (method, path, body and the request headers the MCP endpoint reads,
  ``Authorization`` included, so the owner's own guard decides who the
  caller is); the answer -- JSON, or an SSE stream relayed chunk by chunk --
  comes back as the owner sent it;
* anything else (no id, a forged or altered one) is left as it is: the
  server answers 404 for an id it does not hold, exactly as without a pool.

The principal is the owner's bearer check: in a pool that serves sessions
through every worker, callers authenticate with bearers (an mTLS client
certificate ends at the first worker's TLS).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import aiohttp
from aiohttp import web

from agentd.log import log
from agentd.obs import metrics
from agentd.pool import handles
from agentd.pool.relay import Relay

__all__ = ["SESSION_HEADER", "session_middleware"]

SESSION_HEADER: Final = "Mcp-Session-Id"
# the request headers the MCP endpoint reads; hop-by-hop ones never cross
_FORWARD: Final = ("Authorization", "Content-Type", "Accept", "Last-Event-ID", "Origin",
                   SESSION_HEADER, "MCP-Protocol-Version", "traceparent", "tracestate")
_BACK: Final = ("Content-Type", "Cache-Control", SESSION_HEADER, "Retry-After",
                "WWW-Authenticate")
MAX_PROXY_BODY: Final = 4 * 1024 * 1024  # one proxied POST body (the relay's bound)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def session_middleware(relay: Relay, paths: tuple[str, ...]) -> Callable[..., Awaitable[
        web.StreamResponse]]:
    """The middleware for ``paths`` (the MCP endpoint's) of one pool worker."""
    key, me = relay.key, relay.me
    _log = log.bind(component="pool")

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in paths:
            return await handler(request)
        sid = request.headers.get(SESSION_HEADER)
        ref = handles.verify_session(key, sid) if sid is not None else None
        if ref is not None and ref[0] != me:
            metrics.POOL_RELAYED.inc("out", "session")
            return await _proxy(relay, ref[0], request)
        if ref is not None:  # ours: the server knows it by its own id
            headers = request.headers.copy()
            headers[SESSION_HEADER] = ref[1]
            request = request.clone(headers=headers)
        response = await handler(request)
        minted = response.headers.get(SESSION_HEADER)
        if minted is not None and handles.verify_session(key, minted) is None:
            response.headers[SESSION_HEADER] = handles.mint_session(key, me, minted)
            _log.debug("pool.session", owner=me)
        return response

    return middleware


async def _proxy(relay: Relay, owner: str, request: web.Request) -> web.StreamResponse:
    base = relay.peers.get(owner)
    if base is None:
        return web.Response(status=404, text="Not Found: unknown or ended session")
    body = await request.content.read(MAX_PROXY_BODY + 1)
    if len(body) > MAX_PROXY_BODY:
        return web.Response(status=413, text="Payload Too Large")
    headers = {k: v for k in _FORWARD if (v := request.headers.get(k)) is not None}
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
