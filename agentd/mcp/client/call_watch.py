"""The IO side of a ``tools/call``'s limits: a wait the progress notifications re-arm.

The rules are :mod:`agentd.mcp.client.rules.call_limits` (sans-IO); this module only reads
the event loop's clock, holds an ``asyncio`` timeout at
:meth:`~agentd.mcp.client.rules.call_limits.CallDeadline.expires_at` around each send of
the call, and moves it when a ``notifications/progress`` for the call's token
refreshed the deadline.  A :class:`CallWatches` per client knows the tokens of
its calls in flight; a token is issued per send (each send is a new JSON-RPC
request, and the spec wants a token unique among active requests).

On expiry the wait raises a :class:`~agentd.errors.ToolFault` with ``cause``
``"limit"`` (the watch's ``deadline.ended`` says which limit): the client
abandons the request the way its revision cancels (``notifications/cancelled``
at 2025-11-25, closing the answer stream at 2026-07-28) and hands the model an
``isError`` observation naming the limit (docs/client.md, docs/faults.md) --
an observation, not a fault: the server is fine, the call was too long.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Final

from msgspec import Raw

from agentd.errors import ToolFault
from agentd.log import Logger
from agentd.mcp.client.rules.call_limits import (
    CallDeadline,
    LimitReached,
    ToolLimits,
    meta_with_token,
    parse_progress,
)

__all__ = ["LIMIT_CAUSE", "CallWatch", "CallWatches"]

MAX_STALL_LOGS: Final = 1  # info lines per call for progress that did not increase
LIMIT_CAUSE: Final = "limit"  # ToolFault.cause of a call that ran into its limit

class CallWatch:
    """One call's deadline on the loop's clock; ``async with`` bounds one send."""

    __slots__ = ("_owner", "_timeout", "deadline", "token", "tool")

    def __init__(self, owner: CallWatches, deadline: CallDeadline, tool: str) -> None:
        self._owner = owner
        self.deadline = deadline
        self.tool = tool
        self.token: int | None = None
        self._timeout: asyncio.Timeout | None = None

    def meta(self, meta_json: bytes) -> bytes:
        """A fresh token for the next send of the call, spliced into its ``_meta``."""
        self.release()
        self.token = self._owner.issue(self)
        return meta_with_token(meta_json, self.token)

    def release(self) -> None:
        if self.token is not None:
            self._owner.retire(self.token)
            self.token = None

    @property
    def reached(self) -> LimitReached | None:
        """The limit this call ran into (set once, for good), or None."""
        return self.deadline.ended

    def refresh(self) -> None:
        t = self._timeout
        if t is not None and not t.expired():
            t.reschedule(self.deadline.expires_at())

    async def __aenter__(self) -> CallWatch:
        self._timeout = asyncio.timeout_at(self.deadline.expires_at())
        await self._timeout.__aenter__()
        return self

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        t, self._timeout = self._timeout, None
        assert t is not None
        try:
            await t.__aexit__(et, exc, tb)
        except TimeoutError:
            now = asyncio.get_running_loop().time()
            due = self.deadline.expires_at()  # set: only a set deadline expires
            # the loop runs a timer up to its clock resolution early: judge at the due time
            reached = self.deadline.check(now if due is None else max(now, due))
            assert reached is not None
            self._owner.log.warning("mcp.tool.limit", tool=self.tool[:200], limit=reached.limit,
                                    seconds=reached.seconds, flag=reached.flag)
            raise ToolFault(self._owner.server, reached.text, retryable=False,
                            method="tools/call", cause=LIMIT_CAUSE) from None


class CallWatches:
    """The tokens of one client's calls in flight -> their watches."""

    __slots__ = ("_live", "_next", "limits", "log", "server", "unknown")

    def __init__(self, limits: ToolLimits, log: Logger, server: str = "") -> None:
        self.limits = limits
        self.server = server  # named in the fault of a call that ran into its limit
        self.log = log
        self._live: dict[int | str, CallWatch] = {}
        self._next = 1
        self.unknown = 0  # progress for no call in flight (late, stray or bogus)

    def open(self, tool: str) -> CallWatch | None:
        """A watch for a new call of ``tool``, or None when neither limit is set
        (nothing to watch, and no token is asked for)."""
        if self.limits.idle is None and self.limits.total is None:
            return None
        now = asyncio.get_running_loop().time()
        return CallWatch(self, CallDeadline(self.limits, now), tool)

    def issue(self, watch: CallWatch) -> int:
        token = self._next
        self._next = token + 1
        self._live[token] = watch
        return token

    def retire(self, token: int | str) -> None:
        self._live.pop(token, None)

    def notified(self, params: Raw) -> None:
        """A ``notifications/progress`` arrived (on a POST's answer or the GET stream)."""
        got = parse_progress(params)
        watch = None if got is None else self._live.get(got.token)
        if got is None or watch is None:
            self.unknown += 1
            if self.log.enabled("debug"):
                self.log.debug("mcp.progress.ignored", unknown=self.unknown,
                               why="malformed" if got is None else "unknown token")
            return
        d = watch.deadline
        if d.ended is not None:  # the call is being abandoned: nothing left to refresh
            return
        if got.value is not None and d.progressed(got.value, asyncio.get_running_loop().time()):
            watch.refresh()
            if self.log.enabled("debug"):
                self.log.debug("mcp.progress", token=got.token, progress=got.value)
            return
        if got.value is None:
            d.stalls += 1
        if d.stalls <= MAX_STALL_LOGS:
            self.log.info("mcp.progress.stalled", token=got.token,
                          detail="progress is not a number or did not increase: "
                                 "not counted as progress")
