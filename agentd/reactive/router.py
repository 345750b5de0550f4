"""The reactive router: resource updates in, debounced and coalesced wakes out.

Two halves, in the sans-IO style of the session layer:

* `Coalescer` — pure state, no clock and no I/O of its own. It is told of each
  update (`notify(uri, now)`) and asked for the next wake (`take(now)`,
  `due_at()`). Updates are coalesced per URI: the pending set holds each URI
  once, with how many updates were folded into it, so a burst of any size costs
  one entry. The pending set is bounded (`capacity` distinct URIs); an update
  for a new URI beyond it is not dropped silently: the next wake is marked
  `resync`, which tells the consumer to re-read every watched URI. Delivery is
  therefore at-least-once, and because the consumer always reads current state
  (notify-then-read, spec §1.6) it converges on it.

* `Router` — the asyncio driver. `notify()` feeds it (synchronously, from the
  event loop), `pump(queue)` feeds it from an MCP client's `updates` queue of
  `(server, uri)`, and `next_wake()` waits for the next due wake. The router
  owns no task: whoever runs `pump()` runs it inside its own TaskGroup.

Debounce is trailing-edge: a wake becomes due `window` seconds after the last
update to reach the pending set, but never later than `max_delay` after the
first one (so a steady stream cannot starve the loop). With `window == 0` a
wake is due as soon as there is anything pending. While the consumer is busy
(running the loop for the previous wake) updates simply accumulate, coalesced,
and are all handed over in one wake when it next asks: a burst of 1,000 updates
on one URI gives a few wakes, and the last of them is taken after the last
update, so the read it triggers sees the final state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import msgspec

from agentd.log import log
from agentd.obs import metrics

DEFAULT_CAPACITY = 1024
MAX_DELAY_FACTOR = 10  # default max_delay = window * this
_LOGGED_URIS = 32  # a wake log line names at most this many URIs


class Wake(msgspec.Struct, frozen=True):
    """One wake of the loop: which URIs changed, and how often, since the last."""

    seq: int
    uris: tuple[str, ...]  # in the order they first became pending
    counts: dict[str, int]  # updates coalesced per URI
    resync: bool = False  # the pending set overflowed: re-read every watched URI
    overflow: int = 0  # updates folded into `resync` (their URIs are not named)

    @property
    def coalesced(self) -> int:
        """How many updates this one wake stands for."""
        return sum(self.counts.values()) + self.overflow


class Coalescer:
    """Sans-IO core: per-URI coalescing, trailing debounce, bounded pending set."""

    __slots__ = (
        "_counts",
        "_first",
        "_last",
        "_overflow",
        "_resync",
        "_seq",
        "capacity",
        "max_delay",
        "received",
        "wakes",
        "window",
    )

    def __init__(self, window: float = 0.0, *, max_delay: float | None = None,
                 capacity: int = DEFAULT_CAPACITY) -> None:
        if window < 0:
            raise ValueError("debounce window must not be negative")
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.window = window
        self.max_delay = window * MAX_DELAY_FACTOR if max_delay is None else max(max_delay, window)
        self.capacity = capacity
        self._counts: dict[str, int] = {}  # insertion-ordered: first-notified first
        self._first = 0.0
        self._last = 0.0
        self._overflow = 0
        self._resync = False
        self._seq = 0
        self.received = 0  # updates ever notified
        self.wakes = 0  # wakes ever taken

    @property
    def pending(self) -> bool:
        return bool(self._counts) or self._resync

    def pending_uris(self) -> tuple[str, ...]:
        return tuple(self._counts)

    def notify(self, uri: str, now: float) -> bool:
        """Record one update. Returns True if the pending set was empty before
        (the moment a waiting consumer needs to be told)."""
        was_empty = not self.pending
        self.received += 1
        counts = self._counts
        if uri in counts:
            counts[uri] += 1
        elif len(counts) < self.capacity:
            counts[uri] = 1
        else:
            self._resync = True
            self._overflow += 1
        if was_empty:
            self._first = now
        self._last = now
        return was_empty

    def due_at(self) -> float | None:
        """When the pending updates make a wake (None: nothing pending)."""
        if not self.pending:
            return None
        if self.window == 0:
            return self._first
        return min(self._last + self.window, self._first + self.max_delay)

    def take(self, now: float) -> Wake | None:
        """The next wake if one is due at `now`, clearing the pending set."""
        due = self.due_at()
        if due is None or now < due:
            return None
        self._seq += 1
        self.wakes += 1
        wake = Wake(seq=self._seq, uris=tuple(self._counts), counts=self._counts,
                    resync=self._resync, overflow=self._overflow)
        self._counts = {}
        self._resync = False
        self._overflow = 0
        return wake

    def flush(self) -> Wake | None:
        """Whatever is pending, due or not (used when draining)."""
        if not self.pending:
            return None
        return self.take(float("inf"))


class Router:
    """The asyncio driver around a `Coalescer`.

    `claim`, if given, is offered each update first (the `await_resource`
    waiters, `agentd.reactive.waiters.Waiters.claim`): an update it claims
    has been delivered to a run that was blocked waiting for exactly it and
    does not also make a wake.
    """

    def __init__(self, window: float = 0.0, *, max_delay: float | None = None,
                 capacity: int = DEFAULT_CAPACITY,
                 claim: Callable[[str], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.core = Coalescer(window, max_delay=max_delay, capacity=capacity)
        self.claim = claim
        self.clock = clock
        self._ready = asyncio.Event()
        self._closed = False
        self.claimed = 0
        self._log = log.bind(component="reactive")

    # -- feeding ---------------------------------------------------------
    def notify(self, uri: str) -> None:
        """One `notifications/resources/updated{uri}` (or a synthesized one)."""
        if self.claim is not None and self.claim(uri):
            self.claimed += 1
            return
        if self.core.notify(uri, self.clock()):
            self._ready.set()

    async def pump(self, updates: asyncio.Queue[Any]) -> None:
        """Feed from an MCP client/toolbox `updates` queue of `(server, uri)`
        (or bare URIs) until cancelled. Run it in the owner's TaskGroup."""
        while True:
            item = await updates.get()
            uri = item[1] if isinstance(item, tuple) else item
            self.notify(uri)
            # Drain whatever else is already queued without yielding per item.
            while True:
                try:
                    item = updates.get_nowait()
                except asyncio.QueueEmpty:
                    break
                self.notify(item[1] if isinstance(item, tuple) else item)

    # -- consuming -------------------------------------------------------
    def take_now(self) -> Wake | None:
        """The next wake if one is due right now, without waiting."""
        wake = self.core.take(self.clock())
        if wake is not None:
            self._logwake(wake)
        return wake

    async def next_wake(self) -> Wake | None:
        """Wait for the next due wake; None once the router is closed and empty."""
        core = self.core
        while True:
            now = self.clock()
            wake = core.take(now)
            if wake is not None:
                self._logwake(wake)
                return wake
            if self._closed:
                return None
            due = core.due_at()
            self._ready.clear()
            if due is None:
                await self._ready.wait()
            else:
                # Trailing debounce: later updates only push `due` later, so
                # sleeping to the old `due` and re-checking is enough.
                try:
                    async with asyncio.timeout(due - now):
                        await self._ready.wait()
                except TimeoutError:
                    pass

    def close(self) -> None:
        """Stop waiting: `next_wake()` still returns a wake that is already due,
        then returns None (`drain()` takes what is pending but not due)."""
        self._closed = True
        self._ready.set()

    def drain(self) -> Wake | None:
        """Take whatever is pending, due or not (logged as a wake)."""
        wake = self.core.flush()
        if wake is not None:
            self._logwake(wake)
        return wake

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> dict[str, int]:
        return {"received": self.core.received, "wakes": self.core.wakes,
                "claimed": self.claimed}

    def _logwake(self, wake: Wake) -> None:
        metrics.WAKES.inc()
        if wake.coalesced > 1:
            metrics.COALESCED.inc(n=wake.coalesced - 1)
        uris = list(wake.uris[:_LOGGED_URIS])
        self._log.info("reactive.wake", seq=wake.seq, uris=uris,
                       more_uris=max(0, len(wake.uris) - _LOGGED_URIS),
                       coalesced=wake.coalesced, resync=wake.resync)
