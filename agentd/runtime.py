"""Process start-up shared by every agentd process (CLI run, demo, subagent).

Every agentd process runs its event loop on uvloop; where uvloop cannot be
imported it falls back to plain asyncio and says so once (`uvloop.unavailable`).
Likewise the native wire core: if the compiled `agentd_native` extensions are
missing, the pure-Python twins serve and `native.fallback` is logged once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from agentd.log import log

T = TypeVar("T")
_announced = False


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        log.warning("uvloop.unavailable", detail="running on the plain asyncio event loop")
        return None
    return uvloop.new_event_loop


def announce_native() -> None:
    """Log `native.fallback` once per process if the compiled core is missing."""
    global _announced
    if _announced:
        return
    _announced = True
    import agentd_native

    if not agentd_native.NATIVE:
        log.warning("native.fallback",
                    detail="compiled agentd_native not found; using the pure-Python twins")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion on uvloop (or asyncio), after the start-up notices."""
    announce_native()
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
