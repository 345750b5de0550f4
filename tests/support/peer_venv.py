"""A heavy Python peer in a virtual environment of its own (Harbor, inspect_ai,
LiteLLM's proxy): too large, or too particular about its Python, to join the test
extra, so each lives under `tests/.venvs/<name>` (gitignored).

`PeerVenv.ensure()` builds it once (`python -m venv` with the newest interpreter
new enough: `$<python_env>`, this one, `python3.13`/`3.12`/`3.11` on PATH, or
pyenv's; then `pip install <packages>`), under a lock so concurrent sessions
build it once, and reuses it while its probe runs. Without it the tests skip
with the reason; under CI=true they fail (peers.py `unavailable`).
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from peers import TESTS, unavailable

VENVS = TESTS / ".venvs"
BUILD_TIMEOUT = 1800.0  # one venv or pip step (a large dependency tree on a busy machine)


@dataclass(frozen=True)
class PeerVenv:
    name: str  # tests/.venvs/<name>
    packages: tuple[str, ...]  # what `pip install` is given
    probe: str  # Python the venv must run for it to be ready
    what: str  # the peer in the skip/failure reason
    min_python: tuple[int, int] = (3, 11)
    python_env: str = ""  # an env variable naming the interpreter to build it with
    env: Mapping[str, str] = field(default_factory=dict)  # for the build and the probe

    @property
    def path(self) -> Path:
        return VENVS / self.name

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def ensure(self) -> Path:
        """The venv's directory, built (under a lock) unless its probe already runs."""
        VENVS.mkdir(parents=True, exist_ok=True)
        with open(VENVS / f".{self.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self._ready():
                why = self._build()
                if why is not None or not self._ready():
                    unavailable(f"{self.what}: {why or 'the probe fails: ' + self.probe}")
        return self.path

    def _run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})

    def _ready(self) -> bool:
        return self.python.exists() and self._run(
            [str(self.python), "-c", self.probe], 300).returncode == 0

    def _interpreter(self) -> str | None:
        found = [os.environ.get(self.python_env, "") if self.python_env else "", sys.executable,
                 *(shutil.which(n) or "" for n in ("python3.13", "python3.12", "python3.11")),
                 *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[0-9]*/bin/python3")),
                         reverse=True)]
        check = f"import sys; sys.exit(sys.version_info < {self.min_python!r})"
        return next((p for p in found if p and subprocess.run(
            [p, "-c", check], capture_output=True, timeout=60).returncode == 0), None)

    def _build(self) -> str | None:
        """Create the venv; None when it worked, else why not."""
        base = self._interpreter()
        if base is None:
            hint = f" (set {self.python_env})" if self.python_env else ""
            return f"no Python >= {'.'.join(map(str, self.min_python))} for {self.what}{hint}"
        shutil.rmtree(self.path, ignore_errors=True)
        for argv in ([base, "-m", "venv", str(self.path)],
                     [str(self.python), "-m", "pip", "install", "-q", *self.packages]):
            done = self._run(argv, BUILD_TIMEOUT)
            if done.returncode != 0:
                return f"{' '.join(argv[:5])} failed: {done.stderr[-500:]}"
        return None
