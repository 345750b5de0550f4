"""The suite's one polling helper: wait until a condition holds.

A test waits on an event or a log line where the product offers one
(`agentd_proc.Agentd.wait_for_event`, an `asyncio.Event` a handler sets). Where
a fact can only be seen by looking again (a /proc entry, a peer's counter, an
open port, a status another process changes), it is polled here and nowhere
else, so that every such wait has the same contract: it ends as soon as the
condition holds, and its limit is a ceiling against a hang, never an
assertion of speed. A wait that reaches its ceiling fails with `what` said.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

STEP = 0.05  # how often a condition is looked at again
CEILING = 60.0  # the default hang guard of a wait


def _never(what: str, limit: float, last: object) -> AssertionError:
    return AssertionError(f"never happened within the {limit:g} s ceiling: {what}"
                         f" (last seen: {last!r})")


async def until(predicate: Callable[[], T | Awaitable[T]], *, limit: float = CEILING,
                what: str = "the condition", step: float = STEP) -> T:
    """Await until ``predicate()`` (plain or async) is truthy; return that value.

    Fails (AssertionError) once ``limit`` has passed without it."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if loop.time() >= end:
            raise _never(what, limit, value)
        await asyncio.sleep(step)


def until_sync(predicate: Callable[[], T], *, limit: float = CEILING,
               what: str = "the condition", step: float = STEP) -> T:
    """`until` for code outside an event loop (a thread, a plain test)."""
    end = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise _never(what, limit, value)
        time.sleep(step)
