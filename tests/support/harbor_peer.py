"""Harbor's own trajectory model as a peer: `harbor.models.trajectories.Trajectory`.

Harbor (PyPI `harbor`) needs Python >= 3.12 and brings a large dependency
tree, so it lives in a venv of its own under `tests/.venvs/harbor` (gitignored),
created once by the session fixture `harbor_validate` (`python -m venv` with
a >= 3.12 interpreter: `$AGENTD_HARBOR_PYTHON`, `python3.13`/`python3.12` on
PATH, or pyenv's; then `pip install harbor`) and reused while it imports.
A file is validated by that venv's python loading it with
`Trajectory.model_validate_json`: Harbor's own rules, not a copy of them.
Without the venv the tests skip with the reason; under CI=true they fail
(tests/support/peers.py `unavailable`).
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from peers import unavailable

VENV = Path(__file__).resolve().parents[1] / ".venvs" / "harbor"
CHECK = ("import sys\n"
         "from harbor.models.trajectories import Trajectory\n"
         "for p in sys.argv[1:]:\n"
         "    Trajectory.model_validate_json(open(p, 'rb').read())\n"
         "    print('valid', p)\n")


def _interpreters() -> list[str]:
    found = [os.environ.get("AGENTD_HARBOR_PYTHON", ""), sys.executable,
             *(shutil.which(n) or "" for n in ("python3.13", "python3.12")),
             *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")),
                     reverse=True)]
    return [p for p in found if p]


def _modern(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"],
                           capture_output=True, timeout=60)
    return probe.returncode == 0


def _ready() -> bool:
    py = VENV / "bin" / "python"
    return py.exists() and subprocess.run(
        [str(py), "-c", "import harbor.models.trajectories"], capture_output=True,
        timeout=120).returncode == 0


def _build() -> str | None:
    """Create the venv; None when it worked, else why not."""
    base = next((p for p in _interpreters() if _modern(p)), None)
    if base is None:
        return "no Python >= 3.12 for Harbor (set AGENTD_HARBOR_PYTHON)"
    shutil.rmtree(VENV, ignore_errors=True)
    steps = ([base, "-m", "venv", str(VENV)],
             [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "harbor"])
    for argv in steps:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            return f"{' '.join(argv[:4])} failed: {done.stderr[-500:]}"
    return None


@pytest.fixture(scope="session")
def harbor_validate() -> Callable[..., str]:
    """`validate(*paths)`: Harbor's Trajectory model loads each file, or the test fails."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / ".harbor.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _ready():
            why = _build()
            if why is not None or not _ready():
                unavailable(f"Harbor's trajectory model: {why or 'harbor does not import'}")

    def validate(*paths: Path) -> str:
        done = subprocess.run([str(VENV / "bin" / "python"), "-c", CHECK, *map(str, paths)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"Harbor refused a trajectory: {done.stderr[-3000:]}"
        return done.stdout

    return validate
