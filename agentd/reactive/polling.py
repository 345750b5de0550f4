"""Polling: watching a URI whose server cannot deliver `updated` to us.

FastMCP 4 never offers subscriptions, mcp-proxy hides the capability, a
session-era server without a GET stream accepts a subscription it can never
deliver. The reactive daemon watches such a URI by re-reading it every
`--poll-interval` seconds and waking when the body differs from the last one
read (docs/reactive.md). The rules are here as data, fed `now`:

* `PollPlan` (sans-IO, no clock of its own): which URIs are polled, when each
  is next due, the digest of the last body read, whether a read failure
  starts a streak (logged once) or ends one;
* `Poller`: the thin asyncio driver. It sleeps until the plan's next due time
  (or until the set of polled URIs changes), reads each due URI through the
  daemon's `read` (the toolbox read, under the run's fault policy) and calls
  `wake(uri)` on a change. It owns no task: its owner runs `run()` in its
  TaskGroup.

A URI's first read is its baseline and wakes nothing; `Poller.add` takes it
before returning, so a change made once the watch began (once the daemon
logged `reactive.ready`) is seen by the next read. Polls are spaced `interval` apart from the start of the previous one,
never bunched to catch up after a slow read. Memory per URI is one digest.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from enum import Enum

from agentd.log import log
from agentd.mcp.client.rules.faults import kind as fault_kind
from agentd.mcp.client.seams import Observed

__all__ = ["Change", "PollPlan", "Poller"]

_log = log.bind(component="reactive")


class Change(Enum):
    """What one read told the plan."""

    BASELINE = "baseline"  # the first body read for the URI: nothing to compare
    SAME = "same"
    CHANGED = "changed"


_STALE = b""  # no body's digest: the next read is a change


def _digest(body: str) -> bytes:
    # imported here: a forked child's lean template loads this module and
    # never polls (tests/test_tree_templates.py keeps hashlib out of it)
    import hashlib

    return hashlib.blake2b(body.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class _Entry:
    __slots__ = ("digest", "due", "failing")

    def __init__(self, due: float) -> None:
        self.due = due
        self.digest: bytes | None = None
        self.failing = False


class PollPlan:
    """Pure polling state; every method that needs the time is given `now`."""

    def __init__(self, interval: float) -> None:
        if interval <= 0:
            raise ValueError("a poll interval must be positive")
        self.interval = interval
        self._entries: dict[str, _Entry] = {}

    def __contains__(self, uri: str) -> bool:
        return uri in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, uri: str, due: float) -> None:
        """Poll `uri`, first at `due` (a no-op if polled already)."""
        if uri not in self._entries:
            self._entries[uri] = _Entry(due)

    def remove(self, uri: str) -> None:
        self._entries.pop(uri, None)

    def due_at(self) -> float | None:
        """When the next read is due; None when nothing is polled."""
        return min((e.due for e in self._entries.values()), default=None)

    def take(self, now: float) -> list[str]:
        """The URIs due at `now`, in the order they were added; each is next due
        `interval` after `now`."""
        due = [u for u, e in self._entries.items() if e.due <= now]
        for uri in due:
            self._entries[uri].due = now + self.interval
        return due

    def observed(self, uri: str, body: str) -> tuple[Change, bool]:
        """A read of `uri` returned `body`: (what changed, whether this ended a
        streak of failed reads)."""
        entry = self._entries.get(uri)
        if entry is None:  # removed while its read was in flight
            return Change.SAME, False
        recovered, entry.failing = entry.failing, False
        digest = _digest(body)
        before, entry.digest = entry.digest, digest
        if before is None:
            return Change.BASELINE, recovered
        return (Change.SAME if before == digest else Change.CHANGED), recovered

    def invalidate(self, uri: str) -> None:
        """The wake a change of `uri` caused could not read it: the next body
        read wakes again, whatever it is, so the change is not lost."""
        entry = self._entries.get(uri)
        if entry is not None and entry.digest is not None:
            entry.digest = _STALE

    def failed(self, uri: str) -> bool:
        """A read of `uri` failed: True when this starts a streak (log it once).
        The last body read stays the one a later read is compared with."""
        entry = self._entries.get(uri)
        if entry is None or entry.failing:
            return False
        entry.failing = True
        return True


Read = Callable[[str], Awaitable[Observed]]


class Poller:
    """Drives a `PollPlan` on asyncio (see the module docstring)."""

    def __init__(self, interval: float, read: Read, wake: Callable[[str], None], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = PollPlan(interval)
        self._read = read
        self._wake = wake
        self._clock = clock
        self._changed = asyncio.Event()
        self.reads = 0
        self.changes = 0

    async def add(self, uri: str) -> None:
        """Poll `uri`: its baseline is read now, the next read is due an
        interval later."""
        if uri in self.plan:
            return
        self.plan.add(uri, self._clock() + self.plan.interval)
        self._changed.set()
        await self.poll(uri)

    def remove(self, uri: str) -> None:
        self.plan.remove(uri)
        self._changed.set()

    async def run(self) -> None:
        """Poll until cancelled (by the owner closing its TaskGroup)."""
        while True:
            self._changed.clear()
            due = self.plan.due_at()
            if due is None:
                await self._changed.wait()
                continue
            wait = due - self._clock()
            if wait > 0:
                try:
                    async with asyncio.timeout(wait):
                        await self._changed.wait()
                    continue  # the set changed: recompute what is due
                except TimeoutError:
                    pass
            for uri in self.plan.take(self._clock()):
                await self.poll(uri)

    async def poll(self, uri: str) -> None:
        """One read of `uri`, fed to the plan; `wake(uri)` if the body changed."""
        self.reads += 1
        try:
            obs = await self._read(uri)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a fault is logged, the next poll tries again
            kind = fault_kind(exc)
            if self.plan.failed(uri):
                _log.warning("reactive.poll.failed", uri=uri, kind=kind,
                             error=f"{type(exc).__name__}: {exc}"[:300])
            return
        if obs.is_error:  # not a body: the server could not give one this time
            if self.plan.failed(uri):
                _log.warning("reactive.poll.failed", uri=uri, kind="error",
                             error=obs.text[:300])
            return
        change, recovered = self.plan.observed(uri, obs.text)
        if recovered:
            _log.info("reactive.poll.recovered", uri=uri)
        if change is Change.CHANGED:
            self.changes += 1
            _log.info("reactive.poll.changed", uri=uri)
            self._wake(uri)
