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

The IO -- the sleep, the ping, what a stale server leads to (a reconnect, or
giving the server up in task mode) -- stays in :mod:`agentd.mcp.client`.
"""

from __future__ import annotations

from typing import Final

__all__ = ["STALE_AFTER_MISSES", "Liveness"]

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
