"""What a journal holds of a run: its record and its steps (format `JOURNAL_VERSION`).

A run's record is what a restarted worker needs to answer for the run and to
drive it again: its name in the journal, its handle, the spawn request it was
admitted with, the principal that owns it, the name peers know it by in a
pool, and, once it ended, its terminal state. A step is one brokered request of
the run's subtree, by handle relative to the run and its count on that handle
(as cassettes number them), `sent` before a tool call is made and `answered`
once its answer is known. A message sent to a warm session is a row of its
own (kind `send`, its turn as the step), sent to it again when it resumes.
A new member or meaning is a new version: a journal
of another version is not read (its run ends failed, saying which).
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

__all__ = ["JOURNAL_VERSION", "RunRecord", "Step", "StepState"]

JOURNAL_VERSION: Final = 1

StepState = Literal["sent", "answered"]


class RunRecord(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One journaled run (the `run` member of its file's `meta`)."""

    name: str  # unique within the journal: `served.7`, or a batch sample's id and epoch
    handle: str  # the handle it runs under in this process's tree
    request: dict[str, Any]  # the SpawnRequest it was admitted with, as builtins
    started_at: float  # wall-clock seconds
    principal: str | None = None
    external: str | None = None  # a pool worker's handle for it (agentd.pool.handles)
    status: str = "running"
    result: Any = None
    partial: bool = False
    reason: str | None = None
    ended_at: float | None = None

    @property
    def terminal(self) -> bool:
        return self.status != "running"


class Step(msgspec.Struct, frozen=True):
    """One recorded request and, once answered, its answer: `answer` the IoResult's
    JSON, or `error` the error object's (code, message, data)."""

    rel: str
    step: int
    kind: str
    state: StepState
    request: dict[str, Any]
    answer: bytes = b""
    error: dict[str, Any] | None = None
