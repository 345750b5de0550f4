"""The worker-to-worker relay: one authenticated POST per relayed handle operation.

A worker that receives ``subagent.status``/``send``/``cancel`` or a
``resources/read`` for a handle another pool member owns sends the operation
to the owner's ``--serve-mcp`` listener at ``POST /pool/relay``, signed by
:func:`agentd.pool.handles.sign_request` (the pool key over the sender, a
timestamp, a nonce, the path, the body and the caller's principal).  The owner
verifies it (:class:`~agentd.pool.handles.RelayVerifier`: bad MAC, stale
timestamp or replayed nonce -> 401), runs the operation exactly as for a
local caller of that principal and answers one :class:`RelayAnswer`.  The
route is outside the bearer guard of the MCP endpoint: the pool key is its
credential; over https the link is the listener's own TLS, so with
``--serve-client-ca`` the handshake asks for a certificate of the pool's CA
before the MAC is looked at (docs/operations.md, "The link over https").

IO only: what an operation means is the :class:`RelayTarget`'s (the self-MCP).
"""

from __future__ import annotations

import hmac
import secrets
import ssl
import time
from collections.abc import Callable
from typing import Any, Final, Literal, Protocol

import aiohttp
import msgspec
from aiohttp import web

from agentd.errors import PoolError
from agentd.log import log
from agentd.obs import metrics
from agentd.pool import handles

__all__ = [
    "MAX_RELAY_BYTES",
    "PROBE_PATH",
    "RELAY_PATH",
    "RELAY_TIMEOUT",
    "ProbeAnswer",
    "Relay",
    "RelayAnswer",
    "RelayRequest",
    "RelayTarget",
]

RELAY_PATH: Final = "/pool/relay"
PROBE_PATH: Final = "/pool/probe"
MAX_RELAY_BYTES: Final = 4 * 1024 * 1024  # one relayed request or answer; past it: 413 / failed
CONNECT_TIMEOUT: Final = 5.0  # seconds to connect to a peer for a proxied session request
RELAY_TIMEOUT: Final = 3600.0  # one relayed operation, end to end (a send waits for a turn)

Op = Literal["status", "send", "cancel", "read", "spawn", "wait", "subscribe"]


class RelayRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One relayed operation; ``spawn`` (placement) carries the spawn's
    ``arguments`` and no handle; ``wait`` (a peer's subscriber) is answered once
    the run is terminal, or with its running body after a while; ``subscribe``
    (a subscribe or listen before its answer) is the owner's verdict: the run's
    body now, or ``unknown``."""

    op: Op
    handle: str
    message: str | None = None
    arguments: dict[str, Any] | None = None


class RelayAnswer(msgspec.Struct, frozen=True):
    """``body``: the run's §2.3 body; ``unknown``: the one unknown-handle answer;
    ``refused``: a refusal in the tree's words (``text``)."""

    kind: Literal["body", "unknown", "refused"]
    body: dict[str, Any] | None = None
    text: str | None = None


class ProbeAnswer(msgspec.Struct, frozen=True):
    """A liveness probe's answer: the process's incarnation (hex), free spawn slots,
    the answering worker's ``--pool-id`` and :func:`~agentd.pool.handles.probe_mac`
    over them and the probe's nonce (``--pool-dns`` learns a peer's id from it)."""

    incarnation: str
    free: int
    id: str = ""
    mac: str = ""


class ProbeRequest(msgspec.Struct, frozen=True):
    """A probe's body: the nonce its answer's MAC binds."""

    nonce: str = ""


def _unavailable(message: str) -> PoolError:
    """The owner did not answer a relayed operation (down, unreachable, bad answer)."""
    return PoolError(message, kind="unavailable")


class RelayTarget(Protocol):
    async def relayed(self, request: RelayRequest, principal: str) -> RelayAnswer:
        """Run one operation for ``principal`` on this worker's own handles."""
        ...

    def probe_answer(self) -> ProbeAnswer:
        """This worker's incarnation and free spawn slots, for a peer's probe."""
        ...


_encode = msgspec.json.Encoder().encode
_decode_request = msgspec.json.Decoder(RelayRequest).decode
_decode_answer = msgspec.json.Decoder(RelayAnswer).decode
_decode_probe = msgspec.json.Decoder(ProbeAnswer).decode
_decode_probe_request = msgspec.json.Decoder(ProbeRequest).decode


class Relay:
    """Both ends of the link for one worker: the client to its peers, the route for them."""

    def __init__(self, key: handles.PoolKey, me: str, peers: dict[str, str], *,
                 ssl_context: ssl.SSLContext | None = None,
                 clock: Callable[[], float] = time.time,
                 timeout: float = RELAY_TIMEOUT, open_members: bool = False) -> None:
        self.key = key
        self.me = me
        self.peers = dict(peers)  # id -> base URL
        # --pool-dns: peers are learned, so any holder of the pool key is a member
        self.open_members = open_members
        self.ssl_context = ssl_context
        self.clock = clock
        self.timeout = timeout
        self.connect_timeout = CONNECT_TIMEOUT
        self.verifier = handles.RelayVerifier(key)
        self._session: aiohttp.ClientSession | None = None
        self._log = log.bind(component="pool")

    # ------------------------------------------------------------ client
    async def call(self, peer: str, request: RelayRequest, principal: str) -> RelayAnswer:
        """The owner's answer; raises a PoolError of kind "unavailable" when there is none."""
        metrics.POOL_RELAYED.inc("out", request.op)
        try:
            raw = await self._post(peer, RELAY_PATH, _encode(request), principal, self.timeout)
            return _decode_answer(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            self._log.warning("pool.relay_failed", peer=peer, op=request.op,
                              error=type(exc).__name__)
            raise _unavailable(f"pool: worker {peer} is unreachable") from None

    async def probe(self, peer: str, limit: float) -> ProbeAnswer:
        """One liveness probe of ``peer``; raises a PoolError of kind "unavailable"."""
        base = self.peers.get(peer)
        if base is None:
            raise _unavailable(f"pool: {peer!r} is not a member of this pool")
        answer = await self.probe_url(base, limit)
        if answer.id != peer:
            raise _unavailable(f"pool: {base} answers as {answer.id!r}, not {peer!r}")
        return answer

    async def probe_url(self, base: str, limit: float) -> ProbeAnswer:
        """One probe of the worker at ``base``: its answer, whose MAC (bound to this
        probe's nonce) is checked; raises a PoolError of kind "unavailable"."""
        nonce = secrets.token_hex(12)
        try:
            answer = _decode_probe(await self._post_url(
                base, base, PROBE_PATH, _encode(ProbeRequest(nonce)), "", limit))
        except (msgspec.ValidationError, msgspec.DecodeError):
            raise _unavailable(f"pool: worker at {base} answered a bad probe") from None
        want = handles.probe_mac(self.key, answer.id, answer.incarnation, answer.free, nonce)
        if not hmac.compare_digest(want.encode(), answer.mac.encode()):
            raise _unavailable(f"pool: worker at {base} answered an unsigned probe")
        return answer

    async def _post(self, peer: str, path: str, body: bytes, principal: str,
                    limit: float) -> bytes:
        base = self.peers.get(peer)
        if base is None:
            raise _unavailable(f"pool: {peer!r} is not a member of this pool")
        return await self._post_url(peer, base, path, body, principal, limit)

    async def _post_url(self, peer: str, base: str, path: str, body: bytes, principal: str,
                        limit: float) -> bytes:
        session = self.client()
        headers = handles.sign_request(self.key, self.me, self.clock(), secrets.token_hex(12),
                                       "POST", path, body, principal)
        headers["Content-Type"] = "application/json"
        try:
            async with session.post(base + path, data=body, headers=headers,
                                    timeout=aiohttp.ClientTimeout(total=limit),
                                    ssl=self.ssl_arg()) as resp:
                raw = await resp.content.read(MAX_RELAY_BYTES + 1)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if path == RELAY_PATH:  # a probe's failure is the membership's to log
                self._log.warning("pool.relay_failed", peer=peer, error=type(exc).__name__)
            raise _unavailable(f"pool: worker {peer} is unreachable") from None
        if resp.status != 200 or len(raw) > MAX_RELAY_BYTES:
            self._log.warning("pool.relay_failed", peer=peer, status=resp.status)
            raise _unavailable(f"pool: worker {peer} answered HTTP {resp.status}")
        return raw

    def client(self) -> aiohttp.ClientSession:
        """The link's one connection pool (opened on first use, on the running loop)."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    def ssl_arg(self) -> ssl.SSLContext | bool:
        return self.ssl_context if self.ssl_context is not None else True

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------ server
    def mount(self, app: web.Application, target: RelayTarget) -> None:
        """``POST /pool/relay`` on the listener's app, answering for ``target``."""
        async def relay(request: web.Request) -> web.Response:
            if (request.content_length or 0) > MAX_RELAY_BYTES:
                return web.Response(status=413, text="relay request too large")
            raw = await request.content.read(MAX_RELAY_BYTES + 1)
            if len(raw) > MAX_RELAY_BYTES:
                return web.Response(status=413, text="relay request too large")
            principal = self._verify(request, raw)
            if principal is None:
                return web.Response(status=401, text="relay authentication failed")
            try:
                op = _decode_request(raw)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                return web.Response(status=400, text=f"bad relay request: {exc}"[:300])
            metrics.POOL_RELAYED.inc("in", op.op)
            answer = await target.relayed(op, principal)
            self._log.info("pool.relayed", op=op.op, kind=answer.kind)
            return web.Response(body=_encode(answer), content_type="application/json")

        async def probe(request: web.Request) -> web.Response:
            raw = await request.content.read(256)
            if self._verify(request, raw) is None:
                return web.Response(status=401, text="relay authentication failed")
            try:
                nonce = _decode_probe_request(raw).nonce
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                return web.Response(status=400, text=f"bad probe: {exc}"[:300])
            answer = target.probe_answer()
            mac = handles.probe_mac(self.key, self.me, answer.incarnation, answer.free, nonce)
            return web.Response(body=_encode(msgspec.structs.replace(answer, id=self.me, mac=mac)),
                                content_type="application/json")

        app.router.add_post(RELAY_PATH, relay)
        app.router.add_post(PROBE_PATH, probe)

    def _verify(self, request: web.Request, raw: bytes) -> str | None:
        """The caller's principal of an authenticated request, else None (logged)."""
        principal = request.headers.get(handles.RELAY_PRINCIPAL_HEADER)
        try:
            sender = self.verifier.verify(request.headers.get(handles.RELAY_HEADER), principal,
                                          self.clock(), request.method, request.path, raw)
        except PoolError as exc:  # kind "auth"
            self._log.warning("pool.relay_refused", reason=str(exc))
            return None
        if sender not in self.peers and sender != self.me and not self.open_members:
            self._log.warning("pool.relay_refused", reason="sender is not a pool member")
            return None
        return principal
