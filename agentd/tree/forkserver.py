"""`--spawn forkserver`: fork each subagent from a pristine, pre-imported agentd.

The forkserver is itself a re-exec of the trusted binary
(`sys.executable -P -S -m agentd --agentd-control-child --forkserver --sock
3`, see `agentd.tree.procs.child_argv`).  It imports the
runtime once (asyncio, uvloop, msgspec, the agent loop), never starts an event
loop or a thread, freezes its heap for the GC, and then serves fork requests
on a private SOCK_SEQPACKET socket (it forks through libc, see
`agentd.child.forkserver.forker`): each request carries the child's three
pipe ends (SCM_RIGHTS); the forked child starts its own session, takes them
as fds 0/1/2 and runs exactly what an exec'd child runs
(`agentd.child.entry.serve_wire`).  Nothing of the parent
agentd is ever in the forkserver, so nothing of it is inherited.

One template, started on first use: the child runtime without the HTTP stack
(aiohttp, the MCP client, the OpenAI-compatible intelligence), since every
child's I/O is brokered by its parent and no child talks HTTP.  The kernel's
work per fork and per exit grows with the template's mapped memory, and the
HTTP stack would be a third of it (docs/subagents.md).

The forkserver reaps its children and reports each exit (`{"exit": pid,
"code": rc}`); it dies with the parent (parent-death signal) and its children
die with it, so a SIGKILLed root still leaves nothing behind.  On EOF of its
socket it kills what is left and exits.

This module is the parent's side (`ForkserverSpawner`); the forkserver's own
process code is `agentd.child.forkserver`.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

from agentd.child.boot import FAULT_ENV, FS_FD, FS_MSG_MAX
from agentd.errors import TreeError

if TYPE_CHECKING:  # asyncio itself is imported where it runs (a light module)
    import asyncio


def available() -> bool:
    """Can this platform run the forkserver (Linux: pidfds, SEQPACKET, SCM_RIGHTS)?"""
    return (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")
            and hasattr(socket, "SOCK_SEQPACKET") and hasattr(socket, "SCM_RIGHTS"))


class ForkserverSpawner:
    """The supervisor's spawner for `--spawn forkserver` (same interface as ExecSpawner).

    Its forkserver is started by the first spawn (a run may spawn none).
    """

    name = "forkserver"

    def __init__(self) -> None:
        self.forkserver = Forkserver()

    async def start(self) -> None:
        """Nothing yet: the forkserver is started by the first spawn."""

    async def spawn(self, handle: str, on_incoming, *, hello, max_frame: int,
                    env: dict[str, str] | None = None):
        return await self.forkserver.spawn(handle, on_incoming, hello=hello,
                                           max_frame=max_frame, env=env)

    async def aclose(self) -> None:
        await self.forkserver.aclose()

    def down(self) -> str | None:
        """Readiness (agentd.obs.health): why no child can be forked now, or None.

        The forkserver starts on first use and restarts at the next spawn after it
        died, so only one whose last start failed makes the process unready.
        """
        starting = self.forkserver._starting
        if starting is not None and starting.done() and not starting.cancelled() \
                and starting.exception() is not None:
            return "the forkserver failed to start"
        return None


class Forkserver:
    """The forkserver process and the parent's end of its socket."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._pid: int | None = None
        self._pidfd: int | None = None
        self._replies: list = []  # futures awaiting {"pid"}, in request order
        self._procs: dict[int, object] = {}
        self._early: dict[int, int] = {}
        self._closed = False
        self._reset()

    @property
    def pid(self) -> int | None:
        """The forkserver's pid while it runs (diagnostics, tests)."""
        return self._pid

    def _reset(self) -> None:
        from agentd.log import log

        if self._sock is not None:
            self._sock.close()
        self.log = log.bind(component="forkserver")
        self._sock = None
        self._pid = None
        self._pidfd = None
        self._replies = []
        self._procs = {}
        self._early = {}
        self._ready: asyncio.Future[Any] | None = None
        self._dead = False
        self._exited: asyncio.Event | None = None
        self._starting: asyncio.Future[None] | None = None

    async def _start(self) -> None:
        import asyncio

        from agentd.tree.procs import child_argv, child_env

        loop = asyncio.get_running_loop()
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = child_argv("--forkserver", "--sock", str(FS_FD))
        # LD_BIND_NOW: the dynamic linker binds every symbol at start-up, in the
        # template, so no forked child runs the lazy resolver and writes (copies) the
        # pages of the symbol tables it patches (≈ 15 faults per child; docs/subagents.md).
        env = {**child_env(), "LD_BIND_NOW": "1"}
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            self._pid = os.posix_spawn(  # noqa: ASYNC221 (vfork+exec, ~1 ms)
                argv[0], argv, env,
                file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 0),
                              (os.POSIX_SPAWN_DUP2, devnull, 1),
                              (os.POSIX_SPAWN_DUP2, child_sock.fileno(), FS_FD)],
                setsid=True)
        finally:
            os.close(devnull)
            child_sock.close()
        parent_sock.setblocking(False)
        self._sock = parent_sock
        ready = self._ready = loop.create_future()
        self._exited = asyncio.Event()
        loop.add_reader(parent_sock.fileno(), self._on_readable)
        self._pidfd = os.pidfd_open(self._pid)
        loop.add_reader(self._pidfd, self._on_server_exit, self._pid, self._pidfd, self._exited)
        await asyncio.wait_for(ready, 60.0)

    def _on_server_exit(self, pid: int, pidfd: int, exited) -> None:
        import asyncio

        try:
            got, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            got = pid
        if not got:
            return
        asyncio.get_running_loop().remove_reader(pidfd)
        os.close(pidfd)
        if self._pid == pid:
            self._pidfd = None
            self._gone("the forkserver exited")
        exited.set()

    def _gone(self, why: str) -> None:
        if self._dead:
            return
        self._dead = True
        if self._sock is not None:
            import asyncio

            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        for fut in self._replies:
            if not fut.done():
                fut.set_exception(OSError(why))
        self._replies.clear()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(OSError(why))
        # its children died with it (parent-death signal): they are reaped by init
        for proc in list(self._procs.values()):
            proc.set_exit(-signal.SIGKILL)  # type: ignore[attr-defined]
        self._procs.clear()

    def _on_readable(self) -> None:
        import json

        while self._sock is not None:
            try:
                data = self._sock.recv(FS_MSG_MAX)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._gone("the forkserver closed its socket")
                return
            msg = json.loads(data)
            if "exit" in msg:
                proc = self._procs.pop(msg["exit"], None)
                if proc is None:
                    self._early[msg["exit"]] = msg["code"]
                else:
                    proc.set_exit(msg["code"])  # type: ignore[attr-defined]
            elif "ready" in msg:
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(msg["ready"])
            elif self._replies:
                fut = self._replies.pop(0)
                if not fut.done():
                    if "pid" in msg:
                        fut.set_result(msg["pid"])
                    else:
                        fut.set_exception(OSError(msg.get("errno") or 0,
                                                  msg.get("error", "fork failed")))

    async def spawn(self, handle: str, on_incoming, *, hello, max_frame: int,
                    env: dict[str, str] | None = None):
        import asyncio
        import contextlib

        from agentd.tree.procs import ChildProcess, child_pipes, open_channel

        if self._dead and not self._closed:  # it died (killed?): start a fresh one
            self.log.warning("subagent.forkserver_restart", pid=self._pid)
            from agentd.obs import metrics

            metrics.FORKSERVER_RESTARTS.inc()
            self._reset()
        if self._sock is None and not self._dead:
            if self._starting is None:
                self._starting = asyncio.ensure_future(self._start())
            try:
                await asyncio.shield(self._starting)
            except Exception as exc:
                # the one TreeError a spawner raises: the Supervisor falls back to exec
                raise TreeError(f"the forkserver did not start: {exc!r}") from exc
        if self._dead or self._sock is None:
            raise OSError("the forkserver is not running")
        r0, w0, r1, w1, r2, w2 = child_pipes()
        try:
            channel = await open_channel(w0, r1, on_incoming, max_frame=max_frame)
        except BaseException:
            for fd in (r0, w0, r1, w1, r2, w2):
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise
        # The first frames go into the pipe before the fork: the child finds them
        # when it starts instead of waiting for this loop to learn its pid.
        hello(channel)
        fut = asyncio.get_running_loop().create_future()
        import json

        fault = (env or {}).get(FAULT_ENV)
        try:
            while True:
                try:
                    socket.send_fds(self._sock, [json.dumps({"fault": fault}).encode()],
                                    [r0, w1, w2])
                    break
                except BlockingIOError:
                    await asyncio.sleep(0.001)
            # Replies come in the order the requests went out: the future takes its
            # place only now, with no await since the send, so a spawn that found
            # the socket full and retried never takes the pid of one sent meanwhile
            # (that child would be signalled, waited for and reported as its own).
            self._replies.append(fut)
        except BaseException:
            channel.close()
            os.close(r2)
            raise
        finally:
            for fd in (r0, w1, w2):
                os.close(fd)
        try:
            pid = await fut
        except BaseException:
            channel.close()
            os.close(r2)
            raise
        proc = ChildProcess(handle, pid, channel, r2)
        if pid in self._early:
            proc.set_exit(self._early.pop(pid))
        else:
            self._procs[pid] = proc
        await proc.start()
        return proc

    async def aclose(self) -> None:
        import asyncio
        import contextlib

        self._closed = True
        if self._starting is not None and not self._starting.done():
            with contextlib.suppress(BaseException):
                await self._starting

        if self._sock is not None:
            if not self._dead:
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if self._pid is not None and self._exited is not None and not self._exited.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5.0):
                    await self._exited.wait()
            if not self._exited.is_set():
                with contextlib.suppress(OSError):
                    os.killpg(self._pid, signal.SIGKILL)
                await self._exited.wait()
