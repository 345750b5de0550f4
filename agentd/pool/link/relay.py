"""The worker-to-worker relay: one authenticated POST per relayed handle operation.

A worker that receives ``subagent.status``/``send``/``cancel`` or a
``resources/read`` for a handle another pool member owns sends the operation
to the owner's ``--serve-mcp`` listener at ``POST /pool/relay``, signed by
:func:`agentd.pool.handles.sign_request` (the pool key over the sender, the
receiver, a timestamp, a nonce, the path, the body's digest and the caller's
principal).  The owner verifies the head before it reads the body
(:class:`~agentd.pool.handles.RelayVerifier`: bad MAC, another receiver,
stale timestamp or replayed nonce -> 401 and the connection closed, logged
throttled), so an unauthenticated request costs no more than its head and one
socket read; an authenticated one marks its connection authenticated in the
listener's connection gate (a pool link is never evicted as an idle
stranger), then its body is read whole -- up to ``MAX_RELAY_BYTES``, 413
naming the bound past it -- and checked against the signed digest.  The
owner runs the operation exactly as for a local caller of that principal and
answers one :class:`RelayAnswer`, which the caller reads whole (within the
same bound) and decodes through the guarded entry (``agentd.wire.guard``).
The route is outside the bearer guard of the MCP endpoint: the pool key is
its credential; over https the link is the listener's own TLS, so with
``--serve-client-ca`` the handshake asks for a certificate of the pool's CA
before the MAC is looked at (docs/operations.md, "The link over https").

IO only: what an operation means is the :class:`RelayTarget`'s (the self-MCP).
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import ssl
import time
from collections.abc import AsyncIterable, Callable
from typing import Any, Final, Literal, Protocol

import aiohttp
import msgspec
from aiohttp import web

from agentd.errors import PoolError
from agentd.log import log
from agentd.log_bridge import throttled
from agentd.obs import metrics
from agentd.pool import handles
from agentd.wire.guard import decode_peer

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
    "decode_answer",
    "read_whole",
]

RELAY_PATH: Final = "/pool/relay"
PROBE_PATH: Final = "/pool/probe"
MAX_RELAY_BYTES: Final = 4 * 1024 * 1024  # one relayed request or answer; past it: 413 / failed
MAX_PROBE_BYTES: Final = 256  # one probe's body (a nonce)
BOUND_TEXT: Final = "4 MiB"  # MAX_RELAY_BYTES as the errors name it
BODY_TIMEOUT: Final = 30.0  # s to read a relayed body (the listener's body_timeout when mounted)
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


class RelayAnswer(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``body``: the run's §2.3 body; ``unknown``: the one unknown-handle answer;
    ``refused``: a refusal in the tree's words (``text``)."""

    kind: Literal["body", "unknown", "refused"]
    body: dict[str, Any] | None = None
    text: str | None = None


class ProbeAnswer(msgspec.Struct, frozen=True, omit_defaults=True):
    """A liveness probe's answer: the process's incarnation (hex), free spawn slots,
    the answering worker's ``--pool-id``, ``durable`` (it journals its runs, so its
    incarnation is its journal's id and its runs outlive it) and
    :func:`~agentd.pool.handles.probe_mac` over them and the probe's nonce
    (``--pool-dns`` learns a peer's id from it).  Defaults are not sent: a worker
    without a journal answers the bytes an agentd without journals does."""

    incarnation: str
    free: int
    id: str = ""
    mac: str = ""
    durable: bool = False


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


def decode_answer(raw: bytes, peer: str) -> RelayAnswer:
    """A peer's relay answer, through the guarded entry: anything it refuses
    (not JSON, an unknown member, nested too deeply, a number out of range) is a
    PoolError of kind "unavailable" naming the peer and the fault."""
    return decode_peer(_decode_answer, raw, lambda text: _unavailable(
        f"pool: worker {peer} sent a bad relay answer: {text}"))


async def read_whole(chunks: AsyncIterable[bytes], limit: int) -> bytes | None:
    """Every byte of a body, however it arrives (``StreamReader.read(n)`` returns
    what is buffered, not ``n`` bytes); None as soon as it passes ``limit``."""
    buf = bytearray()
    async for chunk in chunks:
        buf += chunk
        if len(buf) > limit:
            return None
    return bytes(buf)


Authenticated = Callable[[web.BaseRequest], None]


def _refuse(status: int, text: str) -> web.Response:
    """A refusal that closes the connection: nothing more is read from that peer."""
    resp = web.Response(status=status, text=text)
    resp.force_close()
    return resp


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
        # requests stamped before this process started are refused (replay after a restart)
        self.verifier = handles.RelayVerifier(key, me, started=clock())
        self._session: aiohttp.ClientSession | None = None
        self._log = log.bind(component="pool")

    # ------------------------------------------------------------ client
    async def call(self, peer: str, request: RelayRequest, principal: str) -> RelayAnswer:
        """The owner's answer; raises a PoolError of kind "unavailable" when there is none."""
        metrics.POOL_RELAYED.inc("out", request.op)
        raw = await self._post(peer, RELAY_PATH, _encode(request), principal, self.timeout)
        try:
            return decode_answer(raw, peer)
        except PoolError as exc:
            throttled(self._log, "warning", "pool.relay_failed", key=f"{peer}/answer",
                      peer=peer, op=request.op, error=str(exc))
            raise

    async def probe(self, peer: str, limit: float) -> ProbeAnswer:
        """One liveness probe of ``peer``; raises a PoolError of kind "unavailable"."""
        base = self.peers.get(peer)
        if base is None:
            raise _unavailable(f"pool: {peer!r} is not a member of this pool")
        answer = await self.probe_url(base, limit, receiver=peer)
        if answer.id != peer:
            raise _unavailable(f"pool: {base} answers as {answer.id!r}, not {peer!r}")
        return answer

    async def probe_url(self, base: str, limit: float, *, receiver: str = "") -> ProbeAnswer:
        """One probe of the worker at ``base`` (``receiver``: its id, "" when not yet
        known): its answer, whose MAC (bound to this probe's nonce) is checked;
        raises a PoolError of kind "unavailable"."""
        nonce = secrets.token_hex(12)
        raw = await self._post_url(base, receiver, base, PROBE_PATH, _encode(ProbeRequest(nonce)),
                                   "", limit)
        answer = decode_peer(_decode_probe, raw, lambda text: _unavailable(
            f"pool: worker at {base} answered a bad probe: {text}"))
        want = handles.probe_mac(self.key, answer.id, answer.incarnation, answer.free, nonce,
                                 durable=answer.durable)
        if not hmac.compare_digest(want.encode(), answer.mac.encode()):
            raise _unavailable(f"pool: worker at {base} answered an unsigned probe")
        return answer

    async def _post(self, peer: str, path: str, body: bytes, principal: str,
                    limit: float) -> bytes:
        base = self.peers.get(peer)
        if base is None:
            raise _unavailable(f"pool: {peer!r} is not a member of this pool")
        if len(body) > MAX_RELAY_BYTES:
            raise _unavailable(f"pool: a relayed request of {len(body)} bytes exceeds the "
                               f"relay's bound of {BOUND_TEXT}")
        return await self._post_url(peer, peer, base, path, body, principal, limit)

    async def _post_url(self, peer: str, receiver: str, base: str, path: str, body: bytes,
                        principal: str, limit: float) -> bytes:
        session = self.client()
        headers = handles.sign_request(self.key, self.me, self.clock(), secrets.token_hex(12),
                                       "POST", path, body, principal, receiver=receiver)
        headers["Content-Type"] = "application/json"
        relayed = path == RELAY_PATH  # a probe's failure is the membership's to log
        try:
            async with session.post(base + path, data=body, headers=headers,
                                    timeout=aiohttp.ClientTimeout(total=limit),
                                    ssl=self.ssl_arg()) as resp:
                if resp.status != 200:
                    if relayed:
                        throttled(self._log, "warning", "pool.relay_failed",
                                  key=f"{peer}/{resp.status}", peer=peer, status=resp.status)
                    raise _unavailable(f"pool: worker {peer} answered HTTP {resp.status}")
                length = resp.content_length
                raw = None if length is not None and length > MAX_RELAY_BYTES \
                    else await read_whole(resp.content.iter_any(), MAX_RELAY_BYTES)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if relayed:
                throttled(self._log, "warning", "pool.relay_failed",
                          key=f"{peer}/{type(exc).__name__}", peer=peer,
                          error=type(exc).__name__)
            raise _unavailable(f"pool: worker {peer} is unreachable") from None
        if raw is None:
            throttled(self._log, "warning", "pool.relay_failed", key=f"{peer}/too_large",
                      peer=peer, error="answer_too_large", limit=MAX_RELAY_BYTES)
            raise _unavailable(f"pool: worker {peer} answered more than the relay's bound of "
                               f"{BOUND_TEXT}")
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
    def mount(self, app: web.Application, target: RelayTarget, *,
              authenticated: Authenticated | None = None,
              body_timeout: float = BODY_TIMEOUT) -> None:
        """``POST /pool/relay`` and ``/pool/probe`` on the listener's app, answering for
        ``target``; ``authenticated(request)`` tells the listener's connection gate
        that a request passed the pool's authentication."""
        async def read(request: web.Request, limit: int) -> bytes | web.Response:
            if (request.content_length or 0) > limit:
                return self._too_large(limit)
            try:
                async with asyncio.timeout(body_timeout):
                    raw = await read_whole(request.content.iter_any(), limit)
            except TimeoutError:
                throttled(self._log, "warning", "pool.relay_refused", key="body_timeout",
                          reason="body_timeout", timeout=body_timeout)
                return _refuse(408, "relay request body not received in time")
            return self._too_large(limit) if raw is None else raw

        async def admitted(request: web.Request, limit: int, *,
                           unnamed: bool = False) -> tuple[str, bytes] | web.Response:
            """The principal and the whole body of an authenticated request, else
            the refusal (the head is checked before a byte of the body is read)."""
            principal = request.headers.get(handles.RELAY_PRINCIPAL_HEADER)
            try:
                signed = self.verifier.verify(request.headers.get(handles.RELAY_HEADER),
                                              principal, self.clock(), request.method,
                                              request.path, unnamed=unnamed)
                if signed.sender not in self.peers and signed.sender != self.me \
                        and not self.open_members:
                    raise PoolError("relay request: sender is not a pool member", kind="auth")
            except PoolError as exc:  # kind "auth"
                return self._unauthorized(str(exc))
            if authenticated is not None:
                authenticated(request)
            raw = await read(request, limit)
            if isinstance(raw, web.Response):
                return raw
            try:
                self.verifier.check_body(signed, raw)
            except PoolError as exc:
                return self._unauthorized(str(exc))
            assert principal is not None
            return principal, raw

        async def relay(request: web.Request) -> web.Response:
            got = await admitted(request, MAX_RELAY_BYTES)
            if isinstance(got, web.Response):
                return got
            principal, raw = got
            try:
                op = decode_peer(_decode_request, raw, ValueError)
            except ValueError as exc:
                return web.Response(status=400, text=f"bad relay request: {exc}"[:300])
            metrics.POOL_RELAYED.inc("in", op.op)
            answer = await target.relayed(op, principal)
            self._log.info("pool.relayed", op=op.op, kind=answer.kind)
            return web.Response(body=_encode(answer), content_type="application/json")

        async def probe(request: web.Request) -> web.Response:
            got = await admitted(request, MAX_PROBE_BYTES, unnamed=True)
            if isinstance(got, web.Response):
                return got
            try:
                nonce = decode_peer(_decode_probe_request, got[1], ValueError).nonce
            except ValueError as exc:
                return web.Response(status=400, text=f"bad probe: {exc}"[:300])
            answer = target.probe_answer()
            mac = handles.probe_mac(self.key, self.me, answer.incarnation, answer.free, nonce,
                                    durable=answer.durable)
            return web.Response(body=_encode(msgspec.structs.replace(answer, id=self.me, mac=mac)),
                                content_type="application/json")

        app.router.add_post(RELAY_PATH, relay)
        app.router.add_post(PROBE_PATH, probe)

    def _unauthorized(self, reason: str) -> web.Response:
        """401, logged throttled per reason (a flood is a few lines carrying
        ``suppressed``), and the connection closed."""
        throttled(self._log, "warning", "pool.relay_refused", key=reason, reason=reason)
        return _refuse(401, "relay authentication failed")

    def _too_large(self, limit: int) -> web.Response:
        throttled(self._log, "warning", "pool.relay_refused", key="too_large",
                  reason="body_too_large", limit=limit)
        bound = BOUND_TEXT if limit == MAX_RELAY_BYTES else f"{limit} bytes"
        return _refuse(413, f"relay request too large: the bound is {bound}")
