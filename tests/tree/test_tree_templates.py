"""`--spawn forkserver` forks every child from the one `lean` template.

No child talks HTTP (its I/O is brokered by its parent), so the template has
not imported the HTTP stack, even for a child with an MCP server in scope.
Real processes: the official SDK's server is the MCP server in scope, and the
template is told by what it has mapped (aiohttp's compiled HTTP parser).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from peers import ROOT, python_peer, require_modules
from tree_helpers import forkservers, make_config, precompile
from waiting import until

from agentd.agent.subagents import SpawnRequest
from agentd.app.compose import open_supervisor
from agentd.config.model import ServerSpec

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as fh:
        return fh.read()


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        stat = fh.read()
    return int(stat[stat.rindex(b")") + 2:].split()[1])


async def test_children_fork_from_the_one_lean_template(tmp_path):
    require_modules("mcp")
    with python_peer("sdk_servers.py") as peer:
        cfg = make_config(tmp_path, spawn="forkserver",
                          mcp=(ServerSpec(name="sdk", url=peer.url),))
        async with open_supervisor(cfg) as sup:
            plain = await sup.spawn("0", SpawnRequest("no tools", tool_scope=(), mode="warm"))
            assert await until(lambda: sup.status("0", plain.handle).result is not None)
            [lean] = forkservers()  # started by the first spawn
            assert _ppid(sup.process(plain.handle).pid) == lean
            assert "aiohttp" not in _maps(lean) and "jsonschema_rs" not in _maps(lean)

            # a child with a server in scope forks from `lean` too: its MCP calls and
            # model calls are brokered by this process (agentd.tree.broker)
            tooled = await sup.spawn("0", SpawnRequest("with the sdk server", mode="warm"))
            assert await until(lambda: sup.status("0", tooled.handle).result is not None)
            assert forkservers() == [lean]
            assert _ppid(sup.process(tooled.handle).pid) == lean
            assert sup.status("0", tooled.handle).status == "running"
            assert sup.status("0", tooled.handle).result == '{"ok": true}'
            assert "aiohttp" not in _maps(sup.process(tooled.handle).pid)


def test_the_lean_template_imports_only_what_a_child_without_http_runs():
    """Each module imported into `lean` is mapped, and paid for, by every fork and exit.

    Not there: the HTTP stack; jsonschema-rs (compiled by a tool's first
    validation); importlib.metadata (`agentd.__version__` is resolved when a
    client or server first needs it); tomllib (only the root reads a file);
    hashlib (a tool-name collision is the only use).
    """
    code = ("import sys\n"
            "before = set(sys.modules)\n"
            "from agentd.child.forkserver import _preload\n"
            "_preload()\n"
            "print(' '.join(sorted(set(sys.modules) - before)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    # the warm-up (a child's whole turn, tool step included) ran to its end
    assert "warm-up skipped" not in proc.stderr, proc.stderr
    imported = set(proc.stdout.split())
    assert {"agentd.child.turn", "uvloop"} <= imported
    assert not imported & {"aiohttp", "jsonschema_rs", "importlib.metadata", "tomllib",
                           "hashlib", "agentd.app", "agentd.tree"}


def _environ(pid: int) -> list[str]:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        return fh.read().decode(errors="replace").split("\0")


def _signal_masks(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as fh:
        return {k: int(v, 16) for k, v in (line.split(":\t") for line in fh)
                if k in ("SigCgt", "SigIgn", "SigBlk")}


async def test_a_forked_child_has_the_default_sigchld_and_bound_symbols(tmp_path):
    """The forkserver catches SIGCHLD to reap; a child it forks must not inherit that.

    And the template binds every shared-library symbol at start-up, so no child
    runs the lazy resolver (each first call would copy a page of the template)."""
    import signal

    cfg = make_config(tmp_path, spawn="forkserver")
    async with open_supervisor(cfg) as sup:
        st = await sup.spawn("0", SpawnRequest("idle", mode="warm"))
        assert await until(lambda: sup.status("0", st.handle).result is not None)
        bit = 1 << (signal.SIGCHLD - 1)
        assert "LD_BIND_NOW=1" in _environ(forkservers()[0])  # bound before forking
        assert _signal_masks(forkservers()[0])["SigCgt"] & bit
        child = _signal_masks(sup.process(st.handle).pid)
        assert not child["SigCgt"] & bit and not child["SigIgn"] & bit
        # signals are blocked only around a batch of forks: neither keeps them blocked
        assert child["SigBlk"] == 0
        assert _signal_masks(forkservers()[0])["SigBlk"] == 0


_BARE_FORK = """
import os, random, threading, time
from agentd.child import forkserver

fork = forkserver.forker()
print(fork is not os.fork)
random.random()
r, w = os.pipe()
pids = []
for _ in range(2):
    pid = fork()
    if pid == 0:
        forkserver.reseed()
        thread = threading.Thread(target=time.sleep, args=(0,))
        thread.start()
        thread.join()
        main = threading.current_thread() is threading.main_thread()
        os.write(w, f"{random.random()!r} {main} {thread.is_alive()}\\n".encode())
        os._exit(0)
    pids.append(pid)
for pid in pids:
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
os.close(w)
print(os.read(r, 4096).decode(), end="")
print(repr(random.random()))
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
print(forkserver.forker() is os.fork)
"""


def test_the_bare_fork_leaves_each_child_its_own_random_state_and_working_threads():
    """The forkserver forks through libc, skipping CPython's after-fork hooks (one thread).

    What those hooks are for must still hold in its children: `random` does
    not replay the template's sequence in every child, and a child can start
    and join a thread of its own.  With a second thread alive, the forkserver
    would fall back to `os.fork()`.
    """
    proc = subprocess.run([sys.executable, "-c", _BARE_FORK], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    assert lines[0] == "True"  # one thread: libc's fork
    assert lines[1:3] == ["0", "0"]  # both children exited cleanly
    children = [line.split() for line in lines[3:5]]
    assert [c[1:] for c in children] == [["True", "False"]] * 2  # thread started, joined
    draws = {children[0][0], children[1][0], lines[5]}
    assert len(draws) == 3  # each child, and the template, has its own random state
    assert lines[6] == "True"  # a second thread: os.fork
