"""Owner-naming, unguessable handles and session ids, and the relay's request MAC.

Sans-IO: every function is pure over its arguments (the random part and the
clock are passed in), so the one rule is testable without a socket.

A pool handle is ``served.<owner>.<token>[.<child>...]``: ``owner`` is the
minting worker's ``--pool-id`` (DNS-label characters, so it never holds a
dot), ``token`` is lower-case base32 (no padding) of ``incarnation (5 bytes)
|| random (10 bytes) || mac (10 bytes)`` where ``mac`` is HMAC-SHA256 with the
pool key over the owner, the incarnation, the random part and the principal
that spawned it, truncated.  Why each part:

* the owner tells any worker where to relay, without a lookup;
* the incarnation (random per process start, or the journal's id for a worker
  with ``--journal``, so its handles outlive a restart) lets a restarted owner
  answer a handle of its former self with the terminal "worker lost" body
  instead of "unknown handle"; its first bit says which of the two it is
  (:func:`incarnation`), so any worker can tell from a verified handle alone
  that its owner journals its runs, even one that has never heard that owner
  answer a probe (it started while the owner was down);
* the principal inside the MAC makes the ownership rule checkable by every
  worker: another principal's handle fails verification, so it is unknown
  everywhere, the same answer a single worker gives;
* the MAC makes a forged or altered handle unknown everywhere (checked in
  constant time), before anything is relayed.

A 2025-11-25 session id is ``<owner>.<mac>.<server's id>`` (the MAC's domain
differs, and no principal is bound: the session's own bearer check applies
on the owner).  Both stay within the visible-ASCII
characters the MCP specification allows in ``Mcp-Session-Id``.

The relay's request MAC (:func:`sign_request` / :class:`RelayVerifier`) binds
the sending worker, the RECEIVING worker, a millisecond timestamp, a nonce,
the method, the path, the body's SHA-256 and the caller's principal, all
carried in the request's head, so a request is authenticated before its body
is read (an unauthenticated one never costs more than its head).  A captured
request cannot be replayed:

* to another worker, or back to its sender: the receiver is bound, and a
  verifier accepts only requests naming itself;
* to its receiver, while it runs: the timestamp must lie within
  ``RELAY_SKEW`` seconds of the receiver's clock, and a nonce already seen in
  that window is refused (the memory holds ``MAX_NONCES``; past it requests
  are refused until the window moves on, never accepted unchecked);
* to its receiver after a restart: a timestamp before the receiver's own
  start is refused, so the empty nonce memory of a new process is never the
  only check (this leans on the pool's clocks agreeing to well within a
  restart's duration; docs/security.md "The pool link").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections import OrderedDict
from typing import Final, NamedTuple

from agentd.errors import PoolError

__all__ = [
    "INCARNATION_BYTES",
    "MAX_POOL_ID",
    "MIN_KEY_BYTES",
    "POOL_ID_RE",
    "RELAY_HEADER",
    "RELAY_PRINCIPAL_HEADER",
    "RELAY_SKEW",
    "HandleRef",
    "PoolKey",
    "RelayVerifier",
    "Signed",
    "body_digest",
    "incarnation",
    "mint_handle",
    "mint_session",
    "parse_handle",
    "probe_mac",
    "sign_request",
    "token_incarnation",
    "verify_session",
]

SERVED: Final = "served"
POOL_ID_RE: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
MAX_POOL_ID: Final = 63  # one DNS label
MIN_KEY_BYTES: Final = 16  # a shorter pool key is refused at start (exit 2)
INCARNATION_BYTES: Final = 5
RANDOM_BYTES: Final = 10
MAC_BYTES: Final = 10
_TOKEN_BYTES: Final = INCARNATION_BYTES + RANDOM_BYTES + MAC_BYTES
_TOKEN_CHARS: Final = 40  # base32 of 25 bytes, unpadded
_TOKEN_RE: Final = re.compile(r"[a-z2-7]{40}")
MAX_HANDLE: Final = 512  # a longer handle is unknown without being parsed
DURABLE_MARK: Final = 0x80  # an incarnation's first bit: its worker journals its runs

RELAY_HEADER: Final = "Agentd-Pool-Auth"
RELAY_PRINCIPAL_HEADER: Final = "Agentd-Pool-Principal"
RELAY_SKEW: Final = 30.0  # seconds a relay request's timestamp may be off
MAX_NONCES: Final = 65536  # replay memory; a request beyond it inside the window is refused


def _refused(message: str) -> PoolError:
    """A relay request whose authentication fails (the relay answers 401)."""
    return PoolError(message, kind="auth")


class PoolKey:
    """The pool's shared secret; its repr never shows it."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the pool key needs at least {MIN_KEY_BYTES} bytes")
        self._key = key

    def __repr__(self) -> str:
        return "PoolKey(***)"

    def mac(self, *parts: bytes) -> bytes:
        """HMAC-SHA256 over the parts, each length-prefixed (no two splits collide)."""
        m = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in parts:
            m.update(len(part).to_bytes(4, "big"))
            m.update(part)
        return m.digest()


def incarnation(seed: bytes, *, durable: bool) -> bytes:
    """A worker's incarnation from the first bytes of ``seed`` (its journal's id,
    or random per process), its first bit set when ``durable`` (``--journal``)
    and clear otherwise.  The bit lies under every handle's MAC, so it cannot be
    set on a handle by anyone but the owner."""
    head = seed[0] | DURABLE_MARK if durable else seed[0] & ~DURABLE_MARK
    return bytes([head]) + seed[1:INCARNATION_BYTES]


class HandleRef(NamedTuple):
    """A verified pool handle: who owns it, which incarnation, its top handle."""

    owner: str
    incarnation: bytes
    top: str  # served.<owner>.<token>: the run the whole subtree belongs to

    @property
    def durable(self) -> bool:
        """Minted by a worker with a journal: its run outlives the owner's process."""
        return bool(self.incarnation[0] & DURABLE_MARK)


def _b32(raw: bytes) -> str:
    return base64.b32encode(raw).decode().rstrip("=").lower()


def _unb32(text: str) -> bytes:
    return base64.b32decode(text.upper() + "=" * (-len(text) % 8))


def _token(key: PoolKey, domain: bytes, owner: str, incarnation: bytes, rand: bytes,
           principal: str) -> str:
    mac = key.mac(domain, owner.encode(), incarnation, rand, principal.encode())[:MAC_BYTES]
    return _b32(incarnation + rand + mac)


def _check(key: PoolKey, domain: bytes, owner: str, token: str, principal: str) -> bytes | None:
    """The incarnation of a valid token, else None (constant-time MAC compare)."""
    if POOL_ID_RE.fullmatch(owner) is None or _TOKEN_RE.fullmatch(token) is None:
        return None
    raw = _unb32(token)
    inc, rand = raw[:INCARNATION_BYTES], raw[INCARNATION_BYTES:INCARNATION_BYTES + RANDOM_BYTES]
    want = key.mac(domain, owner.encode(), inc, rand, principal.encode())[:MAC_BYTES]
    return inc if hmac.compare_digest(want, raw[-MAC_BYTES:]) else None


def token_incarnation(token: str) -> bytes:
    """The incarnation a handle's token carries, unverified (a worker reading the
    names its own journal kept); ValueError for what is not a token."""
    if _TOKEN_RE.fullmatch(token) is None:
        raise ValueError("not a pool handle's token")
    return _unb32(token)[:INCARNATION_BYTES]


def mint_handle(key: PoolKey, owner: str, incarnation: bytes, rand: bytes,
                principal: str) -> str:
    """``served.<owner>.<token>`` for a run ``principal`` spawned on ``owner``."""
    assert len(incarnation) == INCARNATION_BYTES and len(rand) == RANDOM_BYTES
    return f"{SERVED}.{owner}.{_token(key, b'handle', owner, incarnation, rand, principal)}"


def parse_handle(key: PoolKey, handle: str, principal: str) -> HandleRef | None:
    """The verified owner of ``handle`` (or of the run whose subtree it names) for
    ``principal``; None for anything forged, altered, malformed or another
    principal's -- the caller answers "unknown handle" without relaying."""
    if len(handle) > MAX_HANDLE:
        return None
    parts = handle.split(".")
    if len(parts) < 3 or parts[0] != SERVED or not all(p.isdigit() for p in parts[3:]):
        return None
    owner, token = parts[1], parts[2]
    inc = _check(key, b"handle", owner, token, principal)
    if inc is None:
        return None
    return HandleRef(owner, inc, f"{SERVED}.{owner}.{token}")


_LOCAL_SID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")  # what the server mints


def _session_mac(key: PoolKey, owner: str, local: str) -> str:
    return _b32(key.mac(b"session", owner.encode(), local.encode())[:MAC_BYTES])


def mint_session(key: PoolKey, owner: str, local: str) -> str:
    """The pool's ``Mcp-Session-Id`` for the session ``local`` held by ``owner``:
    ``<owner>.<mac>.<local>`` (the server's own id stays inside, so the mapping
    needs no table)."""
    return f"{owner}.{_session_mac(key, owner, local)}.{local}"


def verify_session(key: PoolKey, session_id: str) -> tuple[str, str] | None:
    """``(owner, local id)`` of a pool session id; None for a forged or malformed one."""
    if len(session_id) > MAX_HANDLE:
        return None
    parts = session_id.split(".")
    if len(parts) != 3 or POOL_ID_RE.fullmatch(parts[0]) is None \
            or _LOCAL_SID_RE.fullmatch(parts[2]) is None:
        return None
    owner, mac, local = parts
    want = _session_mac(key, owner, local)
    return (owner, local) if hmac.compare_digest(want.encode(), mac.encode()) else None


def body_digest(body: bytes) -> str:
    """The SHA-256 (hex) of a relayed body, as the request's head carries it."""
    return hashlib.sha256(body).hexdigest()


def _request_mac(key: PoolKey, sender: str, receiver: str, ts_ms: int, nonce: str,
                 method: str, path: str, digest: str, principal: str) -> str:
    return key.mac(b"relay2", sender.encode(), receiver.encode(), str(ts_ms).encode(),
                   nonce.encode(), method.encode(), path.encode(), digest.encode(),
                   principal.encode()).hex()


def sign_request(key: PoolKey, sender: str, now: float, nonce: str, method: str, path: str,
                 body: bytes, principal: str, *, receiver: str) -> dict[str, str]:
    """The headers a relayed request carries:
    ``Agentd-Pool-Auth: v2 sender,receiver,ts_ms,nonce,body_sha256,mac`` and the
    caller's principal (bound by the MAC, so it cannot be swapped).  ``receiver``
    is the worker the request is for ("" only for a probe of an address whose
    worker is not known yet, ``--pool-dns``)."""
    ts_ms = int(now * 1000)
    digest = body_digest(body)
    mac = _request_mac(key, sender, receiver, ts_ms, nonce, method, path, digest, principal)
    return {RELAY_HEADER: f"v2 {sender},{receiver},{ts_ms},{nonce},{digest},{mac}",
            RELAY_PRINCIPAL_HEADER: principal}


def probe_mac(key: PoolKey, worker: str, incarnation: str, free: int, nonce: str, *,
              durable: bool = False) -> str:
    """The MAC of a probe's answer: the answering worker's id, incarnation, free
    slots and whether it is durable (journals its runs: its peers then hold its
    handles while it is down), bound to the probing request's nonce, so an answer
    is neither forged nor replayed to learn a wrong id for an address
    (``--pool-dns``) nor altered to make a peer's runs look lost or kept.  A
    non-durable answer's MAC is the one an agentd without journals computes."""
    parts = [worker.encode(), incarnation.encode(), str(free).encode(), nonce.encode()]
    if durable:
        parts.append(b"durable")
    return key.mac(b"probe", *parts).hex()


class Signed(NamedTuple):
    """A relay request's head that passed :meth:`RelayVerifier.verify`: its body
    must still hash to ``digest`` (:meth:`RelayVerifier.check_body`)."""

    sender: str
    digest: str


_DIGEST_RE: Final = re.compile(r"[0-9a-f]{64}")


class RelayVerifier:
    """Checks relayed requests for one receiving worker (``me``): the MAC over
    the head, the receiver, the timestamp window, the worker's start and the
    nonce memory; then the body against the digest the head carries."""

    def __init__(self, key: PoolKey, me: str, *, started: float, skew: float = RELAY_SKEW,
                 max_nonces: int = MAX_NONCES) -> None:
        self.key = key
        self.me = me
        self.started_ms = int(started * 1000)  # requests stamped earlier are refused
        self.skew = skew
        self.max_nonces = max_nonces
        self._seen: OrderedDict[str, float] = OrderedDict()  # nonce -> its timestamp (s)

    def verify(self, header: str | None, principal: str | None, now: float, method: str,
               path: str, *, unnamed: bool = False) -> Signed:
        """The head's sender and body digest; raises a PoolError of kind "auth" on
        any failure.  ``unnamed``: a request naming no receiver is accepted too
        (a probe, whose answer names the worker)."""
        if not header or principal is None or len(header) > 512 or len(principal) > 256:
            raise _refused("relay request: missing or oversized authentication")
        version, _, rest = header.partition(" ")
        if version == "v1":
            raise _refused("relay request: v1 authentication (an older agentd); "
                           "run one agentd version across the pool")
        fields = rest.split(",")
        if version != "v2" or len(fields) != 6:
            raise _refused("relay request: malformed authentication")
        sender, receiver, ts_text, nonce, digest, mac = fields
        if not ts_text.isdigit() or len(ts_text) > 16 or not 8 <= len(nonce) <= 64 \
                or _DIGEST_RE.fullmatch(digest) is None:
            raise _refused("relay request: malformed authentication")
        ts_ms = int(ts_text)
        want = _request_mac(self.key, sender, receiver, ts_ms, nonce, method, path, digest,
                            principal)
        if not hmac.compare_digest(want.encode(), mac.encode()):
            raise _refused("relay request: bad MAC")
        if receiver != self.me and not (unnamed and receiver == ""):
            raise _refused("relay request: addressed to another worker")
        ts = ts_ms / 1000
        if abs(now - ts) > self.skew:
            raise _refused("relay request: stale timestamp")
        if ts_ms < self.started_ms:
            raise _refused("relay request: stamped before this worker started")
        self._forget(now)
        if nonce in self._seen:
            raise _refused("relay request: replayed")
        if len(self._seen) >= self.max_nonces:
            raise _refused("relay request: replay memory full")
        self._seen[nonce] = ts
        return Signed(sender, digest)

    @staticmethod
    def check_body(signed: Signed, body: bytes) -> None:
        """Raises a PoolError of kind "auth" unless ``body`` is the one the head signed."""
        if not hmac.compare_digest(body_digest(body).encode(), signed.digest.encode()):
            raise _refused("relay request: body does not match its signed digest")

    def _forget(self, now: float) -> None:
        """Drop nonces whose timestamps the window already refuses."""
        seen = self._seen
        while seen:
            nonce, ts = next(iter(seen.items()))
            if now - ts <= self.skew:
                # insertion order is close to timestamp order; a later, older entry
                # is dropped once it reaches the front
                break
            del seen[nonce]
