"""The files of `agentd batch`: the tasks it reads and the results it appends.

Both are JSON Lines with a fixed shape (docs/batch.md). The tasks file is read
whole and checked before anything runs: a line that is not a task (bad JSON, a
missing or unknown member, a wrong type, longer than `--task-line-bytes`) or
a duplicate id is a `ConfigError` naming the file and the line number, which
the CLI turns into exit 2 with that one line on stderr.

The results file is append-only: each line is scrubbed of secrets (the
cassettes' scrubber, `scrubbed_line`), written and flushed whole as its
sample ends, so an interrupted batch leaves only complete lines. A last line
without its newline (a batch killed mid-write, by SIGKILL or a full disk) is
cut off on `--resume` (and logged), so that sample runs again -- only once
every complete line was read as a result line.

Files are not trusted because agentd wrote them: the results file and the
cassettes are opened with `open_regular` (never through a symbolic link put in
their place, refused unless a regular file, never blocking on a FIFO or a
device) and read within a bound whatever `stat` says. The results file is
locked (`flock`) while a batch holds it: a second batch on it is refused,
naming the holder's pid.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import IO, Any

import msgspec

from agentd.config.model import DEFAULT_MAX_TASKS, DEFAULT_TASK_LINE_BYTES
from agentd.errors import ConfigError
from agentd.log import log, redact
from agentd.output import Usage
from agentd.wire.guard import PEER_FAULTS, fault_text
from agentd_native import MAX_FRAME

RESULT_LINE_BYTES = 4 * MAX_FRAME
"""The longest line `--resume` reads as a result line: a sample's result reached
the batch root in one control-wire frame, and its line is that result re-encoded
(escapes can grow it) beside the counts and the error."""

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def open_regular(path: str, flags: int, mode: int = 0o600) -> int:
    """An fd of `path` opened with `flags`, only if it is a regular file and not a
    symbolic link (O_NOFOLLOW; O_NONBLOCK so a FIFO or a device never blocks the
    open); otherwise OSError whose `strerror` says what `path` is instead."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link: refused (agentd never follows a "
                                       "link in place of its own file)") from None
        if exc.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "not a regular file (a FIFO or a socket): "
                                       "refused") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
        raise OSError(errno.EINVAL, f"not a regular file ({kind}): refused")
    os.set_blocking(fd, True)
    return fd


def lines_within(f: IO[bytes], bound: int) -> list[bytes] | None:
    """Every line of `f` (newlines kept), or None once more than `bound` bytes are
    read: at most `bound + 1` bytes are ever read."""
    lines: list[bytes] = []
    left = bound + 1
    while left > 0 and (line := f.readline(left)):
        lines.append(line)
        left -= len(line)
    return lines if left > 0 else None


def scrubbed_line(obj: Any) -> bytes:
    """`obj` as one JSON line with every registered secret redacted: what a
    cassette line and a result line are written as (the log's redaction)."""
    return redact(msgspec.json.encode(obj).decode()).encode() + b"\n"


class TaskLine(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One sample to run: what an `agentd --instruction` run would be given."""

    id: str
    instruction: str
    output_contract: str | None = None
    tool_scope: list[str] | None = None  # MCP server names; None: all of them
    target: Any = None  # what the scorers compare the result with (any JSON)
    metadata: dict[str, Any] | None = None  # carried to the result line untouched


class ResultLine(msgspec.Struct, omit_defaults=True):
    """One run of a sample (one epoch), as appended to the results file. A later
    line of the same (id, epoch) supersedes an earlier one (`--resume` re-ran it)."""

    id: str
    status: str  # completed | failed | error | budget_exhausted | deadline | cancelled
    partial: bool
    result: Any
    steps: int
    usage: Usage
    run_id: str
    error: str | None = None  # present unless status is completed
    # 1-based; always written (never the default): 0 is only read, from a line
    # written before epochs existed, and means epoch 1
    epoch: int = 0
    wall_ms: int | None = None
    model: str | None = None  # as configured; absent: the gateway's default
    settings: dict[str, Any] | None = None  # what the sample was given (docs/batch.md)
    contract_met: bool | None = None  # absent: no contract, or one agentd cannot check
    scores: dict[str, float] | None = None
    score_errors: dict[str, str] | None = None  # scorer -> why it could not score
    retries: int = 0  # runs of this epoch before this one that ended in `error`
    metadata: dict[str, Any] | None = None  # the task line's, untouched
    trajectory: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        return self.id, self.epoch or 1


_task_decoder = msgspec.json.Decoder(TaskLine)
_result_decoder = msgspec.json.Decoder(ResultLine)


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


def _holder(fd: int) -> str:
    """Who holds the flock on `fd`'s file: `pid N` from /proc/locks (Linux), or a
    plain word where that cannot be told."""
    st = os.fstat(fd)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read(1 << 20)
    except OSError:
        return "another process"
    rows = [cols for row in table.splitlines()
            if len(cols := row.split()) >= 6 and cols[1] == "FLOCK"]  # a waiter's is "->"
    ino = f":{st.st_ino}"  # a stacked filesystem may show the lower device: the inode then
    for match in (lambda c: c == dev, lambda c: c.endswith(ino)):
        pids = [cols[4] for cols in rows if match(cols[5])]
        if pids:
            return f"pid {pids[0]}"
    return "another process"


def _result_lines(fd: int, path: str, *, what: str = "--out") -> tuple[dict[tuple[str, int], ResultLine], int]:
    """The final line of each (id, epoch) among the complete lines of the results
    file `fd`, each read as a result line (ConfigError naming the first that is
    not), and where the torn last line begins (the file's size if there is none)."""
    final: dict[tuple[str, int], ResultLine] = {}
    keep = 0
    with os.fdopen(os.dup(fd), "rb") as f:
        f.seek(0)
        n = 0
        while raw := f.readline(RESULT_LINE_BYTES + 2):
            n += 1
            if not raw.endswith(b"\n"):
                if len(raw) > RESULT_LINE_BYTES:
                    raise ConfigError(f"{what} {path}:{n}: line longer than "
                                      f"{RESULT_LINE_BYTES} bytes: not a results file")
                if not raw.startswith(b'{"id":'[:len(raw)]):
                    raise ConfigError(f"{what} {path}:{n}: the last line is not a result "
                                      "line, nor the start of one: not a results file")
                break  # the torn last line
            keep += len(raw)
            if not raw.strip():
                continue
            try:
                line = _result_decoder.decode(raw)
            except PEER_FAULTS as exc:
                raise ConfigError(f"{what} {path}:{n}: not a result line: "
                                  f"{fault_text(exc)}") from None
            final[line.key] = line
    return final, keep


def read_results(path: str) -> list[ResultLine]:
    """The final line of each (id, epoch) of a finished results file, in the order
    of their first lines (`agentd batch score`); ConfigError naming a bad line."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError as exc:
        raise ConfigError(f"RESULTS {path}: {exc.strerror or exc}") from None
    try:
        final, keep = _result_lines(fd, path, what="RESULTS")
        if keep < os.fstat(fd).st_size:
            raise ConfigError(f"RESULTS {path}: the last line is torn (a batch still "
                              "running, or killed): finish it with --resume first")
    except OSError as exc:
        raise ConfigError(f"RESULTS {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return list(final.values())


class ResultsFile:
    """The results file, opened for appending and locked for the batch's life;
    `write` puts one whole scrubbed line and flushes it (to the OS: a crash of
    agentd loses nothing already written).

    Opening checks, before a byte of the file changes: that it is a regular
    file and not a link, that no other batch holds it (exit 2 naming the
    holder), and then either that it is empty (a new batch) or, with
    `resume`, that every complete line is a result line (`finished` holds the
    final line of each (id, epoch); a torn last line is cut only then).
    ConfigError otherwise."""

    def __init__(self, path: str, *, resume: bool) -> None:
        self.path = path
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        except OSError as exc:
            raise ConfigError(f"--out {path}: {exc.strerror or exc}") from None
        try:
            self.finished = self._check(fd, path, resume)
            self._f = os.fdopen(fd, "ab")
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def _check(fd: int, path: str, resume: bool) -> dict[tuple[str, int], ResultLine]:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"--out {path}: in use by another agentd batch "
                              f"({_holder(fd)}): wait for it to end, or name another "
                              "file") from None
        size = os.fstat(fd).st_size
        if not resume:
            if size > 0:
                raise ConfigError(f"--out {path}: already holds results (--resume "
                                  "continues it; or name a new file)")
            return {}
        try:
            final, keep = _result_lines(fd, path)
            if keep < size:
                log.warning("batch.resume.torn_line", path=path, dropped_bytes=size - keep)
                os.ftruncate(fd, keep)
        except OSError as exc:
            raise ConfigError(f"--out {path}: {exc.strerror or exc}") from None
        return final

    def write(self, line: ResultLine) -> None:
        self._f.write(scrubbed_line(line))
        self._f.flush()

    def close(self) -> None:
        """Flush to the disk and close (which releases the lock)."""
        if self._f.closed:
            return
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
        finally:
            self._f.close()
