"""A ``tools/call``'s time limits: the idle deadline progress refreshes, and the cap.

Sans-IO (no sockets, no tasks, no clock of its own): :class:`CallDeadline` is
fed ``(event, now)`` -- the call started at ``now``, progress ``value`` was seen
at ``now`` -- and answers when the call expires and which limit ends it.  The IO
side (:mod:`agentd.mcp.client.call_watch`) reads the event loop's clock, waits until
:meth:`CallDeadline.expires_at` and re-arms the wait when progress moved it.

Why two limits: a long tool is normal (a build, a crawl), a silent one is not.
Progress notifications (MCP "Progress", both revisions: the client opts in with
``params._meta.progressToken``) are the server saying it is still working, so
each one pushes the idle deadline (``--tool-idle-timeout``) out again; the
absolute cap (``--tool-timeout``) bounds a call that reports progress forever.

The spec says ``progress`` MUST increase with each notification: one that does
not (equal, smaller, not a number) is not progress and refreshes nothing, so a
server stuck repeating itself ends on the idle limit like a silent one.  A
notification for a token no call in flight holds (a late one, a stray, a
peer's mistake) is dropped -- the spec's receivers MAY ignore such tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

import msgspec
from msgspec import Raw

from agentd.config.model import (
    DEFAULT_TOOL_IDLE_TIMEOUT,
    DEFAULT_TOOL_TIMEOUT,
    RunLimits,
    ServerSpec,
)
from agentd.wire.guard import PEER_FAULTS

__all__ = [
    "IDLE_FLAG",
    "TOTAL_FLAG",
    "CallDeadline",
    "LimitReached",
    "ProgressIn",
    "ToolLimits",
    "meta_with_token",
    "parse_progress",
    "server_limits",
    "tool_limits",
]

IDLE_FLAG: Final = "--tool-idle-timeout"
TOTAL_FLAG: Final = "--tool-timeout"
MAX_TOKEN_CHARS: Final = 256  # a longer token cannot be one agentd issued

Limit = Literal["idle", "total"]


@dataclass(frozen=True, slots=True)
class ToolLimits:
    """Seconds without progress (``idle``) and in all (``total``); None: no limit.
    The defaults are the flags' (docs/cli.md)."""

    idle: float | None = DEFAULT_TOOL_IDLE_TIMEOUT or None
    total: float | None = DEFAULT_TOOL_TIMEOUT or None

    @classmethod
    def of(cls, idle: float | None, total: float | None) -> ToolLimits:
        """From the config's values, where 0 (or None) means "no limit"."""
        return cls(idle or None, total or None)


def tool_limits(config: RunLimits) -> ToolLimits:
    """The limits a run's (or a child's) configuration sets."""
    return ToolLimits.of(config.tool_idle_timeout, config.tool_timeout)


def server_limits(run: ToolLimits, spec: ServerSpec) -> ToolLimits:
    """The run's limits with what the server's own entry overrides (0: none)."""
    idle, total = spec.tool_idle_timeout, spec.tool_timeout
    return ToolLimits(run.idle if idle is None else idle or None,
                      run.total if total is None else total or None)


def _secs(v: float) -> str:
    return f"{v:g} s"


@dataclass(frozen=True, slots=True)
class LimitReached:
    """Which limit ended a call, and how long it was."""

    limit: Limit
    seconds: float

    @property
    def flag(self) -> str:
        return IDLE_FLAG if self.limit == "idle" else TOTAL_FLAG

    @property
    def reason(self) -> str:
        """What ``notifications/cancelled`` says and the log names."""
        what = (f"no progress for {_secs(self.seconds)}" if self.limit == "idle"
                else f"still running after {_secs(self.seconds)}")
        return f"{what} ({self.flag})"

    @property
    def text(self) -> str:
        """The model's observation (``isError: true``)."""
        return f"tool call ended by agentd: {self.reason}"


class CallDeadline:
    """One call's limits: the state in one object, fed ``(event, now)``."""

    __slots__ = ("ended", "last_progress", "last_seen", "limits", "stalls", "started")

    def __init__(self, limits: ToolLimits, now: float) -> None:
        self.limits = limits
        self.started = now
        self.last_seen = now  # when the idle clock last restarted
        self.last_progress: float | None = None  # the last accepted progress value
        self.stalls = 0  # notifications that did not increase progress
        self.ended: LimitReached | None = None

    def _due(self) -> tuple[float, Limit] | None:
        lim = self.limits
        idle = None if lim.idle is None else self.last_seen + lim.idle
        total = None if lim.total is None else self.started + lim.total
        if total is not None and (idle is None or total <= idle):
            return total, "total"  # a tie is the cap: it would end the call regardless
        return None if idle is None else (idle, "idle")

    def expires_at(self) -> float | None:
        """The clock time the call ends at unless progress comes first (None: never)."""
        due = self._due()
        return None if due is None else due[0]

    def progressed(self, value: float, now: float) -> bool:
        """Progress ``value`` seen at ``now``: True when it refreshed the idle deadline
        (it increased, and the call has not ended)."""
        if self.ended is not None:
            return False
        if self.last_progress is not None and not value > self.last_progress:
            self.stalls += 1
            return False
        self.last_progress = value
        self.last_seen = max(self.last_seen, now)
        return True

    def check(self, now: float) -> LimitReached | None:
        """The limit that has ended the call at ``now``, or None while it may run."""
        if self.ended is not None:
            return self.ended
        due = self._due()
        if due is None or now < due[0]:
            return None
        limit = due[1]
        secs = self.limits.idle if limit == "idle" else self.limits.total
        assert secs is not None  # _due names only a limit that is set
        self.ended = LimitReached(limit, secs)
        return self.ended


class _ProgressWire(msgspec.Struct, gc=False):
    progressToken: int | str | None = None
    progress: object = None


_dec_progress = msgspec.json.Decoder(_ProgressWire)


@dataclass(frozen=True, slots=True)
class ProgressIn:
    """A ``notifications/progress`` as the rules see it: ``value`` is None when
    ``progress`` was not a finite number."""

    token: int | str
    value: float | None


def parse_progress(params: Raw | bytes) -> ProgressIn | None:
    """The token and value of a ``notifications/progress``; None when there is no
    usable token (malformed params, a token that is not a string or an integer)."""
    try:
        p = _dec_progress.decode(params) if params else None
    except PEER_FAULTS:  # malformed, or nested past the decoder's guard
        return None
    if p is None or p.progressToken is None or isinstance(p.progressToken, bool):
        return None
    if isinstance(p.progressToken, str) and len(p.progressToken) > MAX_TOKEN_CHARS:
        return None
    v = p.progress
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return ProgressIn(p.progressToken, float(v) if ok else None)  # type: ignore[arg-type]


def meta_with_token(meta_json: bytes, token: int) -> bytes:
    """``_meta`` (a JSON object's bytes) with ``progressToken`` first in it."""
    head = b'{"progressToken":' + str(token).encode()
    rest = meta_json.strip()[1:]
    return head + (b"," + rest if rest.lstrip()[:1] != b"}" else b"}")
