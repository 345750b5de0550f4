"""The subagent's entry: `python -P -S -m agentd --agentd-control-child --ppid N`.

The interpreter starts without `site` and with its parent's import path as
PYTHONPATH (`agentd.tree.procs.child_argv` / `child_env`).  `main(argv)`
answers the first control frame (`child/configure`) using only os-level reads
and the stdlib `json` module, *before* importing the runtime (asyncio, uvloop,
msgspec: most of a child's start-up), so a parent sees its child alive as
early as the interpreter allows.  Then it:

* sets the Linux parent-death signal (SIGKILL when the parent dies, by any
  signal) and exits at once if the parent is already gone;
* moves the control wire off fds 0/1 (so nothing printed can corrupt it: fd 1
  becomes a copy of stderr, fd 0 /dev/null);
* imports the runtime and serves the wire: `child/run` runs the instruction
  through the real agent loop (`agentd.child.turn.ChildLoop`), `child/send`
  runs another turn of a warm session, `child/cancel` cancels the turn,
  `child/shutdown` and EOF on the control pipe end the process.

stderr is the child's log stream; the parent drains it as `subagent.stderr`.
With `--forkserver` the same argv starts the forkserver instead
(`agentd.__main__` dispatches to agentd.child.forkserver).

`AGENTD_TEST_CHILD_FAULT` (test-only, operator env) makes a child misbehave
on purpose: `crash`, `malformed`, `oversized`, `ignore_term`, `hang`.
"""

import os
import sys

from agentd.child.boot import FAULT_ENV, ppid_of, set_pdeathsig

FIRST_FRAME_MAX = 16 * 1024 * 1024
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def main(argv: list[str]) -> int:
    return serve_wire(ppid_of(argv))


def first_answer(body: bytes) -> tuple[dict, bytes]:
    """The first frame's params and its answer (`{pid, protocol}`); ValueError if not child/configure.

    Only the stdlib `json`: an exec'd child calls this before importing anything
    heavy.  The forkserver's warm-up calls it too, so its code is quickened in
    the template rather than in every forked child.
    """
    import json

    try:
        msg = json.loads(body)
        rid = msg["id"]
        if msg.get("jsonrpc") != "2.0" or msg.get("method") != "child/configure":
            raise ValueError("the first frame must be child/configure")
        params = msg["params"]
    except (KeyError, TypeError) as exc:
        raise ValueError("the first frame must be child/configure") from exc
    answer = json.dumps({"jsonrpc": "2.0", "id": rid,
                         "result": {"pid": os.getpid(), "protocol": 1}}).encode()
    return params, answer


def serve_wire(ppid: int | None) -> int:
    """Answer child/configure on fds 0/1, then run the runtime (also the forkserver's child)."""
    header = _read_exact(0, 4)
    if header is None:
        return EXIT_OK  # the parent went away before configuring us
    size = int.from_bytes(header, "big")
    if size > FIRST_FRAME_MAX:
        return EXIT_USAGE
    body = _read_exact(0, size)
    if body is None:
        return EXIT_OK
    try:
        params, answer = first_answer(body)
    except ValueError:
        sys.stderr.write("agentd child: the first control frame is not child/configure\n")
        return EXIT_USAGE
    os.write(1, len(answer).to_bytes(4, "big") + answer)

    set_pdeathsig()
    if ppid is not None and os.getppid() != ppid:
        return EXIT_FAILED  # orphaned before the death signal was armed
    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return _runtime(params, wire_in, wire_out, os.environ.get(FAULT_ENV, ""))


def _runtime(params: dict, wire_in: int, wire_out: int, fault: str) -> int:
    import gc

    # The import burst below makes long-lived objects only (modules, classes,
    # functions): a collection during it scans them all and frees nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        import msgspec

        from agentd import log as logmod
        from agentd import runtime
        from agentd.child.control import ChildConfig

        try:
            cfg = msgspec.convert(params, ChildConfig)
        except msgspec.ValidationError as exc:
            sys.stderr.write(f"agentd child: bad child/configure: {exc}\n")
            return EXIT_USAGE
        logmod.configure(fmt=cfg.log_format, run_id=cfg.run_id, level=cfg.log_level)
        if fault:
            _early_fault(fault, wire_out)
        from agentd.child.runtime import serve
    finally:
        if collecting:
            gc.enable()
    return runtime.run_to_exit(serve(cfg, wire_in, wire_out, fault, hard_exit=True))


def _early_fault(fault: str, wire_out: int) -> None:
    import signal
    import time

    if fault == "crash":
        os._exit(70)
    if fault == "malformed":
        junk = b"this is not json"
        os.write(wire_out, len(junk).to_bytes(4, "big") + junk)
    elif fault == "oversized":
        os.write(wire_out, (1 << 31).to_bytes(4, "big") + b"{")
    elif fault == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:  # ignores EOF and SIGTERM alike: only SIGKILL ends it
            time.sleep(3600)
