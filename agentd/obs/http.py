"""`/metrics`, `/healthz` and `/readyz` on an aiohttp application.

Mounted on the self-MCP listener (`--serve-mcp`) by `agentd.served.selfmcp`
through the server engine's `mount` hook, and on the standalone
`--metrics-listen` listener by `serve_standalone()`.

Auth: `/metrics` sits behind the same guard as the MCP endpoint it shares a
listener with (Host/Origin checks, bearer; mTLS is the listener's own). The
probes `/healthz` and `/readyz` answer without credentials, because a
Kubernetes kubelet or a systemd watchdog cannot present a bearer or a client
certificate, and they tell nothing but "ok" or the names of failed checks --
and, in reactive mode, what the daemon watches: one `watch MODE SERVER URI`
line per watched URI (the watched set is bounded by the `--subscribe` list and
`--max-subscriptions`; control characters and spaces percent-escaped;
`health.watched()` has replaced a URI's userinfo by `***`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from agentd.obs import health, metrics, served, trace
from agentd.wire.guard import PEER_FAULTS

__all__ = ["mount", "serve_standalone"]

Guard = Callable[[web.Request], "web.StreamResponse | None"]

_UNSAFE = re.compile(r"[\x00-\x20\x7f-\x9f]")


def _escape(text: str) -> str:
    return _UNSAFE.sub(lambda m: f"%{ord(m.group()):02X}", text)


def watch_lines() -> str:
    """The /readyz lines naming what the reactive daemon watches (see above)."""
    return "".join(f"watch {_escape(e['mode'])} {_escape(e['server'])} {_escape(e['uri'])}\n"
                   for e in health.watched())


def mount(app: web.Application, guard: Guard | None = None) -> None:
    """Add the three routes to `app` (before it starts); `guard` protects /metrics."""

    async def get_metrics(request: web.Request) -> web.StreamResponse:
        if guard is not None:
            denied = guard(request)
            if denied is not None:
                return denied
        ready, _ = health.readiness()
        metrics.READY.set(1 if ready else 0)
        return web.Response(body=metrics.render(),
                            headers={"Content-Type": metrics.CONTENT_TYPE})

    async def get_healthz(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok\n", content_type="text/plain")

    async def get_readyz(request: web.Request) -> web.StreamResponse:
        ready, reasons = health.readiness()
        if ready:
            return web.Response(text="ready\n" + watch_lines(), content_type="text/plain")
        return web.Response(status=503, text="not ready: " + "; ".join(reasons) + "\n"
                            + watch_lines(), content_type="text/plain")

    if trace.enabled:
        app.on_startup.append(_trace_posts)
    app.router.add_route("GET", "/metrics", get_metrics)
    app.router.add_route("GET", "/healthz", get_healthz)
    app.router.add_route("GET", "/readyz", get_readyz)


class _Peek(msgspec.Struct, gc=False):
    method: Any = None
    params: msgspec.Raw = msgspec.Raw()  # absent: empty, which decodes to nothing


_peek = msgspec.json.Decoder(_Peek)
_PEEK_MAX = 1 << 20


async def _trace_posts(app: web.Application) -> None:
    """Run the handler of every POST route that does not make its own server span
    inside `_continue_trace` (at start-up: the routes mounted after this
    module's are included). The MCP server engine's routes make theirs from the
    message they decode (`agentd.mcp.server.http.server`, `agentd.obs.served`); the
    others (the A2A endpoint) are wrapped here.

    Why the routes and not an aiohttp middleware: with any middleware aiohttp
    runs its middleware machinery for every request of the listener (a cached
    chain of wrappers and an app-switching wrapper per request), which costs
    about what the span does. If this aiohttp keeps a route's handler elsewhere,
    the middleware is used after all.
    """
    posts = [r for r in app.router.routes() if r.method == "POST"]
    if not all(callable(getattr(r, "_handler", None)) for r in posts):
        app.middlewares.append(web.middleware(_continue_trace))
        return
    for route in posts:
        inner = route._handler
        if served.spans_own(inner):
            continue

        async def traced(request: web.Request, inner: Any = inner) -> web.StreamResponse:
            return await _continue_trace(request, inner)

        route._handler = traced


async def _continue_trace(request: web.Request, handler: Any) -> web.StreamResponse:
    """A POST request continues its caller's trace (only while tracing is on), in
    the server span `agentd.obs.served` makes from the JSON-RPC body."""
    if request.method != "POST" or not trace.enabled or served.spans_own(handler):
        return await handler(request)
    peek = None
    length = request.content_length
    if length is not None and length <= _PEEK_MAX:
        try:
            peek = _peek.decode(await request.read())
        except (*PEER_FAULTS, web.HTTPException):
            peek = None
    with served.span(peek.method if peek is not None else None,
                     peek.params if peek is not None else None, request.headers):
        return await handler(request)


class Standalone:
    """The `--metrics-listen` listener; `await .stop()` ends it."""

    def __init__(self, runner: web.AppRunner, url: str) -> None:
        self._runner = runner
        self.url = url

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> Standalone:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve_standalone(host: str, port: int, *, bearer: str | None = None
                           ) -> Standalone:
    """Serve the three routes alone on `host:port` (`--metrics-listen`).

    A non-loopback address needs `bearer` for /metrics (the secure-by-default
    rule of every agentd listener); on loopback it is optional.
    """
    import hashlib
    import hmac

    from agentd.log import log
    from agentd.log import register_secret as log_secret
    from agentd.netaddr import is_loopback_host

    loopback = is_loopback_host(host)
    if bearer:
        log_secret(bearer)
    if not loopback and not bearer:
        raise ValueError(f"refusing an unauthenticated non-loopback metrics listener on {host}"
                         " (set --metrics-bearer)")
    want = hashlib.sha256(f"Bearer {bearer}".encode()).digest() if bearer else None

    def guard(request: web.Request) -> web.StreamResponse | None:
        """The whole header, compared in constant time over digests (no length leak)."""
        if want is None:
            return None
        got = hashlib.sha256(request.headers.get("Authorization", "").encode()).digest()
        if not hmac.compare_digest(got, want):
            return web.Response(status=401, headers={"WWW-Authenticate": "Bearer"})
        return None

    app = web.Application()
    mount(app, guard)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    srv = site._server
    # asyncio's or uvloop's Server (AbstractServer does not declare `sockets`)
    bound = srv.sockets[0].getsockname()[1] if srv is not None and srv.sockets else port  # type: ignore[attr-defined]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}"
    log.info("obs.metrics.listening", url=url, auth="bearer" if bearer else "none")
    return Standalone(runner, url)
