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

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from peer_venv import PeerVenv

CHECK = ("import sys\n"
         "from harbor.models.trajectories import Trajectory\n"
         "for p in sys.argv[1:]:\n"
         "    Trajectory.model_validate_json(open(p, 'rb').read())\n"
         "    print('valid', p)\n")


HARBOR = PeerVenv("harbor", ("harbor",), "import harbor.models.trajectories",
                  "Harbor's trajectory model", min_python=(3, 12),
                  python_env="AGENTD_HARBOR_PYTHON")
VENV = HARBOR.path


@pytest.fixture(scope="session")
def harbor_validate() -> Callable[..., str]:
    """`validate(*paths)`: Harbor's Trajectory model loads each file, or the test fails."""
    HARBOR.ensure()

    def validate(*paths: Path) -> str:
        done = subprocess.run([str(HARBOR.python), "-c", CHECK, *map(str, paths)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"Harbor refused a trajectory: {done.stderr[-3000:]}"
        return done.stdout

    return validate
