"""A batch's progress, where an operator will see it.

On a terminal (stderr is a tty) and with rich installed (the `top` extra): a
live bar on stderr — done of total, failed, running, rate, ETA, tokens so far —
with the log lines printed above it (at warning and up unless
--log-level / AGENTD_LOG_LEVEL asks for more: a person is reading). Anywhere else (a CI
log, a file, rich missing): a `batch.progress` JSON log line every
`--progress-interval` seconds. Either way the batch ends with its
`batch.end` summary line (counts by status, tokens, wall time, p50/p95 per
sample), which the bar also prints as one readable line.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

from agentd.log import configure, log


class Counts(Protocol):
    """What the progress reads of a batch's stats (agentd.app.batch.Stats)."""

    total: int
    skipped: int
    running: int
    tokens: int
    started: float
    by_status: dict[str, int]

    @property
    def done(self) -> int: ...

    def summary(self) -> dict[str, Any]: ...


def snapshot(stats: Counts) -> dict[str, Any]:
    """The numbers of one progress report."""
    elapsed = max(time.monotonic() - stats.started, 1e-9)
    done = stats.done
    todo = stats.total - stats.skipped
    rate = done / elapsed
    eta = (todo - done) / rate if rate > 0 else None
    return {"done": done, "total": todo, "failed": done - stats.by_status.get("completed", 0),
            "running": stats.running, "rate_per_s": round(rate, 3),
            "eta_s": round(eta, 1) if eta is not None else None, "tokens": stats.tokens}


def _want_bar() -> bool:
    if not sys.stderr.isatty():
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        log.info("batch.progress.plain", reason="rich is not installed (the top extra)")
        return False
    return True


@contextlib.asynccontextmanager
async def progress(stats: Counts, interval: float, *,
                   log_level: str | None = None) -> AsyncIterator[None]:
    """Report `stats` while the body runs (see the module doc); `log_level`: the
    level asked for (`Config.log_level`), None for the bar's quiet default."""
    if not _want_bar():
        task = asyncio.create_task(_lines(stats, interval), name="batch-progress")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return
    async with _bar(stats, log_level):
        yield


async def _lines(stats: Counts, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)  # a report's period, not a synchronisation
        log.info("batch.progress", **snapshot(stats))


@contextlib.asynccontextmanager
async def _bar(stats: Counts, log_level: str | None) -> AsyncIterator[None]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    bar = Progress(TextColumn("batch"), BarColumn(), TextColumn("{task.description}"),
                   TimeElapsedColumn(), console=console, redirect_stderr=True,
                   transient=False)
    todo = stats.total - stats.skipped
    task = bar.add_task("", total=todo)
    if log_level is None:
        configure(level="warning")

    def describe() -> str:
        s = snapshot(stats)
        eta = "?" if s["eta_s"] is None else f"{s['eta_s']:.0f}s"
        return (f"{s['done']}/{s['total']} done, {s['failed']} failed, {s['running']} running,"
                f" {s['rate_per_s']:.2f}/s, ETA {eta}, {s['tokens']} tokens")

    async def refresh() -> None:
        while True:
            bar.update(task, completed=stats.done, description=describe())
            await asyncio.sleep(0.2)  # the bar's refresh period

    bar.start()
    configure(stream=sys.stderr)  # rich's proxy: log lines print above the bar
    ticker = asyncio.create_task(refresh(), name="batch-progress-bar")
    try:
        yield
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        bar.update(task, completed=stats.done, description=describe())
        bar.stop()
        configure(stream=sys.stderr)
        s = stats.summary()
        console.print(f"batch: {s['by_status']} in {s['wall_s']}s, {s['tokens']} tokens, "
                      f"sample p50 {s['sample_p50_s']}s p95 {s['sample_p95_s']}s",
                      markup=False, highlight=False)
