"""`--spawn forkserver`: fork each subagent from a pristine, pre-imported agentd.

The forkserver is itself a re-exec of the trusted binary
(`sys.executable -P -m agentd --agentd-control-child --forkserver --sock 3
--template lean|net`).  It imports the runtime once (asyncio, uvloop, msgspec,
the agent loop), never starts an event loop or a thread, freezes its heap for
the GC, and then serves fork requests on a private SOCK_SEQPACKET socket (it
forks through libc, see `_forker`): each request carries the child's three
pipe ends (SCM_RIGHTS); the forked child starts its own session, takes them
as fds 0/1/2 and runs exactly what an exec'd child runs
(`agentd.tree.child.serve_wire`).  Nothing of the parent
agentd is ever in the forkserver, so nothing of it is inherited.

Two templates, each its own forkserver, started on first use: `net` has the
HTTP stack imported too (aiohttp, the MCP client, the OpenAI-compatible
intelligence) and serves every child that talks HTTP; `lean` serves children
that do not (playback intelligence, no MCP server in scope).  The kernel's
work per fork and per exit grows with the template's mapped memory, and the
HTTP stack is a third of it (docs/subagents.md).

The forkserver reaps its children and reports each exit (`{"exit": pid,
"code": rc}`); it dies with the parent (parent-death signal) and its children
die with it, so a SIGKILLed root still leaves nothing behind.  On EOF of its
socket it kills what is left and exits.
"""

from __future__ import annotations

import _signal
import os
import signal
import socket
import sys

FS_FD = 3
_MSG_MAX = 65536
WARM_ROUNDS = 12  # warm-up runs of the child path (see _warm_up)
FORK_BATCH = 16  # queued fork requests served back to back
LEAN, NET = "lean", "net"
# What each template imports besides the child runtime (a missing optional one is skipped).
_LEAN_IMPORTS = ("agentd.agent.run", "agentd.agent.loop", "agentd.intelligence",
                 "agentd.intelligence.playback", "agentd.mcp.toolbox", "agentd.tree.brokered",
                 "orjson", "agentd_native")
TEMPLATES = {
    LEAN: _LEAN_IMPORTS,
    NET: (*_LEAN_IMPORTS, "agentd.intelligence.openai", "agentd.mcp.client",
          "agentd.mcp.http_transport", "aiohttp", "jsonschema_rs"),
}


def template_for(http: bool) -> str:
    """The template a child forks from: `net` if it talks HTTP (MCP servers, a remote model)."""
    return NET if http else LEAN


# ------------------------------------------------------------------ server side
def _arg(argv: list[str], name: str) -> str | None:
    if name in argv and argv.index(name) + 1 < len(argv):
        return argv[argv.index(name) + 1]
    return None


def _preload(template: str) -> None:
    """Import what every child of this template will need, so that a fork starts warm."""
    import asyncio  # noqa: F401

    import msgspec  # noqa: F401

    import agentd.tree.childrt
    import agentd.tree.control  # noqa: F401
    from agentd import runtime

    runtime.loop_factory()
    for name in TEMPLATES[template]:
        try:
            __import__(name)
        except ImportError:
            pass
    try:
        _warm_up()
    except Exception as exc:  # only a cost, never a failure
        sys.stderr.write(f"agentd forkserver: warm-up skipped: {exc!r}\n")


def _warm_up() -> None:
    """Run the child's whole path (a playback turn over the control wire) in the forkserver.

    First-time work (msgspec type compilation, decoder caches, imports done
    inside functions, regex caches) then lives in the shared template instead
    of being redone, on private copy-on-write pages, by every child.  The
    event loop is closed again before serving: the template stays loop-free.
    """
    import asyncio
    import json
    import tempfile

    import msgspec

    from agentd import log as logmod
    from agentd import runtime
    from agentd.tree.child import first_answer
    from agentd.tree.control import (
        Catalogue,
        CatalogueTool,
        ChildConfig,
        ControlSession,
        HandleBody,
        MessageParams,
        Progress,
        RunOutcome,
        SpawnParams,
    )

    parent, child = ControlSession("parent"), ControlSession("child")
    cfg = ChildConfig(handle="0.0", depth=2, instruction="warm-up")
    for method, params in (("child/configure", cfg), ("child/run", MessageParams("x"))):
        rid, frame = parent.request(method, params)
        child.feed(frame)
        parent.feed(child.response(rid, RunOutcome(status="completed") if method == "child/run"
                                   else {"pid": 0}))
    rid, frame = child.request("tree/spawn", SpawnParams(instruction="x"))
    parent.feed(frame)
    child.feed(parent.response(rid, HandleBody(handle="0.0.1", status="running")))
    parent.feed(child.notification("child/progress", Progress(1, 1)))
    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        json.dump({"playback": 1, "turns": [{"content": "{}"}]}, fh)
        fh.flush()
        # brokered, as every child is: its model call goes up the wire (io/request)
        cfg = ChildConfig(handle="0.0", depth=2, instruction="warm-up",
                          intelligence=f"playback:{fh.name}", brokered=True,
                          catalogue=Catalogue(tools=(CatalogueTool(
                              qualified="warm__up", server="warm", name="up",
                              input_schema={"type": "object"}),)))
        configure = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "child/configure",
                                "params": msgspec.to_builtins(cfg)}).encode()
        logmod.configure(level="error")
        try:
            # Several rounds: CPython 3.11 quickens a function after a few calls and
            # then specializes its instructions in place; done here, those writes to
            # code objects are not redone on private copy-on-write pages by every child.
            for _ in range(WARM_ROUNDS):
                params, _answer = first_answer(configure)
                cfg = msgspec.convert(params, ChildConfig)
                with asyncio.Runner(loop_factory=runtime.loop_factory()) as runner:
                    runner.run(_warm_wire(cfg))
        finally:
            logmod.configure(level="info")


async def _warm_wire(cfg) -> None:
    """One child run end to end over pipes: the child runtime against a parent Channel."""
    import asyncio

    from agentd.intelligence.base import Completion
    from agentd.tree.childrt import serve as child_serve
    from agentd.tree.control import ControlSession, IoCompletion, MessageParams
    from agentd.tree.procs import Channel

    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()

    def broker(ev) -> None:  # the parent's side of a brokered model call
        if ev.method == "io/request":
            parent.respond(ev.id, IoCompletion(Completion(content="{}")))

    parent = Channel(ControlSession("parent"), up_r, down_w, broker)
    await parent.start()
    try:
        served = asyncio.ensure_future(child_serve(cfg, down_r, up_w))
        await parent.call("child/run", MessageParams("warm-up"))
        await served
    finally:
        parent.close()


def _trim_heap() -> None:
    """Give the C heap's free pages back to the kernel (glibc's `malloc_trim`).

    Start-up and warm-up leave ≈ 1.5 MiB of freed memory in the heap.  Each
    fork copies the page-table entry of every present page and each child's
    exit drops them again, so pages nobody uses are pure cost per child.
    """
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except AttributeError:  # not glibc: nothing to trim with
        pass


def _forker():
    """The forkserver's fork: libc's `fork()`, without CPython's after-fork protocol, when safe.

    `os.fork()` has the child re-create the GIL and the runtime's locks, forget
    every other thread and run the Python-level at-fork hooks of `threading`,
    `random`, `logging` and `concurrent.futures`: code that never runs in the
    template, so every child copies the pages it touches (≈ 50 copy-on-write
    faults net, ≈ 5% of a playback child's CPU; docs/subagents.md).  The
    forkserver has one thread, calls `fork()` holding the GIL (ctypes'
    `PyDLL`) and blocks the signals it has Python handlers for around each
    batch of forks (`serve`), so that protocol has nothing to repair: no lock
    can be held by a thread the child lacks, the thread's ident does not
    change, no signal is caught but not yet handled.  Only `random`'s state
    would be shared by every child: `_child` reseeds it.  With a second
    thread (or no /proc to tell) it is `os.fork()`.
    """
    import ctypes

    try:
        if len(os.listdir("/proc/self/task")) != 1:
            return os.fork
        libc_fork = ctypes.PyDLL(None, use_errno=True).fork
    except (OSError, AttributeError):
        return os.fork

    def fork() -> int:
        pid = libc_fork()
        if pid < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return pid

    return fork


def _recv_fds(sock: socket.socket, flags: int) -> tuple[bytes, list[int]]:
    """socket.recv_fds for up to three fds, with `flags` (3.11's recv_fds drops them)."""
    import array

    fds = array.array("i")
    data, ancdata, _flags, _addr = sock.recvmsg(_MSG_MAX, socket.CMSG_LEN(3 * fds.itemsize),
                                                flags)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - (len(payload) % fds.itemsize)])
    return data, list(fds)


def _send(sock: socket.socket, obj: dict) -> None:
    import json

    try:
        sock.send(json.dumps(obj).encode())
    except OSError:
        pass


def serve(argv: list[str]) -> int:
    from agentd.tree.child import FAULT_ENV, _set_pdeathsig

    ppid_arg = _arg(argv, "--ppid")
    sock_fd = int(_arg(argv, "--sock") or FS_FD)
    template = _arg(argv, "--template") or NET
    if template not in TEMPLATES:
        sys.stderr.write(f"agentd forkserver: unknown template {template!r}\n")
        return 2
    _set_pdeathsig()
    if ppid_arg and os.getppid() != int(ppid_arg):
        return 1
    sock = socket.socket(fileno=sock_fd)
    os.environ.pop(FAULT_ENV, None)  # a child's fault comes with its fork request only
    _preload(template)
    import gc
    import json
    import select

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    fork = _forker()
    # The signals with a Python-level handler (SIGCHLD's, SIGINT's): the ones
    # a child could otherwise inherit caught but not yet handled (see _forker).
    caught = {sig for sig in signal.valid_signals() if callable(_signal.getsignal(sig))}
    gc.collect()
    _trim_heap()
    gc.freeze()  # the heap is shared copy-on-write by every child: keep the GC off it
    children: set[int] = set()
    me = os.getpid()
    _send(sock, {"ready": me})

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    try:
        while True:
            try:
                ready, _, _ = select.select([sock, wake_r], [], [])
            except InterruptedError:
                continue
            if wake_r in ready:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            reap()
            if sock not in ready:
                continue
            # Take every request already queued (up to FORK_BATCH), then fork them
            # back to back: after each fork the whole heap is shared copy-on-write
            # again, so what runs between two forks is paid for in page faults.
            batch: list[tuple[str | None, list[int]]] = []
            eof = False
            flags = 0
            while len(batch) < FORK_BATCH:
                try:
                    data, fds = _recv_fds(sock, flags)
                except BlockingIOError:
                    break
                except OSError:
                    eof = True
                    break
                if not data:
                    eof = True  # the parent closed the socket (or died)
                    break
                flags = socket.MSG_DONTWAIT
                try:
                    fault = json.loads(data).get("fault")
                except (ValueError, AttributeError):
                    fault = None
                batch.append((fault, fds))
            pending = [fd for _, fds in batch for fd in fds]
            mask = _signal.pthread_sigmask(signal.SIG_BLOCK, caught)
            try:
                for fault, fds in batch:
                    if len(fds) != 3:
                        for fd in fds:
                            os.close(fd)
                            pending.remove(fd)
                        _send(sock, {"error": "a fork request needs three fds"})
                        continue
                    pid = fork()
                    if pid == 0:
                        others = [fd for fd in pending if fd not in fds]
                        _child(sock, fds, (wake_r, wake_w, *others), fault, me, mask)
                    for fd in fds:
                        os.close(fd)
                        pending.remove(fd)
                    children.add(pid)
                    try:
                        sock.send(b'{"pid": %d}' % pid)
                    except OSError:
                        pass
            finally:
                _signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            if eof:
                break
    finally:
        for pid in list(children):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        while children:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            children.discard(pid)
    return 0


def _child(sock: socket.socket, fds: list[int], close: tuple[int, ...], fault: str | None,
           server_pid: int, mask: set[int]) -> None:
    """In the forked child: become a fresh subagent on the three fds; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        # The C functions: `signal.signal` turns the old handler into an enum member,
        # a failed lookup and a caught exception that cost a forked child ≈ 30
        # copy-on-write page faults (docs/subagents.md).
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        _signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _reseed()
        os.setsid()
        sock.close()
        for fd in close:  # the forkserver's wake-up pipe, the fds of the rest of the batch
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        from agentd.tree.child import FAULT_ENV, serve_wire

        if fault:
            os.environ[FAULT_ENV] = fault
        code = serve_wire(server_pid)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(code)


def _reseed() -> None:
    """What `random`'s own at-fork hook does (`_inst.seed()`): a state of the child's own."""
    rnd = sys.modules.get("random")
    if rnd is not None:
        rnd._inst.seed()


# ------------------------------------------------------------------ parent side
class ForkserverUnavailable(OSError):
    """The forkserver could not be started: the Supervisor falls back to exec."""


def available() -> bool:
    """Can this platform run the forkserver (Linux: pidfds, SEQPACKET, SCM_RIGHTS)?"""
    return (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")
            and hasattr(socket, "SOCK_SEQPACKET") and hasattr(socket, "SCM_RIGHTS"))


class ForkserverSpawner:
    """The supervisor's spawner for `--spawn forkserver` (same interface as ExecSpawner).

    It routes each spawn to the forkserver of its template, starting that one
    on first use (a run may spawn none, or only one kind).
    """

    name = "forkserver"

    def __init__(self) -> None:
        self._servers: dict[str, Forkserver] = {}

    async def start(self) -> None:
        """Nothing yet: a forkserver is started by the first spawn that needs it."""

    def server(self, template: str) -> Forkserver:
        if template not in self._servers:
            self._servers[template] = Forkserver(template)
        return self._servers[template]

    async def spawn(self, handle: str, on_incoming, *, hello, max_frame: int,
                    env: dict[str, str] | None = None, http: bool = True):
        return await self.server(template_for(http)).spawn(
            handle, on_incoming, hello=hello, max_frame=max_frame, env=env)

    async def aclose(self) -> None:
        for server in self._servers.values():
            await server.aclose()

    def down(self) -> str | None:
        """Readiness (agentd.obs.health): why no child can be forked now, or None.

        A forkserver starts on first use and restarts at the next spawn after it
        died, so only one whose last start failed makes the process unready.
        """
        for template, server in self._servers.items():
            starting = server._starting
            if starting is not None and starting.done() and not starting.cancelled() \
                    and starting.exception() is not None:
                return f"the {template} forkserver failed to start"
        return None


class Forkserver:
    """One forkserver process (one template) and the parent's end of its socket."""

    def __init__(self, template: str) -> None:
        self.template = template
        self._sock: socket.socket | None = None
        self._pid: int | None = None
        self._pidfd: int | None = None
        self._replies: list = []  # futures awaiting {"pid"}, in request order
        self._procs: dict[int, object] = {}
        self._early: dict[int, int] = {}
        self._closed = False
        self._reset()

    def _reset(self) -> None:
        from agentd.log import log

        if getattr(self, "_sock", None) is not None:
            self._sock.close()
        self.log = log.bind(component="forkserver", template=self.template)
        self._sock = None
        self._pid = None
        self._pidfd = None
        self._replies = []
        self._procs = {}
        self._early = {}
        self._ready = None
        self._dead = False
        self._exited = None
        self._starting = None

    async def _start(self) -> None:
        import asyncio

        from agentd.tree.procs import child_argv, child_env

        loop = asyncio.get_running_loop()
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = child_argv("--forkserver", "--sock", str(FS_FD), "--template", self.template)
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
        self._ready = loop.create_future()
        self._exited = asyncio.Event()
        loop.add_reader(parent_sock.fileno(), self._on_readable)
        self._pidfd = os.pidfd_open(self._pid)
        loop.add_reader(self._pidfd, self._on_server_exit, self._pid, self._pidfd, self._exited)
        await asyncio.wait_for(self._ready, 60.0)

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
                data = self._sock.recv(_MSG_MAX)
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
                        fut.set_exception(OSError(msg.get("error", "fork failed")))

    async def spawn(self, handle: str, on_incoming, *, hello, max_frame: int,
                    env: dict[str, str] | None = None):
        import asyncio
        import contextlib

        from agentd.tree.child import FAULT_ENV
        from agentd.tree.procs import ChildProcess, open_channel

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
                raise ForkserverUnavailable(f"the forkserver did not start: {exc!r}") from exc
        if self._dead or self._sock is None:
            raise OSError("the forkserver is not running")
        r0, w0 = os.pipe()
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
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
            self._replies.append(fut)
            while True:
                try:
                    socket.send_fds(self._sock, [json.dumps({"fault": fault}).encode()],
                                    [r0, w1, w2])
                    break
                except BlockingIOError:
                    await asyncio.sleep(0.001)
        except BaseException:
            if fut in self._replies:
                self._replies.remove(fut)
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
