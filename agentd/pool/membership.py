"""Which pool peers are alive: probe outcomes and an injected clock in, transitions out.

Sans-IO (h11 style): one :class:`Membership` holds every peer's state; the IO
around it (the relay's prober) asks :meth:`Membership.due` which peers to probe
now, performs the probes, and feeds each outcome back with the time it was
observed.  Every call returns the transitions it caused as data
(:class:`Transition`), so the caller acts on them -- a peer turning ``dead``
is when its handles read the terminal "worker lost" body and their
subscribers get ``updated``; an incarnation change (the peer restarted, its
runs are gone) is the same event even if the peer never looked dead.

A *durable* peer (one that last answered ``durable: true``: it journals its
runs, ``--journal``, and its incarnation is its journal's id) keeps its runs
while it is down: its death is not a loss (``lost`` stays None), it holds its
handles through a restart on the same journal, and only an answer with
another incarnation (its journal is gone: a node loss) reports them lost.

States: ``alive`` (a probe answered within ``dead_after``), ``suspect`` (the
last probe failed or is overdue: the peer still owns its handles, new spawns
are not placed on it), ``dead`` (no answer for ``dead_after`` seconds,
``--pool-dead-after``).  A peer starts ``suspect`` until its first answer.
The bound from an owner's death to ``dead``: ``dead_after + interval +
timeout`` (the defaults make it 12 s, within the 15 s the pool promises, so
``dead_after`` is at most 12 s; docs/operations.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

__all__ = [
    "DEFAULT_DEAD_AFTER",
    "DEFAULT_PROBE_INTERVAL",
    "DEFAULT_PROBE_TIMEOUT",
    "DEFAULT_SUBSCRIBE_TIMEOUT",
    "MAX_DEAD_AFTER",
    "MAX_SUBSCRIBE_TIMEOUT",
    "Membership",
    "PeerState",
    "Transition",
]

DEFAULT_PROBE_INTERVAL: Final = 2.0
DEFAULT_PROBE_TIMEOUT: Final = 1.0
DEFAULT_DEAD_AFTER: Final = 9.0
LOST_BOUND_CAP: Final = 15.0  # dead_after + interval + timeout may not exceed it
# --pool-dead-after: its largest value keeps the bound within the cap
MAX_DEAD_AFTER: Final = LOST_BOUND_CAP - DEFAULT_PROBE_INTERVAL - DEFAULT_PROBE_TIMEOUT
# --pool-subscribe-timeout: s a subscribe or listen awaits the owners of its handles; an
# owner silent past it is held to the lost-owner rule (docs/operations.md "Pool")
DEFAULT_SUBSCRIBE_TIMEOUT: Final = 5.0
MAX_SUBSCRIBE_TIMEOUT: Final = 60.0  # a longer one is refused (exit 2)

Status = Literal["alive", "suspect", "dead"]


@dataclass(frozen=True, slots=True)
class Transition:
    """One peer's change: its new status, and whether its former runs are lost."""

    peer: str
    status: Status
    lost: bytes | None = None  # the incarnation whose runs are gone, if any


@dataclass(slots=True)
class PeerState:
    status: Status = "suspect"
    incarnation: bytes | None = None
    last_ok: float | None = None
    next_probe: float = 0.0
    in_flight: bool = False
    free: int = 0  # spawn slots the peer reported free with its last answer
    durable: bool = False  # its last answer said it journals its runs (they outlive it)

    def holds(self, incarnation: bytes, *, durable: bool = False) -> bool:
        """Whether the runs of ``incarnation`` still live with this peer: it has not
        answered with another incarnation, and it is not dead, unless durable (a
        durable peer that is down is restarting, its runs journaled).  ``durable``:
        the incarnation itself says so (a handle's, agentd.pool.handles), for a
        peer this worker has not yet heard answer."""
        if self.incarnation not in (None, incarnation):
            return False
        return self.status != "dead" or self.durable or durable


@dataclass(slots=True)
class Membership:
    """The pool's view from one worker (``me`` is never probed: it is alive)."""

    me: str
    interval: float = DEFAULT_PROBE_INTERVAL
    timeout: float = DEFAULT_PROBE_TIMEOUT
    dead_after: float = DEFAULT_DEAD_AFTER
    started: float = 0.0
    peers: dict[str, PeerState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if min(self.interval, self.timeout, self.dead_after) <= 0:
            raise ValueError("pool probe interval, timeout and dead_after must be positive")
        if self.bound > LOST_BOUND_CAP:
            raise ValueError(f"pool probe timing gives a {self.bound:g} s bound; "
                             f"at most {LOST_BOUND_CAP:g} s")

    @property
    def bound(self) -> float:
        """Seconds from a peer's death until this worker calls it dead, at most."""
        return self.dead_after + self.interval + self.timeout

    def set_peers(self, ids: set[str], now: float) -> list[Transition]:
        """The peer list (static flags or a DNS refresh): new ones are probed at
        once; one that left the list is dead (its runs are lost with it)."""
        out: list[Transition] = []
        ids = ids - {self.me}
        for gone in set(self.peers) - ids:
            state = self.peers.pop(gone)
            if state.status != "dead":
                out.append(Transition(gone, "dead", state.incarnation))
        for new in ids - set(self.peers):
            self.peers[new] = PeerState(next_probe=now, last_ok=None)
        if not self.started:
            self.started = now
        return out

    def due(self, now: float) -> list[str]:
        """Peers to probe now (each marked in flight until its outcome is fed)."""
        ready = [p for p, s in self.peers.items() if not s.in_flight and now >= s.next_probe]
        for p in ready:
            self.peers[p].in_flight = True
        return sorted(ready)

    def answered(self, peer: str, incarnation: bytes, free: int, now: float, *,
                 durable: bool = False) -> list[Transition]:
        """A probe answered with the peer's incarnation, free spawn slots and whether
        it journals its runs."""
        state = self.peers.get(peer)
        if state is None:
            return []
        out: list[Transition] = []
        state.in_flight = False
        state.next_probe = now + self.interval
        state.last_ok = now
        state.free = max(0, free)
        if state.incarnation is not None and state.incarnation != incarnation:
            out.append(Transition(peer, "alive", state.incarnation))  # restarted
        elif state.status != "alive":
            out.append(Transition(peer, "alive"))
        state.incarnation = incarnation
        state.durable = durable
        state.status = "alive"
        return out

    def failed(self, peer: str, now: float) -> list[Transition]:
        """A probe failed (refused, timed out, bad answer)."""
        state = self.peers.get(peer)
        if state is None:
            return []
        state.in_flight = False
        state.next_probe = now + self.interval
        return self._age(peer, state, now, failed=True)

    def tick(self, now: float) -> list[Transition]:
        """Peers whose answers are overdue age (a hung probe counts as failed)."""
        out: list[Transition] = []
        for peer, state in self.peers.items():
            out += self._age(peer, state, now, failed=False)
        return out

    def _age(self, peer: str, state: PeerState, now: float, *, failed: bool) -> list[Transition]:
        since = state.last_ok if state.last_ok is not None else self.started
        if state.status != "dead" and now - since >= self.dead_after:
            state.status = "dead"
            state.free = 0
            # a durable peer's runs are journaled: down is not lost
            return [Transition(peer, "dead", None if state.durable else state.incarnation)]
        overdue = failed or now - since >= self.interval + self.timeout
        if state.status == "alive" and overdue:
            state.status = "suspect"
            return [Transition(peer, "suspect")]
        return []

    def status(self, peer: str) -> Status | None:
        """A peer's status (``alive`` for this worker itself; None if not a member)."""
        if peer == self.me:
            return "alive"
        state = self.peers.get(peer)
        return state.status if state is not None else None

    def place(self) -> str | None:
        """The alive peer with the most free spawn slots (ties: by id), or None."""
        room = [(-s.free, p) for p, s in self.peers.items() if s.status == "alive" and s.free > 0]
        return min(room)[1] if room else None
