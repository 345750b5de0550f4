"""The forkserver process: `python -m agentd --agentd-control-child --forkserver`.

The code that runs *inside* the forkserver (agentd.tree.forkserver is the
parent's side that starts and talks to it): import the child runtime's modules once,
warm the child path up, freeze the heap, then fork subagents on request from a
private SOCK_SEQPACKET socket (fd `FS_FD`), each forked child running exactly
what an exec'd child runs (`agentd.child.entry.serve_wire`).  It reaps its
children and reports each exit (`{"exit": pid, "code": rc}`); it dies with the
parent and its children die with it.  See agentd.tree.forkserver for the whole
design and docs/subagents.md for the figures behind it.
"""

from __future__ import annotations

import _signal
import os
import signal
import socket
import sys

from agentd.child.boot import (
    FAULT_ENV,
    FS_FD,
    FS_MSG_MAX,
    flag_value,
    ppid_of,
    set_pdeathsig,
)

WARM_ROUNDS = 12  # warm-up runs of the child path (see _warm_up)
FORK_BATCH = 16  # queued fork requests served back to back
# What the template imports besides the child runtime (a missing optional one is
# skipped); never the HTTP stack: a child's I/O is brokered (agentd.tree.broker).
PRELOAD = ("agentd.child.turn", "agentd.agent.loop", "agentd.intelligence",
           "agentd.mcp.client.toolbox", "agentd.child.brokered", "agentd.trajectory.recorder",
           "orjson", "agentd_native")


def _preload() -> None:
    """Import what every child will need, so that a fork starts warm."""
    import asyncio  # noqa: F401

    import msgspec  # noqa: F401

    from agentd import runtime

    runtime.loop_factory()
    for name in PRELOAD:
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

    import msgspec

    from agentd import log as logmod
    from agentd import runtime
    from agentd.agent.subagents import HandleState
    from agentd.child.control import (
        Catalogue,
        ChildConfig,
        ControlSession,
        MessageParams,
        Progress,
        RunOutcome,
        SpawnParams,
    )
    from agentd.child.entry import first_answer
    from agentd.wire.shapes import ToolEntry

    parent, child = ControlSession("parent"), ControlSession("child")
    cfg = ChildConfig(handle="0.0", depth=2)
    for method, params in (("child/configure", cfg), ("child/run", MessageParams("x"))):
        rid, frame = parent.request(method, params)
        child.feed(frame)
        parent.feed(child.response(rid, RunOutcome(status="completed") if method == "child/run"
                                   else {"pid": 0}))
    rid, frame = child.request("tree/spawn", SpawnParams(instruction="x"))
    parent.feed(frame)
    child.feed(parent.response(rid, HandleState(handle="0.0.1", status="running")))
    parent.feed(child.notification("child/progress", Progress(1, 1)))
    # its model call goes up the wire (io/request), as every child's does
    cfg = ChildConfig(handle="0.0", depth=2, catalogue=Catalogue(tools=(ToolEntry(
        qualified="warm__up", server="warm", name="up", input_schema={"type": "object"}),)))
    configure = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "child/configure",
                            "params": msgspec.to_builtins(cfg)}).encode()
    logmod.configure(level="error")
    try:
        # Several rounds: CPython 3.11 quickens a function after a few calls and
        # then specializes its instructions in place; done here, those writes to
        # code objects are not redone on private copy-on-write pages by every child.
        for _ in range(WARM_ROUNDS):
            first, _answer = first_answer(configure)
            cfg = msgspec.convert(first, ChildConfig)
            with asyncio.Runner(loop_factory=runtime.loop_factory()) as runner:
                runner.run(_warm_wire(cfg))
    finally:
        logmod.configure(level="info")


async def _warm_wire(cfg) -> None:
    """One child run end to end over pipes: the child runtime against a parent Channel.

    The turn is the common one: a model call that asks for a tool, the brokered
    tool call, a second model call that answers. Code a child first runs in its
    own turn would be quickened (written) on its private copy-on-write pages.
    """
    import asyncio

    from agentd.child.channel import Channel
    from agentd.child.control import (
        ControlSession,
        IoCall,
        IoCompletion,
        MessageParams,
    )
    from agentd.child.runtime import serve as child_serve
    from agentd.intelligence.base import Completion, FunctionCall, ToolCall, Usage
    from agentd.wire.shapes import Observed

    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()

    def broker(ev) -> None:  # the parent's side: a tool step, its tool call, then the answer
        if ev.method != "io/request":
            return
        req = ev.params
        if isinstance(req, IoCall):
            parent.respond(ev.id, Observed("up"))
        elif any(m.role == "tool" for m in req.messages):
            parent.respond(ev.id, IoCompletion(Completion(content="{}", usage=Usage(3, 2, 5))))
        else:
            call = ToolCall(id="w1", function=FunctionCall(name="warm__up",
                                                           arguments='{"text": "x"}'))
            parent.respond(ev.id, IoCompletion(Completion(tool_calls=[call],
                                                          usage=Usage(3, 2, 5))))

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


def forker():
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
    data, ancdata, _flags, _addr = sock.recvmsg(FS_MSG_MAX, socket.CMSG_LEN(3 * fds.itemsize),
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
    ppid = ppid_of(argv)
    sock_fd = int(flag_value(argv, "--sock") or FS_FD)
    set_pdeathsig()
    if ppid is not None and os.getppid() != ppid:
        return 1
    sock = socket.socket(fileno=sock_fd)
    os.environ.pop(FAULT_ENV, None)  # a child's fault comes with its fork request only
    _preload()
    import gc
    import json
    import select

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    fork = forker()
    # The signals with a Python-level handler (SIGCHLD's, SIGINT's): the ones
    # a child could otherwise inherit caught but not yet handled (see forker).
    caught = {sig for sig in signal.valid_signals() if callable(_signal.getsignal(sig))}
    gc.collect()
    _trim_heap()
    gc.freeze()  # the heap is shared copy-on-write by every child: keep the GC off it
    children: set[int] = set()
    watched: list[socket.socket | int] = [sock, wake_r]
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
                ready, _, _ = select.select(watched, [], [])
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
                    try:
                        pid = fork()
                    except OSError as exc:  # out of processes or memory: refuse this one
                        for fd in fds:
                            os.close(fd)
                            pending.remove(fd)
                        _send(sock, {"error": f"fork failed: {exc.strerror}",
                                     "errno": exc.errno})
                        continue
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
        reseed()
        os.setsid()
        sock.close()
        for fd in close:  # the forkserver's wake-up pipe, the fds of the rest of the batch
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        from agentd.child.entry import serve_wire

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


def reseed() -> None:
    """What `random`'s own at-fork hook does (`_inst.seed()`): a state of the child's own.

    A forked child's first duty (`_child`) when `forker` skipped that hook.
    """
    rnd = sys.modules.get("random")
    if rnd is not None:
        rnd._inst.seed()
