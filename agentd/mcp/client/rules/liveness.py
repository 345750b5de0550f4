"""Liveness of one MCP connection, sans-IO: when to ping, and when a server is stale.

Fed ``(event, now)`` by the client -- ``now`` is monotonic seconds from the
caller's clock, so a test drives it by hand.  The rule (docs/faults.md):

* any inbound message proves the server alive (:meth:`Liveness.heard`);
* an idle 2025-11-25 session is pinged once per ``interval``
  (:meth:`Liveness.due`); a 2026-07-28 server has no ``ping`` -- its failed
  requests and listen streams tell -- so it is never due;
* an answer (even a JSON-RPC error) clears the misses; a ping that got no
  answer in time is a miss, and ``stale_after`` misses in a row make the
  server stale (:meth:`Liveness.missed` says so once, then counting restarts).

:class:`Reconnect` is one recovery's plan, fed the outcome of each try: a
stale server's connections are dropped first (once; its session is then
gone), every try after the first backs off, a session that may have survived
a network blip is probed before anything is re-initialized, and a failed
handshake means the next try re-initializes.

The IO -- the sleep, the ping, the handshake, what a stale server leads to (a
reconnect, or giving the server up in task mode) -- is
:mod:`agentd.mcp.client.recovery`.
"""

from __future__ import annotations

from typing import Final

__all__ = ["STALE_AFTER_MISSES", "Liveness", "Reconnect"]

STALE_AFTER_MISSES: Final = 3  # missed pings in a row that make a server stale


class Liveness:
    """One connection's idle clock and missed-ping count."""

    __slots__ = ("interval", "last_inbound", "misses", "stale_after")

    def __init__(self, interval: float | None, *, stale_after: int = STALE_AFTER_MISSES,
                 now: float = 0.0) -> None:
        self.interval = interval  # None or 0: never ping
        self.stale_after = stale_after
        self.last_inbound = now
        self.misses = 0

    def heard(self, now: float) -> None:
        """A message arrived from the server (or a handshake completed)."""
        self.last_inbound = now

    def due(self, now: float, *, connected: bool, pings: bool) -> bool:
        """Whether to ping now: connected, a revision with ``ping``, and idle for
        a whole interval.  Traffic, a disconnection or no ping resets the misses."""
        if (not self.interval or not connected or not pings
                or now - self.last_inbound < self.interval):
            self.misses = 0
            return False
        return True

    def answered(self) -> None:
        """The ping was answered (or the connection was found lost: a reconnect
        judges it afresh)."""
        self.misses = 0

    def missed(self) -> bool:
        """A ping got no answer; True when that makes the server stale."""
        self.misses += 1
        if self.misses >= self.stale_after:
            self.misses = 0
            return True
        return False


class Reconnect:
    """One recovery: what to try next; see the module docstring."""

    __slots__ = ("attempt", "drop", "expired")

    def __init__(self, *, expired: bool, drop: bool) -> None:
        self.expired = expired  # the server no longer knows our session
        self.drop = drop  # a stale server: new connections, new session
        self.attempt = 0  # tries made

    def reopen(self) -> bool:
        """Whether to drop every connection before this try (once)."""
        if not self.drop:
            return False
        self.drop = False
        self.expired = True
        return True

    def next_try(self) -> int:
        """Count a try; the attempt to back off for before it (0: the first, none)."""
        pause = self.attempt
        self.attempt += 1
        return pause

    def probes(self, has_session: bool) -> bool:
        """Probe the session (a ping) before re-initializing anything."""
        return not self.expired and has_session

    def handshakes(self, has_session: bool) -> bool:
        """Re-initialize (the probe, if any, left nothing to reuse)."""
        return self.expired or not has_session

    def session_lost(self) -> None:
        """The probe said the server no longer knows the session."""
        self.expired = True

    def failed(self, *, handshake: bool) -> None:
        """This try failed; after a failed handshake the next one re-initializes."""
        self.expired = self.expired or handshake
