"""The kill ladder's plan, sans-IO: which rung next, and how long to wait on it.

A child is ended by the gentlest rung that works: ask it over the wire, close
its stdin (EOF), SIGTERM its process group, SIGKILL it.  Each rung before the
SIGKILL waits a share of one budget (normally ``--drain-timeout``) and never
past the budget's end, so a child that ignores them all meets the SIGKILL
within the budget; the SIGKILL's own wait for the reap is the rest of the
budget, at least :data:`REAP_FLOOR` (a reap is never skipped: the IO side waits
on past it, logging ``subagent.unreaped``).

Fed ``now`` (monotonic seconds from the caller's clock), so a test walks the
whole ladder by hand; the signals and the waits are
:meth:`agentd.tree.procs.ChildProcess.ladder`.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["ASK_SHARE", "EOF_SHARE", "REAP_FLOOR", "TERM_SHARE", "Ladder", "Rung"]

# Shares of the budget for each rung before the SIGKILL (the rest is SIGKILL + reap).
ASK_SHARE: Final = 0.4
EOF_SHARE: Final = 0.2
TERM_SHARE: Final = 0.3
REAP_FLOOR: Final = 1.0  # seconds the SIGKILL's reap is awaited however little is left

Rung = Literal["ask", "eof", "sigterm", "sigkill"]


class Ladder:
    """One child's way out under one budget; see the module docstring."""

    __slots__ = ("_rungs", "budget", "end")

    def __init__(self, budget: float, now: float, *, ask: bool) -> None:
        self.budget = budget
        self.end = now + budget
        self._rungs: list[Rung] = ["ask", "eof", "sigterm", "sigkill"] if ask \
            else ["eof", "sigterm", "sigkill"]

    def next(self, now: float) -> tuple[Rung, float] | None:
        """The next rung and the longest wait on it; None once the SIGKILL's
        wait is over (the child is then waited on for as long as it takes)."""
        if not self._rungs:
            return None
        rung = self._rungs.pop(0)
        left = self.end - now
        if rung == "ask":
            return rung, self.budget * ASK_SHARE
        if rung == "eof":
            return rung, max(0.0, min(self.budget * EOF_SHARE, left))
        if rung == "sigterm":
            return rung, max(0.0, min(self.budget * TERM_SHARE, left))
        return rung, max(left, REAP_FLOOR)
