"""`--spawn forkserver` forks each child from the template it needs.

A child that talks HTTP (an MCP server in scope, or a model that is not
playback) forks from the `net` template, which has imported the HTTP stack;
any other child from the `lean` one, which has not.  Real processes: the
official SDK's server is the MCP server in scope, and a template is told apart
by what it has mapped (aiohttp's compiled HTTP parser).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT
from peers import python_peer, require_modules
from tree_helpers import make_config, precompile, until

from agentd.config import ServerSpec
from agentd.tree.api import SpawnRequest
from agentd.tree.forkserver import LEAN, NET
from agentd.tree.supervisor import Supervisor

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


async def test_children_fork_from_the_template_they_need(tmp_path):
    require_modules("mcp")
    with python_peer("sdk_servers.py") as peer:
        cfg = make_config(tmp_path, spawn="forkserver",
                          mcp=(ServerSpec(name="sdk", url=peer.url),))
        async with Supervisor(cfg) as sup:
            plain = await sup.spawn("0", SpawnRequest("no tools", tool_scope=(), mode="warm"))
            assert await until(lambda: sup._nodes[plain.handle].idle.is_set())
            assert set(sup._spawner._servers) == {LEAN}  # the net one is started on demand
            lean = sup._spawner.server(LEAN)._pid
            assert _ppid(sup.process(plain.handle).pid) == lean
            assert "aiohttp" not in _maps(lean) and "jsonschema_rs" not in _maps(lean)

            tooled = await sup.spawn("0", SpawnRequest("with the sdk server", mode="warm"))
            assert await until(lambda: sup._nodes[tooled.handle].idle.is_set())
            net = sup._spawner.server(NET)._pid
            assert net != lean and "aiohttp" in _maps(net) and "jsonschema_rs" in _maps(net)
            assert _ppid(sup.process(tooled.handle).pid) == net
            # the HTTP child really used its server: its first turn completed over it
            assert sup.status(tooled.handle).status == "running"
            assert sup.status(tooled.handle).result == '{"ok": true}'


def test_the_lean_template_imports_only_what_a_child_without_http_runs():
    """Each module imported into `lean` is mapped, and paid for, by every fork and exit.

    Not there: the HTTP stack; jsonschema-rs (compiled by a tool's first
    validation); importlib.metadata (`agentd.__version__` is resolved when a
    client or server first needs it); tomllib (only the root reads a file);
    hashlib (a tool-name collision is the only use).
    """
    code = ("import sys\n"
            "before = set(sys.modules)\n"
            "from agentd.tree.forkserver import LEAN, _preload\n"
            "_preload(LEAN)\n"
            "print(' '.join(sorted(set(sys.modules) - before)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    imported = set(proc.stdout.split())
    assert {"agentd.agent.run", "agentd.intelligence.playback", "uvloop"} <= imported
    assert not imported & {"aiohttp", "jsonschema_rs", "importlib.metadata", "tomllib",
                           "hashlib"}


def _environ(pid: int) -> list[str]:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        return fh.read().decode(errors="replace").split("\0")


def _signal_masks(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as fh:
        return {k: int(v, 16) for k, v in (line.split(":\t") for line in fh)
                if k in ("SigCgt", "SigIgn")}


async def test_a_forked_child_has_the_default_sigchld_and_bound_symbols(tmp_path):
    """The forkserver catches SIGCHLD to reap; a child it forks must not inherit that.

    And the template binds every shared-library symbol at start-up, so no child
    runs the lazy resolver (each first call would copy a page of the template)."""
    import signal

    cfg = make_config(tmp_path, spawn="forkserver")
    async with Supervisor(cfg) as sup:
        st = await sup.spawn("0", SpawnRequest("idle", mode="warm"))
        assert await until(lambda: sup._nodes[st.handle].idle.is_set())
        bit = 1 << (signal.SIGCHLD - 1)
        assert "LD_BIND_NOW=1" in _environ(sup._spawner.server(LEAN)._pid)  # bound before forking
        assert _signal_masks(sup._spawner.server(LEAN)._pid)["SigCgt"] & bit
        child = _signal_masks(sup.process(st.handle).pid)
        assert not child["SigCgt"] & bit and not child["SigIgn"] & bit
