"""Subagent processes: spawn, the control channel over their pipes, stderr, kill ladder.

A child is always `sys.executable -P -S -m agentd --agentd-control-child`
(never a PATH lookup, never anything else; `child_argv`), in its own session
and process group, with its stdin/stdout carrying the control wire and its
stderr drained line by line into this process's log as `subagent.stderr`
(tagged by handle).  Exits are watched through a pidfd (no SIGCHLD handler, no
watcher threads) and every child is reaped.

The kill ladder (`ChildProcess.ladder`) is: ask over the wire → close stdin
(EOF) → wait → SIGTERM to the process group → wait → SIGKILL → reap; each wait
is a bounded share of one budget (normally `--drain-timeout`), as the sans-IO
plan `agentd.tree.ladder.Ladder` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from agentd.child.boot import CHILD_FLAG
from agentd.child.channel import Channel
from agentd.child.control import ControlSession, Incoming
from agentd.log import Logger, log, text_form
from agentd.obs import metrics
from agentd.runtime import pipe_file
from agentd.tree.ladder import Ladder
from agentd.wire.guard import PEER_FAULTS

__all__ = [
    "CHILD_ARGV",
    "LIMITS",
    "ChildProcess",
    "ExecSpawner",
    "child_argv",
    "child_env",
    "child_pipes",
    "exhausted",
    "import_path",
    "open_channel",
]

STDERR_LINE_MAX = 64 * 1024
# relayed lines unwrapped at most this deep (a line is cut at STDERR_LINE_MAX anyway)
RELAY_NESTING_MAX = 64
_FRAMES = metrics.FRAMES  # control-wire frames by direction (agentd.obs)
CHILD_ARGV = ("-m", "agentd", CHILD_FLAG)


def child_argv(*extra: str) -> list[str]:
    """The one command line a subagent (or a forkserver) ever has.

    `-P`: the child's working directory is never put on its import path, so a
    stray `agentd/` there cannot stand in for the real one.  `-S`: no `site`,
    whose `.pth` files (import hooks, certificate patching) would run again in
    every child for nothing: a brokered child talks to no network, and its
    import path comes ready-made from `child_env`.  The exception is a coverage
    run that measures subprocesses: its hook is a `.pth` file, which only
    `site` runs.
    """
    site = () if _coverage_hooked(os.environ) else ("-S",)
    return [sys.executable, "-P", *site, *CHILD_ARGV, "--ppid", str(os.getpid()), *extra]


def _coverage_hooked(env: Mapping[str, str]) -> bool:
    """Is a coverage run measuring subprocesses (pytest-cov, coverage's own hook)?"""
    return "COV_CORE_SOURCE" in env or "COVERAGE_PROCESS_START" in env


def _agentd_roots() -> list[str]:
    """The directories holding `agentd` and `agentd_native` (one, unless split)."""
    import agentd
    import agentd_native

    roots = [os.path.dirname(os.path.dirname(os.path.abspath(m.__file__ or "")))
             for m in (agentd, agentd_native)]
    return list(dict.fromkeys(roots))


# What a child (and a forkserver, whose environment every forked child inherits)
# may see of ours: its I/O is brokered, so it needs no key, bearer, secret, proxy
# or gateway setting. An allowlist: a name nobody thought of stays out.
_ENV_KEEP = frozenset({"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "USER",
                       "LOGNAME", "LD_LIBRARY_PATH"})
_ENV_KEEP_PREFIX = ("LC_", "PYTHON", "AGENTD_TEST_", "COV_CORE_", "COVERAGE_")
_ENV_SECRETISH = ("KEY", "TOKEN", "SECRET", "PASSW", "BEARER", "CREDENTIAL", "AUTH")


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment a subagent process gets: the allowlist above, never a secret."""
    out = {}
    for k, v in env.items():
        if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIX):
            if not any(w in k.upper() for w in _ENV_SECRETISH):
                out[k] = v
    return out


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ours scrubbed (`scrub_env`), with our import path
    as its PYTHONPATH (`import_path`), so it resolves every module as we do."""
    out = scrub_env(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(import_path(tuple(sys.path), out.get("PYTHONPATH", "")))
    return out


@functools.lru_cache(maxsize=4)
def import_path(path: tuple[str, ...], given: str = "") -> tuple[str, ...]:
    """A child's import path beyond the standard library: ours, made explicit.

    The child runs without `site` (`child_argv`), so what `site` gave us
    (site-packages, a venv's, the user site, directories named by `.pth`
    files) must come from here: every entry of our `sys.path` that exists,
    in our order, after the entries of `given` (a PYTHONPATH).  The directory
    of *this* agentd goes first, so a child runs exactly the code of its
    parent, unless it is installed in site-packages (found anyway; first, it
    would put site-packages ahead of the standard library).  Never the empty
    entry (the working directory) nor one that does not exist (an import hook's
    pseudo-entry); the hooks themselves, `.pth` import lines such as an editable
    install's finder, do not run in a child, hence agentd's own directories.
    """
    import site

    installed = {os.path.abspath(p) for p in site.getsitepackages()}
    roots = [r for r in _agentd_roots() if r not in installed]
    entries = [os.path.abspath(p) for p in (*given.split(os.pathsep), *path) if p]
    return tuple(dict.fromkeys([*roots, *(p for p in entries if os.path.exists(p))]))


# A child that cannot start because the machine ran out of something: the cap
# counted (agentd_spawn_refusals_total) and what an operator raises (docs/operations.md).
LIMITS = {
    errno.EMFILE: ("nofile", "open files: this process's RLIMIT_NOFILE is reached "
                             "(raise `ulimit -n` / LimitNOFILE=)"),
    errno.ENFILE: ("nfile", "open files: the system's table is full (raise fs.file-max)"),
    errno.EAGAIN: ("pids", "processes: RLIMIT_NPROC or the cgroup's pids.max is reached "
                           "(raise `ulimit -u` / pids.max / TasksMax=)"),
    errno.ENOMEM: ("memory", "memory: the fork found none (free memory, or lower "
                             "--max-children)"),
}


def exhausted(exc: BaseException) -> tuple[str, str] | None:
    """(cap, words) when `exc` is a start failure for a machine limit, else None."""
    return LIMITS.get(exc.errno) if isinstance(exc, OSError) else None  # type: ignore[arg-type]


def child_pipes() -> tuple[int, int, int, int, int, int]:
    """A child's three pipes (stdin, stdout, stderr: read and write ends), or none:
    out of fds half-way, those made are closed again before the error is raised."""
    made: list[int] = []
    try:
        for _ in range(3):
            made.extend(os.pipe())
    except BaseException:
        for fd in made:
            os.close(fd)
        raise
    r0, w0, r1, w1, r2, w2 = made
    return r0, w0, r1, w1, r2, w2


def child_record(line: str) -> tuple[str | None, dict[str, Any] | None]:
    """The log record a child's stderr `line` holds (children log JSON to their
    parent), with a grandchild's line it relayed (`subagent.stderr`) unwrapped to
    the grandchild's own record and handle, as deep as the tree goes: (the
    handle of the deepest relayer, or None; the record, or None for a line that
    is no record -- a crash's raw text)."""
    handle: str | None = None
    for _ in range(RELAY_NESTING_MAX):
        try:
            record = orjson.loads(line)
        except PEER_FAULTS:
            return handle, None
        if not isinstance(record, dict):
            return handle, None
        inner = record.get("line")
        if record.get("event") != "subagent.stderr" or not isinstance(inner, str):
            return handle, record
        handle, line = str(record.get("handle", handle)), inner
    return handle, None


class _StderrDrain(asyncio.Protocol):
    """Each line the child writes on stderr becomes one `subagent.stderr` event
    (in the text form: the child's own event under its handle, `Logger.relay`)."""

    def __init__(self, logger: Logger) -> None:
        self._log = logger
        self._buf = b""
        self.done = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data
        *lines, self._buf = buf.split(b"\n")
        if len(self._buf) > STDERR_LINE_MAX:
            lines.append(self._buf)
            self._buf = b""
        for line in lines:
            if line.strip():
                self._relay(line[:STDERR_LINE_MAX].decode("utf-8", "replace"))

    def _relay(self, line: str) -> None:
        if text_form():
            handle, record = child_record(line)
            self._log.relay(line, handle=handle, record=record)
        else:  # JSON: the line as the child wrote it, no parse
            self._log.relay(line)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._buf.strip():
            self._relay(self._buf.decode("utf-8", "replace"))
        self._buf = b""
        self.done.set()


class ChildProcess:
    """One live subagent process, whoever forked it (exec or forkserver)."""

    def __init__(self, handle: str, pid: int, channel: Channel, stderr_r: int) -> None:
        self.handle = handle
        self.pid = pid
        self.returncode: int | None = None
        self.exited = asyncio.Event()
        self.log = log.bind(handle=handle, pid=pid)
        self.channel = channel
        self._stderr_fd = stderr_r
        self._stderr: _StderrDrain | None = None
        self._stderr_transport: asyncio.ReadTransport | None = None

    async def start(self) -> None:
        """Drain the child's stderr into the log (its channel is up already)."""
        loop = asyncio.get_running_loop()
        drain = self._stderr = _StderrDrain(self.log)
        self._stderr_transport, _ = await loop.connect_read_pipe(
            lambda: drain, pipe_file(self._stderr_fd, "rb"))

    def set_exit(self, returncode: int) -> None:
        if self.returncode is None:
            self.returncode = returncode
            self.exited.set()

    def signal(self, sig: int) -> None:
        """Signal the child's process group (it leads its own session)."""
        if self.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    async def wait(self, within: float | None = None) -> bool:
        """True once the child has exited and been reaped (waiting at most `within` s)."""
        if within is None:
            await self.exited.wait()
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(within, 0.0)):
                await self.exited.wait()
        return self.exited.is_set()

    async def ladder(self, budget: float, *, ask: str | None = "child/shutdown",
                     reason: str = "") -> int:
        """End the child: ask → EOF → SIGTERM → SIGKILL, within `budget` seconds
        (the rungs and their waits: :class:`agentd.tree.ladder.Ladder`); reaped."""
        loop = asyncio.get_running_loop()
        plan = Ladder(budget, loop.time(),
                      ask=bool(ask) and not self.exited.is_set()
                      and not self.channel.closed.is_set())
        rung: str = "exit"
        while not self.exited.is_set() and (step := plan.next(loop.time())) is not None:
            rung, within = step
            if rung == "ask":
                assert ask is not None
                self.channel.ask(ask)
            elif rung == "eof":
                self.channel.close_write()
            else:
                self.signal(signal.SIGTERM if rung == "sigterm" else signal.SIGKILL)
            if not await self.wait(within) and rung == "sigkill":
                self.log.error("subagent.unreaped", detail="still not reaped after SIGKILL")
                await self.wait()
        self.log.debug("subagent.ladder", rung=rung, reason=reason, returncode=self.returncode)
        return self.returncode  # type: ignore[return-value]

    async def close(self) -> None:
        """Release the pipes once the child is gone (stderr read to its end first)."""
        self.channel.close()
        if self._stderr is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._stderr.done.wait()
        if self._stderr_transport is not None:
            self._stderr_transport.close()


async def open_channel(stdin_w: int, stdout_r: int, on_incoming: Callable[[Incoming], None],
                       *, max_frame: int) -> Channel:
    """The parent's end of a child's control wire (it owns both fds from here), started."""
    channel = Channel(ControlSession("parent", max_frame=max_frame), stdout_r, stdin_w,
                      on_incoming)
    await channel.start()
    return channel


class ExecSpawner:
    """`--spawn exec`: each child is a fresh `posix_spawn` of `sys.executable`."""

    name = "exec"

    def __init__(self) -> None:
        self._watch: dict[int, tuple[int, ChildProcess]] = {}

    async def start(self) -> None:
        pass

    async def spawn(self, handle: str, on_incoming: Callable[[Incoming], None], *,
                    hello: Callable[[Channel], None], max_frame: int,
                    env: dict[str, str] | None = None) -> ChildProcess:
        """Start one child.

        `hello(channel)` sends the first frames as soon as the wire exists (a forked
        child finds them in its pipe when it starts).
        """
        r0, w0, r1, w1, r2, w2 = child_pipes()
        argv = child_argv()
        try:
            # posix_spawn is vfork+exec: it returns in about a millisecond
            pid = os.posix_spawn(  # noqa: ASYNC221
                argv[0], argv, child_env(env),
                file_actions=[(os.POSIX_SPAWN_DUP2, r0, 0), (os.POSIX_SPAWN_DUP2, w1, 1),
                              (os.POSIX_SPAWN_DUP2, w2, 2)],
                setsid=True)
        except BaseException:
            for fd in (r0, w0, r1, w1, r2, w2):
                os.close(fd)
            raise
        finally:
            for fd in (r0, w1, w2):
                with contextlib.suppress(OSError):
                    os.close(fd)
        pidfd = -1
        try:
            pidfd = os.pidfd_open(pid)  # may find no fd left: the child must not outlive it
            channel = await open_channel(w0, r1, on_incoming, max_frame=max_frame)
        except BaseException:
            for fd in (pidfd, w0, r1, r2):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # noqa: ASYNC222 (SIGKILLed: reaped at once)
            raise
        proc = ChildProcess(handle, pid, channel, r2)
        hello(proc.channel)
        self._watch_exit(proc, pidfd)
        await proc.start()
        return proc

    def _watch_exit(self, proc: ChildProcess, pidfd: int) -> None:
        loop = asyncio.get_running_loop()
        self._watch[pidfd] = (pidfd, proc)

        def reap() -> None:
            try:
                pid, status = os.waitpid(proc.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (should not happen)
                pid, status = proc.pid, 255 << 8
            if pid == 0:
                return
            loop.remove_reader(pidfd)
            os.close(pidfd)
            self._watch.pop(pidfd, None)
            proc.set_exit(os.waitstatus_to_exitcode(status))

        loop.add_reader(pidfd, reap)

    async def aclose(self) -> None:
        pass

    def down(self) -> str | None:
        """Readiness: exec can always spawn (a failed spawn fails only its run)."""
        return None


def raise_fd_limit(want: int) -> None:
    """Each live child holds 3-4 fds here: lift the soft RLIMIT_NOFILE toward the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (ImportError, ValueError, OSError):
        pass
