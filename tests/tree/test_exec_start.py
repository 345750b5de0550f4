"""How an exec'd child's interpreter starts: without `site`, on its parent's import path.

A child is `python -P -S -m agentd ...` (agentd.tree.procs.child_argv) whose
PYTHONPATH is its parent's `sys.path` made explicit (child_env / import_path).
The probes run that very command line and environment with a probe in place of
`-m agentd ...`, from real parent processes (a plain one, one with the
operator's PYTHONPATH, one in a venv); the last test runs a real exec'd child
of the Supervisor through a playback turn from a working directory holding a
stray `agentd/`.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from tree_helpers import make_config, precompile
from waiting import until

import agentd
from agentd.agent.subagents import SpawnRequest
from agentd.app.compose import open_supervisor
from agentd.tree.procs import child_argv, import_path

pytestmark = pytest.mark.timeout(120)

ROOT = str(Path(agentd.__file__).resolve().parent.parent)

# What the child's interpreter says about itself.
PROBE = """\
import json, sys
import agentd, agentd_native, msgspec
extra = None
try:
    import extra_mod
    extra = extra_mod.__file__
except ImportError:
    pass
print(json.dumps({"no_site": sys.flags.no_site, "safe_path": sys.flags.safe_path,
                  "site_loaded": "site" in sys.modules,
                  "agentd": agentd.__file__, "agentd_native": agentd_native.__file__,
                  "msgspec": msgspec.__file__, "extra": extra}))
"""

# A parent: builds the child's argv and environment as a spawner does, runs the
# probe with them in the working directory it is given.
PARENT = """\
import subprocess, sys
from agentd.tree.procs import child_argv, child_env
argv = child_argv()
argv = argv[:argv.index("-m")] + ["-c", sys.argv[1]]
out = subprocess.run(argv, env=child_env(), cwd=sys.argv[2], capture_output=True, text=True)
sys.stdout.write(out.stdout or out.stderr)
"""


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


def stray_cwd(tmp_path: Path) -> Path:
    """A working directory whose `agentd/` (and `msgspec.py`) would fail loudly if imported."""
    cwd = tmp_path / "cwd"
    (cwd / "agentd").mkdir(parents=True)
    for f in ("agentd/__init__.py", "agentd/__main__.py", "msgspec.py"):
        (cwd / f).write_text("raise SystemExit(99)\n")
    return cwd


def probe(python: str, tmp_path: Path, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([python, "-P", "-c", PARENT, PROBE, str(stray_cwd(tmp_path))],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    try:
        return json.loads(out.stdout)
    except ValueError:
        raise AssertionError(out.stdout) from None


def proc_file(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def under(path: str, root: str) -> bool:
    return Path(path).resolve().is_relative_to(root)


def test_a_child_runs_without_site_on_its_parents_path(tmp_path):
    got = probe(sys.executable, tmp_path, env={k: v for k, v in os.environ.items()
                                               if not k.startswith(("COV_CORE_", "COVERAGE_"))})
    assert got["no_site"] == 1 and got["safe_path"] is True and not got["site_loaded"]
    # agentd (both packages) from the parent's root, not the stray copy in its cwd;
    # site-packages (msgspec) from the explicit path although `site` never ran
    assert under(got["agentd"], ROOT) and under(got["agentd_native"], ROOT)
    import msgspec

    assert got["msgspec"] == msgspec.__file__


def test_the_operators_pythonpath_comes_along(tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "extra_mod.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(extra)}
    got = probe(sys.executable, tmp_path, env=env)
    assert got["no_site"] == 1 and got["extra"] == str(extra / "extra_mod.py")
    assert under(got["agentd"], ROOT)


def test_a_venv_parents_child_keeps_the_venv(tmp_path):
    """A venv: `-S` drops its site-packages (and the base's it inherits); the
    explicit path carries them.  (`sys.prefix` is the base's without `site` on
    3.11, where `site` sets a venv's prefix: nothing in agentd reads it.)"""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    # the venv's own site-packages, with a module only it has
    (site_dir,) = (env_dir / "lib").glob("python3*/site-packages")
    (site_dir / "extra_mod.py").write_text("")
    # ... and the packages of the interpreter running the suite (agentd
    # included), as `site` adds them: when that interpreter is itself a venv
    # (the README's command in a newcomer's venv), a nested venv's
    # system_site_packages would reach the base interpreter's, not these
    outer = [d for d in site.getsitepackages() if os.path.isdir(d)]
    (site_dir / "outer.pth").write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in outer))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    got = probe(python, tmp_path, env=env)
    assert got["no_site"] == 1
    assert got["extra"] == str(site_dir / "extra_mod.py")
    assert under(got["agentd"], ROOT)


def test_a_coverage_run_keeps_site_for_its_hook(monkeypatch):
    """Coverage measures subprocesses through a `.pth` file: only `site` runs it."""
    monkeypatch.delenv("COV_CORE_SOURCE", raising=False)
    monkeypatch.delenv("COVERAGE_PROCESS_START", raising=False)
    assert "-S" in child_argv() and "-P" in child_argv()
    monkeypatch.setenv("COVERAGE_PROCESS_START", "/nonexistent/.coveragerc")
    assert "-S" not in child_argv() and "-P" in child_argv()


def test_import_path_is_ours_made_explicit(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    missing = tmp_path / "missing"
    path = import_path(("", str(a), str(missing), str(b), str(a)), f"{b}{os.pathsep}")
    # agentd's root first (a source tree here), then the given PYTHONPATH, then
    # ours in order; never the empty entry (the cwd) nor one that does not exist
    assert path == (ROOT, str(b), str(a))


async def test_an_exec_child_started_without_site_runs_a_turn(tmp_path, monkeypatch):
    """A real exec'd child: `-S` on its command line, our import path in its
    environment, a playback turn end to end from a cwd with a stray agentd."""
    monkeypatch.chdir(stray_cwd(tmp_path))
    async with open_supervisor(make_config(tmp_path, spawn="exec")) as sup:
        st = await sup.spawn("0", SpawnRequest("hello"))
        assert st.status == "completed" and st.result == '{"ok": true}'
        warm = await sup.spawn("0", SpawnRequest("session", mode="warm"))
        assert await until(lambda: sup.process(warm.handle) is not None)
        pid = sup.process(warm.handle).pid
        # the spawn answers once the child is started: its exec may still be under way
        assert await until(lambda: proc_file(pid, "cmdline") != b"")
        argv = proc_file(pid, "cmdline").split(b"\0")
        environ = dict(kv.split(b"=", 1) for kv in proc_file(pid, "environ").split(b"\0")
                       if b"=" in kv)
        assert argv[1:3] == [b"-P", b"-S"] and b"--agentd-control-child" in argv
        entries = environ[b"PYTHONPATH"].decode().split(os.pathsep)
        assert entries[0] == ROOT and "" not in entries
        reply = await sup.send("0", warm.handle, "and another thing")
        assert reply.body()["result"] == '{"ok": true}'
