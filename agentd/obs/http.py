"""`/metrics`, `/healthz` and `/readyz` on an aiohttp application.

Mounted on the self-MCP listener (`--serve-mcp`) by `agentd.tree.selfmcp`
through the server engine's `mount` hook, and on the standalone
`--metrics-listen` listener by `serve_standalone()`.

Auth: `/metrics` sits behind the same guard as the MCP endpoint it shares a
listener with (Host/Origin checks, bearer; mTLS is the listener's own). The
probes `/healthz` and `/readyz` answer without credentials, because a
Kubernetes kubelet or a systemd watchdog cannot present a bearer or a client
certificate, and they tell nothing but "ok" or the names of failed checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from agentd.obs import health, metrics, trace

__all__ = ["mount", "serve_standalone"]

Guard = Callable[[web.Request], "web.StreamResponse | None"]


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
            return web.Response(text="ready\n", content_type="text/plain")
        return web.Response(status=503, text="not ready: " + "; ".join(reasons) + "\n",
                            content_type="text/plain")

    if trace.enabled:
        app.middlewares.append(_continue_trace)
    app.router.add_route("GET", "/metrics", get_metrics)
    app.router.add_route("GET", "/healthz", get_healthz)
    app.router.add_route("GET", "/readyz", get_readyz)


class _Meta(msgspec.Struct, gc=False):
    traceparent: Any = None
    tracestate: Any = None


class _Params(msgspec.Struct, gc=False):
    _meta: _Meta | None = None
    name: Any = None


class _Peek(msgspec.Struct, gc=False):
    method: Any = None
    params: _Params | None = None


_peek = msgspec.json.Decoder(_Peek)
_NAME = re.compile(r"[A-Za-z0-9_./-]{1,64}")
_PEEK_MAX = 1 << 20


@web.middleware
async def _continue_trace(request: web.Request, handler: Any) -> web.StreamResponse:
    """An inbound MCP request continues its caller's trace (only while tracing is on).

    The parent context comes from the request's `_meta.traceparent` (SEP-414) or,
    failing that, the W3C `traceparent` header; the request is handled inside a
    server span named for its method.
    """
    if request.method != "POST" or not trace.enabled:
        return await handler(request)
    peek = None
    length = request.content_length
    if length is not None and length <= _PEEK_MAX:
        try:
            peek = _peek.decode(await request.read())
        except (msgspec.DecodeError, web.HTTPException):
            peek = None
    meta = peek.params._meta if peek is not None and peek.params is not None else None
    tp, ts = trace.parent_from(
        request.headers,
        {"traceparent": meta.traceparent, "tracestate": meta.tracestate} if meta else None)
    method = peek.method if peek is not None and isinstance(peek.method, str) else ""
    if not _NAME.fullmatch(method):  # a peer's text: only a plain method name is kept
        method = "unknown"
    tool = None
    if method == "tools/call" and peek is not None and peek.params is not None \
            and isinstance(peek.params.name, str) and _NAME.fullmatch(peek.params.name):
        tool = peek.params.name
    with trace.span(f"mcp.server {method[:64]}", parent=tp, tracestate=ts, kind="server",
                    root=True, **{"mcp.method.name": method[:64], "gen_ai.tool.name": tool}):
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

    from agentd.config import is_loopback_host
    from agentd.log import log
    from agentd.log import register_secret as log_secret

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
    bound = srv.sockets[0].getsockname()[1] if srv is not None and srv.sockets else port
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}"
    log.info("obs.metrics.listening", url=url, auth="bearer" if bearer else "none")
    return Standalone(runner, url)
