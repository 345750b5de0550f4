"""Process start-up shared by every agentd process (CLI run, demo, subagent).

Every agentd process runs its event loop on uvloop; where uvloop cannot be
imported it falls back to plain asyncio and says so once (`uvloop.unavailable`).
Likewise the native wire core: if the compiled `agentd_native` extensions are
missing, the pure-Python twins serve and `native.fallback` is logged once.

`run` also settles the garbage collector for a long-lived orchestrator: the
start-up heap (every import) is frozen out of the collector's way, and the
first generation is collected every `GC_GEN0_THRESHOLD` allocations instead of
CPython's 700.  Fanning out 256 subagents, the default setting ran the
collector ~40 times and cost ≈ 15% of the parent's CPU, mostly rescanning
objects that live for the whole run (docs/subagents.md).
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Coroutine
from typing import IO, Any, TypeVar

from agentd.log import log

T = TypeVar("T")
_announced = False
GC_GEN0_THRESHOLD = 10_000


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        log.warning("uvloop.unavailable", detail="running on the plain asyncio event loop")
        return None
    return uvloop.new_event_loop


def pipe_file(fd: int, mode: str) -> IO[bytes]:
    """The file object to give `loop.connect_read_pipe`/`connect_write_pipe` for the
    pipe `fd`, which the transport then owns.

    uvloop closes a pipe's fd itself (libuv) and then closes the file object it was
    given as well: a file object that owned the fd would close that number a second
    time, by then perhaps another thread's file (the journal's writers open SQLite
    files all the time: a run's commit failed with SQLITE_IOERR_WRITE). So under
    uvloop the file object does not own the fd; under asyncio, which closes only
    the file object, it does."""
    uv = type(asyncio.get_running_loop()).__module__.startswith("uvloop")
    return os.fdopen(fd, mode, buffering=0, closefd=not uv)


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


def settle_gc() -> None:
    """Freeze the start-up heap out of the collector's way; collect young objects less often."""
    gc.collect()
    gc.freeze()
    _gen0, *older = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, *older)


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion on uvloop (or asyncio), after the start-up notices."""
    announce_native()
    settle_gc()
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def run_to_exit(main: Coroutine[Any, Any, T]) -> T:
    """Run a subagent's `main`, which ends the process itself (`os._exit`), on a bare loop.

    No `asyncio.Runner`: a subagent has no SIGINT handler to install (its parent
    steers it over the control wire) and no loop to tear down.  In a forked
    child both would be work on copy-on-write pages of the template, paid
    again by every child (docs/subagents.md).
    """
    announce_native()
    factory = loop_factory() or asyncio.new_event_loop
    return factory().run_until_complete(main)
