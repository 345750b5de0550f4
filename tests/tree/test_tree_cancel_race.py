"""A cancel that arrives in the same read as the run it cancels (issue 21).

The child runtime (`agentd.child.runtime.serve`) over real pipes: `child/run`
and `child/cancel` are written in one write, so the child reads both in one
chunk and cancels its turn task before that task's first step -- a task
cancelled then never enters its coroutine, so the answer must come from the
runtime itself.  Without it the run is never answered and the parent has to
walk the kill ladder past its first rung (seconds).
"""

from __future__ import annotations

import asyncio
import os

from agentd.child import runtime as childrt
from agentd.child.control import ChildConfig, ControlSession, MessageParams, Reply


async def _replies(fd: int, parent: ControlSession, want: int) -> list[Reply]:
    loop = asyncio.get_running_loop()
    got: list[Reply] = []
    while len(got) < want:
        data = await loop.run_in_executor(None, os.read, fd, 65536)
        assert data, f"the child closed its wire after {got}"
        got.extend(ev for ev in parent.feed(data) if isinstance(ev, Reply))
    return got


async def test_cancel_read_with_its_run_is_answered_at_once():
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    parent = ControlSession("parent")
    run_id, run = parent.request("child/run", MessageParams("think for a long time"))
    cancel_id, cancel = parent.request("child/cancel", {})
    os.write(to_child_w, run + cancel)  # one chunk: both frames in one read
    cfg = ChildConfig(handle="0.1", depth=2)
    child = asyncio.create_task(childrt.serve(cfg, to_child_r, from_child_w))
    try:
        async with asyncio.timeout(30):  # hang guard (the bug: never answered)
            replies = {r.id: r for r in await _replies(from_child_r, parent, 2)}
            assert await child == 0  # the run ended, so the (non-warm) child ends
    finally:
        os.close(to_child_w)
        os.close(from_child_r)
    assert replies[cancel_id].result == {}
    outcome = replies[run_id].result
    assert outcome.status == "cancelled" and outcome.partial
