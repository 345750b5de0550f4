"""Suite-wide fixtures. The suite's helpers (the process harness, peers, free ports,
the fault server) live in tests/support/, importable by their bare names from every
test folder because this file puts that folder on sys.path before any test module
is imported."""

from __future__ import annotations

import io
import os
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = str(ROOT / "tests" / "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)
IN_CI = os.environ.get("CI", "").lower() == "true"


def agentd_executable() -> str:
    """The installed `agentd` console script (the real entry point operators run)."""
    candidate = Path(sysconfig.get_path("scripts")) / "agentd"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("agentd")
    if found:
        return found
    from peers import unavailable

    unavailable("the agentd console script is not installed; run pip install -e '.[test]'")
    raise AssertionError  # unreachable: unavailable() skips or fails


@pytest.fixture(scope="session")
def agentd_bin() -> str:
    return agentd_executable()


@pytest.fixture(params=["exec", "forkserver"])
def spawn(request) -> str:
    """Each spawn mode in turn, for a tree test that must hold for both."""
    return str(request.param)


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


def _captured(level: str):
    from agentd import log

    buf = io.StringIO()
    log.configure(stream=buf, fmt="json", level=level)
    yield buf
    log.configure(stream=sys.stderr)


@pytest.fixture
def logs():
    """agentd's log lines, JSON at `info`, into a buffer for this test (read them
    back with `logcapture.events`); stderr again afterwards."""
    yield from _captured("info")


@pytest.fixture
def debug_logs():
    """`logs` at `debug`: the per-message lines (a dropped notification, say) an
    operator turns on to see what the runtime passed over."""
    yield from _captured("debug")
