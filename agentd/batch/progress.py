"""A batch's progress, where an operator will see it (docs/batch.md, "The terminal").

On a terminal (stderr is a tty) a person is reading, so the terminal shows
progress, not logs: one live display — done of total, failed, errors, running,
rate, ETA, tokens, the mean score so far when samples are scored — drawn by
rich when it is installed (the `top` extra) and as one plain line rewritten
with `\\r` without it. The log (the samples' `subagent.stderr` lines included)
goes to the log file the CLI opened (`--log-file`, by default next to
`--out`); only its warnings and errors reach the terminal, as text above the
display. The batch ends with one readable closing block: counts by status
(interrupted samples included), tokens, the mean score, p50/p95 per sample,
and where the results and the log are.

Anywhere else (a CI log, a file): a `batch.progress` JSON log line every
`--progress-interval` seconds. Either way the batch logs its `batch.end`
summary line.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol, TextIO

from agentd.log import echo_to, log

REFRESH_S = 0.2  # the live display's redraw period


class Counts(Protocol):
    """What the progress reads of a batch's stats (agentd.batch.runner.Stats)."""

    total: int
    skipped: int
    running: int
    tokens: int
    started: float
    by_status: dict[str, int]

    @property
    def done(self) -> int: ...

    @property
    def mean_score(self) -> float | None: ...

    def summary(self) -> dict[str, Any]: ...


def snapshot(stats: Counts) -> dict[str, Any]:
    """The numbers of one progress report: `failed` counts every sample that did
    not complete except those of status `error` (an infrastructure fault), which
    are `errors`."""
    elapsed = max(time.monotonic() - stats.started, 1e-9)
    done = stats.done
    todo = stats.total - stats.skipped
    rate = done / elapsed
    eta = (todo - done) / rate if rate > 0 else None
    errors = stats.by_status.get("error", 0)
    score = stats.mean_score
    return {"done": done, "total": todo,
            "failed": done - stats.by_status.get("completed", 0) - errors, "errors": errors,
            "running": stats.running, "rate_per_s": round(rate, 3),
            "eta_s": round(eta, 1) if eta is not None else None, "tokens": stats.tokens,
            "mean_score": None if score is None else round(score, 4)}


def describe(s: dict[str, Any]) -> str:
    """One progress report as the live display's text."""
    eta = "?" if s["eta_s"] is None else f"{s['eta_s']:.0f}s"
    text = (f"{s['done']}/{s['total']} done, {s['failed']} failed, {s['errors']} errors, "
            f"{s['running']} running, {s['rate_per_s']:.2f}/s, ETA {eta}, "
            f"{s['tokens']:,} tokens")
    return text if s["mean_score"] is None else f"{text}, mean score {s['mean_score']:.3f}"


def closing_block(summary: dict[str, Any], mean_score: float | None, *, out: str,
                  log_file: str | None) -> str:
    """The batch's end as a person reads it (the `batch.end` line's numbers)."""
    by_status: dict[str, int] = summary["by_status"]
    ran = sum(by_status.values())
    counts = ", ".join(f"{n} {status}" for status, n in by_status.items()) or "none"
    lines = [f"batch: {ran} of {summary['tasks'] - summary['skipped']} samples in "
             f"{summary['wall_s']:.1f}s: {counts}"]
    if by_status.get("interrupted"):
        lines.append(f"  interrupted: {by_status['interrupted']} not run or cut short "
                     "(--resume runs them)")
    if summary["skipped"]:
        lines.append(f"  skipped: {summary['skipped']} already in --out (--resume)")
    score = "" if mean_score is None else f", mean score {mean_score:.3f}"
    p50, p95 = summary["sample_p50_s"], summary["sample_p95_s"]
    times = "" if p50 is None else f", per sample p50 {p50:.2f}s p95 {p95:.2f}s"
    lines.append(f"  tokens: {summary['tokens']:,}{score}{times}")
    lines.append(f"  results: {out}" + (f"   log: {log_file}" if log_file else ""))
    return "\n".join(lines)


@contextlib.asynccontextmanager
async def progress(stats: Counts, interval: float, *, out: str,
                   log_file: str | None) -> AsyncIterator[None]:
    """Report `stats` while the body runs (see the module doc). `log_file`: where
    the CLI sent the log (None: stderr)."""
    if not sys.stderr.isatty():
        if log_file is not None:
            echo_to(sys.stderr)  # the log is in a file: its warnings are still seen
        task = asyncio.create_task(_lines(stats, interval), name="batch-progress")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            echo_to(None)
        return
    todo = stats.total - stats.skipped
    display: _Display = _rich_display(todo) or _PlainLine(sys.stderr)
    echo_to(display)
    ticker = asyncio.create_task(_redraw(stats, display), name="batch-progress-display")
    try:
        yield
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        echo_to(None)
        display.show(stats.done, describe(snapshot(stats)))
        display.close(closing_block(stats.summary(), stats.mean_score, out=out,
                                    log_file=log_file))


async def _lines(stats: Counts, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)  # a report's period, not a synchronisation
        log.info("batch.progress", **snapshot(stats))


class _Display(Protocol):
    """A live display: `show` redraws it, `write` prints a log line above it."""

    def show(self, done: int, text: str) -> None: ...

    def write(self, line: str) -> int: ...

    def flush(self) -> None: ...

    def close(self, block: str) -> None: ...


async def _redraw(stats: Counts, display: _Display) -> None:
    while True:
        display.show(stats.done, describe(snapshot(stats)))
        await asyncio.sleep(REFRESH_S)


class _PlainLine:
    """The display without rich: one line, rewritten in place with `\\r`."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.width = max(shutil.get_terminal_size().columns - 1, 20)
        self.text = ""

    def _put(self, data: str) -> None:
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.stream.write(data)
            self.stream.flush()

    def show(self, done: int, text: str) -> None:
        line = f"batch {text}"[:self.width]
        if line == self.text:
            return
        self._put("\r" + line.ljust(len(self.text)))
        self.text = line

    def write(self, line: str) -> int:
        """A log line: printed on a line of its own, the display redrawn below it."""
        self._put("\r" + " " * len(self.text) + "\r" + line.rstrip("\n") + "\n" + self.text)
        return len(line)

    def flush(self) -> None:
        return None

    def close(self, block: str) -> None:
        self._put("\n" + block + "\n")


class _RichBar:
    """The display with rich: a bar, log lines printed above it."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.bar = Progress(TextColumn("batch"), BarColumn(), TextColumn("{task.description}"),
                            TimeElapsedColumn(), console=self.console, transient=False)
        self.task = self.bar.add_task("", total=total)
        self.bar.start()

    def show(self, done: int, text: str) -> None:
        self.bar.update(self.task, completed=done, description=text)

    def write(self, line: str) -> int:
        self.console.print(line.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
        return len(line)

    def flush(self) -> None:
        return None

    def close(self, block: str) -> None:
        self.bar.stop()
        self.console.print(block, markup=False, highlight=False, soft_wrap=True)


def _rich_display(total: int) -> _RichBar | None:
    """The rich bar, or None without rich (the plain line then)."""
    try:
        import rich  # noqa: F401
    except ImportError:
        return None
    return _RichBar(total)
