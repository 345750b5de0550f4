"""Helpers to find and start the real peers the tests talk to.

* npm peers (``@modelcontextprotocol/server-everything``,
  ``@modelcontextprotocol/conformance`` and a Node 22 runtime from the npm
  package ``node``) are installed by ``npm install --prefix tests/peers`` from
  the lockfile there; :func:`ensure_npm_peers` runs it when ``node_modules`` is
  missing and returns ``tests/peers/node_modules/.bin``.  ``tests/peers_2026``
  holds the conformance suite's pre-release with the 2026-07-28 client
  scenarios (:func:`ensure_conformance_2026`), installed the same way.
* A peer that cannot be had skips the test with a reason -- except under
  ``CI=true``, where it fails (:func:`unavailable`).
* :func:`free_port`, :func:`wait_port`, :class:`PeerProcess` start a peer on
  a free loopback port and stop it (SIGTERM, then SIGKILL) afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from waiting import until_sync

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SUPPORT = TESTS / "support"  # the peer scripts and the suite's helpers
PEERS_DIR = TESTS / "peers"
NPM_BIN = PEERS_DIR / "node_modules" / ".bin"
IN_CI = os.environ.get("CI", "").lower() == "true"
_install_lock = threading.Lock()
# the official SDK warns that 2025-11-25's `resources/subscribe` is gone at 2026-07-28;
# a module marked with this exercises that revision's subscribe on purpose
LEGACY_SUBSCRIBE = pytest.mark.filterwarnings(
    "ignore:resources/subscribe is removed as of 2026-07-28")


def unavailable(reason: str) -> None:
    """Skip (or, under CI=true, fail) because a peer cannot be had."""
    if IN_CI:
        pytest.fail(f"peer unavailable under CI: {reason}")
    pytest.skip(reason)  # only outside CI: under CI=true the line above failed the test


def import_peer(name: str, reason: str = "") -> Any:
    """``pytest.importorskip`` under the one rule of :func:`unavailable`: a
    Python peer that cannot be imported skips its tests (a whole module when
    called at import time) locally, and fails them under ``CI=true``."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        why = f"{reason or name} cannot be imported: {exc}"
        if IN_CI:
            pytest.fail(f"peer unavailable under CI: {why}", pytrace=False)
        pytest.skip(why, allow_module_level=True)  # outside CI only (failed above)


def require_modules(*names: str) -> None:
    """Skip (fail under CI) unless the Python packages a peer needs are importable."""
    import importlib.util

    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        unavailable(f"python peer dependencies missing: {', '.join(missing)}")


def ensure_npm_peers(*needed: str, peers_dir: Path = PEERS_DIR) -> Path:
    """``<peers_dir>/node_modules/.bin``, installing the npm peers if missing.

    ``needed`` names executables that must be there (default: all three).
    ``peers_dir`` is ``tests/peers`` unless a test needs ``tests/peers_2026``
    (:func:`ensure_conformance_2026`).
    """
    needed = needed or ("mcp-server-everything", "conformance", "node")
    bin_dir = peers_dir / "node_modules" / ".bin"
    with _install_lock:
        if not all((bin_dir / n).exists() for n in needed):
            npm = shutil.which("npm")
            if npm is None:
                unavailable("npm is not installed: cannot install the npm test peers")
            cmd = [npm, "ci" if (peers_dir / "package-lock.json").exists() else "install",
                   "--prefix", str(peers_dir), "--no-audit", "--no-fund"]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            except (OSError, subprocess.TimeoutExpired) as exc:
                unavailable(f"npm install of the test peers failed: {exc}")
            if proc.returncode != 0:
                unavailable(f"npm install of the test peers failed: {proc.stderr[-2000:]}")
        missing = [n for n in needed if not (bin_dir / n).exists()]
        if missing:
            unavailable(f"npm peers missing after install: {', '.join(missing)}")
    return bin_dir


def ensure_conformance_2026() -> Path:
    """The ``conformance`` executable of ``tests/peers_2026`` (the suite's
    pre-release with the 2026-07-28 client scenarios); run it under
    :func:`npm_env` (tests/peers' Node 22 first on PATH)."""
    ensure_npm_peers("node")
    return ensure_npm_peers("conformance", peers_dir=TESTS / "peers_2026") / "conformance"


def npm_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with the npm peers' ``.bin`` (Node 22 first) on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{NPM_BIN}{os.pathsep}{env.get('PATH', '')}"
    if extra:
        env.update(extra)
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_port(host: str, port: int, *, limit: float = 30.0,
              proc: subprocess.Popen | None = None) -> None:
    """Wait until something accepts on host:port (a readiness wait, not an assertion)."""
    def listening() -> bool:
        if port_open(host, port):
            return True
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"peer exited with {proc.returncode} before listening")
        return False
    until_sync(listening, limit=limit, what=f"something listening on {host}:{port}")


def wait_port_closed(host: str, port: int, *, limit: float = 15.0) -> None:
    """Wait until nothing accepts on host:port any more (a killed peer is gone)."""
    until_sync(lambda: not port_open(host, port), limit=limit,
               what=f"{host}:{port} closed")


class PeerProcess:
    """A peer in a subprocess on a loopback port; ``stop()``/``kill()`` end it."""

    def __init__(self, argv: Sequence[str], port: int, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None, host: str = "127.0.0.1") -> None:
        self.argv = list(argv)
        self.port = port
        self.host = host
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None

    def start(self, *, limit: float = 30.0) -> PeerProcess:
        self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        try:
            wait_port(self.host, self.port, limit=limit, proc=self.proc)
        except (RuntimeError, AssertionError):
            self.kill()
            raise
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/mcp"

    def kill(self) -> None:
        """SIGKILL (a crash), and reap."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        wait_port_closed(self.host, self.port)

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> PeerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PythonPeer(PeerProcess):
    """A Python peer script from tests/support/ (``script PORT args``); a first start that
    loses a race for its free port retries on another one."""

    def __init__(self, script: str, *args: str, port: int | None = None) -> None:
        self.script, self.args, self.fixed = script, args, port is not None
        self.started_once = False
        port = port or free_port()
        super().__init__(self._argv(port), port)

    def _argv(self, port: int) -> list[str]:
        return [sys.executable, str(SUPPORT / self.script), str(port), *self.args]

    def start(self, *, limit: float = 60.0) -> PeerProcess:
        for attempt in range(3):
            try:
                super().start(limit=limit)
                self.started_once = True
                return self
            except RuntimeError:
                # a restart keeps its port (clients know the URL); a first start may move
                if self.fixed or self.started_once or attempt == 2:
                    raise
                self.port = free_port()  # it exited: most likely the port was taken
                self.argv = self._argv(self.port)
        raise AssertionError("unreachable")


def python_peer(script: str, *args: str, port: int | None = None) -> PythonPeer:
    """A Python peer script from tests/support/ run with this interpreter: ``script PORT args``."""
    return PythonPeer(script, *args, port=port)


def everything_peer() -> PeerProcess:
    """server-everything (the official npm server) over Streamable HTTP on loopback."""
    bin_dir = ensure_npm_peers("mcp-server-everything", "node")
    port = free_port()
    return PeerProcess([str(bin_dir / "mcp-server-everything"), "streamableHttp"], port,
                       env=npm_env({"PORT": str(port)}))


class NodePeer(PythonPeer):
    """A Node script under tests/ run with the npm peers' Node 22 (``script PORT args``)."""

    def _argv(self, port: int) -> list[str]:
        return [str(NPM_BIN / "node"), str(TESTS / self.script), str(port), *self.args]


def ts_peer(major: int, *args: str, port: int | None = None) -> NodePeer:
    """The TypeScript SDK server ``tests/ts_peers/server_v{major}.mjs`` (1 or 2) on loopback.

    Missing npm peers skip the test (fail under CI=true), as for every npm peer.
    """
    ensure_npm_peers("node")
    return NodePeer(f"ts_peers/server_v{major}.mjs", *args, port=port)
