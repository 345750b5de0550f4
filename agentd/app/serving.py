"""Serving composition: the self-MCP's listener assembled (``--serve-mcp``).

The endpoints' logic lives in :mod:`agentd.served` (the self-MCP handler, the
served A2A agent, the pool's routing); this module puts them on one aiohttp
listener: TLS from the serve spec, the bearer/mTLS guard, ``/metrics``,
``/healthz`` and ``/readyz``, the A2A routes (``--serve-a2a``), and in pool mode
the relay route, the 2025-11-25 session proxy and the peers' prober, all owned
by the one serving context :func:`serve` opens for the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agentd.agent.subagents import SubagentBackend, Unavailable
from agentd.config.model import Config, ServeSpec
from agentd.config.serve import resolve_bearers
from agentd.journal.records import RunRecord
from agentd.log import log
from agentd.mcp.server.auth import server_ssl_context
from agentd.mcp.server.http.server import Limits, Runner
from agentd.mcp.server.http.server import serve as _serve_http
from agentd.obs import http as obs_http
from agentd.pool.link.session_relay import session_middleware
from agentd.secrets import DEFAULT_SECRETS_DIR
from agentd.served.a2a import A2AServed
from agentd.served.backend import LocalServed
from agentd.served.pool import PoolBackend, PoolServed
from agentd.served.selfmcp import SelfMCP
from agentd.tree.supervisor import Supervisor

__all__ = ["serve", "serve_self_mcp"]


async def serve_self_mcp(spec: ServeSpec, backend: SubagentBackend | None = None, *,
                         run_id: str = "", mode: str = "task",
                         limits: Limits | None = None,
                         secrets_dir: str = DEFAULT_SECRETS_DIR,
                         a2a: bool = False, pool: PoolServed | None = None,
                         restored: Sequence[RunRecord] = ()) -> Runner:
    """Serve the self-MCP at ``/`` and ``/mcp`` of ``spec`` (``--serve-mcp``; spec §3's
    parent names the worker by host and port alone); returns the runner.  ``restored``:
    the journaled runs the tree brought back (``--journal``); those that were A2A
    tasks are tasks again."""
    if not spec.loopback and not spec.authenticated:  # config validation already exits 2
        raise ValueError(f"--serve-mcp {spec.url}: a non-loopback listener needs mTLS or a bearer")
    ssl_ctx = server_ssl_context(spec.cert, spec.key, spec.client_ca) \
        if spec.scheme == "https" and spec.cert and spec.key else None
    backend = backend if backend is not None else Unavailable()
    # pool mode: the handler's backend routes each handle to its owner
    routed = PoolBackend(LocalServed(backend), pool) if pool is not None else None
    handler = SelfMCP(backend, run_id=run_id, mode=mode, served=routed)

    def mount(server: Any) -> None:
        _mount_obs(server)
        if routed is not None:  # POST /pool/relay: the pool key is its credential
            relay = routed.pool.relay
            relay.mount(server.app, routed, authenticated=server.guard.authenticated,
                        body_timeout=server.limits.body_timeout)
            # 2025-11-25 sessions: ids name their owner; a peer's are proxied to it
            server.app.middlewares.append(session_middleware(
                relay, server.guard, ("/mcp", "/"), max_body=server.limits.max_body,
                body_timeout=server.limits.body_timeout))
    if a2a:  # --serve-a2a: the A2A agent on this listener, behind the same guard
        served = A2AServed(backend)
        for rec in restored:
            context = rec.request.get("a2a_context")
            if isinstance(context, str):
                served.adopt(rec.handle, context, running=not rec.terminal)
        base = mount

        def mount(server: Any) -> None:
            base(server)
            served.mount(server)
    return await _serve_http(handler, host=spec.host, port=spec.port, ssl_context=ssl_ctx,
                             bearer=spec.bearer, limits=limits, extra_paths=("/",),
                             bearers=resolve_bearers(spec, secrets_dir) or None,
                             mount=mount)


def _mount_obs(server: Any) -> None:
    """`/metrics` (behind the MCP endpoint's own guard), `/healthz` and `/readyz`."""
    obs_http.mount(server.app, server.guard.check)


@contextlib.asynccontextmanager
async def serve(config: Config, *, run_id: str = "",
                backend: SubagentBackend | None = None) -> AsyncIterator[Runner]:
    """``async with serving.serve(config, run_id=..., backend=...)``: serve for the run."""
    assert config.serve is not None, "serve() needs --serve-mcp"
    pool = None
    journaling = backend.journaling if isinstance(backend, Supervisor) else None
    if config.pool is not None:
        pool = PoolServed(config.pool, capacity=config.max_subagents,
                          ssl_context=_peer_ssl(config.serve),
                          journal_id=journaling.journal.id if journaling is not None else None)
        if journaling is not None:  # served runs' pool names are journaled with them
            journaling.namer = pool.name
            for rec in journaling.restored:
                if rec.external is not None and not pool.adopt(rec.handle, rec.external):
                    log.warning("journal.name_not_adopted", handle=rec.handle,
                                reason="minted under another --pool-id or journal identity")
    runner = await serve_self_mcp(config.serve, backend, run_id=run_id, mode=config.mode,
                                  secrets_dir=config.secrets_dir, a2a=config.serve_a2a,
                                  pool=pool,
                                  restored=journaling.restored if journaling is not None else ())
    stop = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tg:
            if pool is not None:  # the liveness probes of the pool's peers
                tg.create_task(pool.prober.run(stop))
                pool.watches_in(tg)
            try:
                yield runner
            finally:
                stop.set()
                if pool is not None:
                    pool.stop_watches()
    finally:
        await runner.stop()
        if pool is not None:
            await pool.close()


def _peer_ssl(spec: ServeSpec) -> ssl.SSLContext | None:
    """The relay's TLS to https peers: their CA is this listener's client CA (the
    pool shares one PKI), and this worker's certificate is its mTLS identity."""
    if spec.scheme != "https":
        return None
    ctx = ssl.create_default_context(cafile=spec.client_ca)
    if spec.cert and spec.key:
        ctx.load_cert_chain(spec.cert, spec.key)
    return ctx
