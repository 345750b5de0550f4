"""The files of `agentd batch`: the tasks it reads and the results it appends.

Both are JSON Lines with a fixed shape (docs/batch.md). The tasks file is read
whole and checked before anything runs: a line that is not a task (bad JSON, a
missing or unknown member, a wrong type, longer than `--task-line-bytes`) or
a duplicate id is a `ConfigError` naming the file and the line number, which
the CLI turns into exit 2 with that one line on stderr.

The results file is append-only: each line is written and flushed whole as
its sample ends, so an interrupted batch leaves only complete lines. A last
line without its newline (a batch killed mid-write, by SIGKILL or a full
disk) is cut off on `--resume` (and logged), so that sample runs again.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from agentd.config import DEFAULT_MAX_TASKS, DEFAULT_TASK_LINE_BYTES, ConfigError
from agentd.log import log
from agentd.output import Usage


class TaskLine(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One sample to run: what an `agentd --instruction` run would be given."""

    id: str
    instruction: str
    output_contract: str | None = None
    tool_scope: list[str] | None = None  # MCP server names; None: all of them


class ResultLine(msgspec.Struct, omit_defaults=True):
    """One sample's outcome, as appended to the results file."""

    id: str
    status: str  # completed | failed | budget_exhausted | deadline | cancelled
    partial: bool
    result: Any
    steps: int
    usage: Usage
    run_id: str
    error: str | None = None  # present unless status is completed


_task_decoder = msgspec.json.Decoder(TaskLine)
_result_decoder = msgspec.json.Decoder(ResultLine)
_encoder = msgspec.json.Encoder()


def load_tasks(path: str, *, line_bytes: int = DEFAULT_TASK_LINE_BYTES,
               max_tasks: int = DEFAULT_MAX_TASKS) -> list[TaskLine]:
    """Every task of `path`, in order; ConfigError naming the first bad line."""
    tasks: list[TaskLine] = []
    seen: dict[str, int] = {}
    try:
        with open(path, "rb") as f:
            n = 0
            # read at most one byte past the bound: a line never sits whole in memory
            while raw := f.readline(line_bytes + 2):
                n += 1
                if len(raw.rstrip(b"\r\n")) > line_bytes:
                    raise ConfigError(f"--tasks {path}:{n}: line longer than "
                                      f"--task-line-bytes={line_bytes}")
                if not raw.strip():
                    continue  # blank lines separate nothing and are allowed
                try:
                    task = _task_decoder.decode(raw)
                except msgspec.DecodeError as exc:
                    raise ConfigError(f"--tasks {path}:{n}: not a task line: {exc}") from None
                if not task.id:
                    raise ConfigError(f"--tasks {path}:{n}: empty id")
                if task.id in seen:
                    raise ConfigError(f"--tasks {path}:{n}: duplicate id {task.id!r} "
                                      f"(first on line {seen[task.id]})")
                seen[task.id] = n
                tasks.append(task)
                if len(tasks) > max_tasks:
                    raise ConfigError(f"--tasks {path}:{n}: more than --max-tasks="
                                      f"{max_tasks} tasks")
    except OSError as exc:
        raise ConfigError(f"--tasks {path}: {exc.strerror or exc}") from None
    return tasks


def finished_ids(path: str) -> set[str]:
    """`--resume`: the ids the results file already holds (a torn last line cut)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise ConfigError(f"--out {path}: {exc.strerror or exc}") from None
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        log.warning("batch.resume.torn_line", path=path, dropped_bytes=len(data) - keep)
        with open(path, "r+b") as f:
            f.truncate(keep)
    ids: set[str] = set()
    for n, raw in enumerate(data[:keep].splitlines(), 1):
        if not raw.strip():
            continue
        try:
            ids.add(_result_decoder.decode(raw).id)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"--out {path}:{n}: not a result line: {exc}") from None
    return ids


class ResultsFile:
    """The results file, opened for appending; `write` puts one whole line and
    flushes it (to the OS: a crash of agentd loses nothing already written)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._f = open(path, "ab")

    def write(self, line: ResultLine) -> None:
        self._f.write(_encoder.encode(line) + b"\n")
        self._f.flush()

    def close(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
