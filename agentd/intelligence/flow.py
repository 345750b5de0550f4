"""Tree-wide flow control for intelligence calls: one gate per agentd process.

Every intelligence call of the tree passes this gate (the root's own and each
subagent's, brokered to the root), so:

* at most `--max-inflight-intelligence` calls are in flight at once (a
  semaphore; callers beyond it queue in FIFO order);
* when the gateway answers 429 (or any retryable status with `Retry-After`)
  the provider's retry loop calls `pause(seconds)`, and *no* call of the tree
  is sent until that time has passed — 256 children back off together instead
  of each learning the same lesson from its own 429.

The retry loop itself stays the provider's (agentd.intelligence.openai): the
gate only decides *when* an attempt may go out.
"""

from __future__ import annotations

import asyncio

__all__ = ["DEFAULT_MAX_INFLIGHT", "FlowGate"]

DEFAULT_MAX_INFLIGHT = 64


class FlowGate:
    def __init__(self, max_inflight: int = DEFAULT_MAX_INFLIGHT) -> None:
        if max_inflight < 1:
            raise ValueError("max_inflight must be at least 1")
        self.max_inflight = max_inflight
        self._slots = asyncio.Semaphore(max_inflight)
        self._resume_at = 0.0
        self.pauses = 0  # how many times the gateway told the tree to wait

    async def clear(self) -> None:
        """Return once no pause is in force (re-checked: a pause may be extended)."""
        loop = asyncio.get_running_loop()
        # a deadline that may move later while we sleep: re-checked, not an Event
        while (wait := self._resume_at - loop.time()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(wait)

    async def __aenter__(self) -> FlowGate:
        await self.clear()
        await self._slots.acquire()
        try:
            await self.clear()  # a pause may have begun while this call queued
        except BaseException:
            self._slots.release()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._slots.release()

    def pause(self, seconds: float) -> None:
        """Hold every new attempt of the tree for `seconds` from now."""
        if seconds <= 0:
            return
        at = asyncio.get_running_loop().time() + seconds
        if at > self._resume_at:
            self._resume_at = at
            self.pauses += 1

    @property
    def paused(self) -> bool:
        """Whether a pause is in force now: no new attempt of the tree goes out."""
        return self._resume_at > asyncio.get_running_loop().time()

    @property
    def inflight(self) -> int:
        return self.max_inflight - self._slots._value
