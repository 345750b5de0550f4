"""fast-agent's BatchRunner as a column of bench_batch.py (a helper, not a benchmark).

fast-agent-mcp 0.10.48, the release with the BatchRunner, needs Python >= 3.12
while agentd runs on 3.11, so it lives in its own virtual environment, created
once with the newest Python >= 3.12 found (``--fast-agent-python``, pyenv's
versions, ``python3.13``/``python3.12`` on PATH) and cached under
``~/.cache/agentd-bench/`` (``AGENTD_BENCH_CACHE`` moves it). The benchmark
writes a fast-agent home (``fast-agent.yaml``: the OpenAI-compatible
``generic`` provider at the bench's gateway, the MCP server over Streamable
HTTP), an AgentCard using that server, and a short program that hands the
bench's tasks file to ``BatchRunner.run`` (template ``{{instruction}}``: the
model sees the same user message as agentd's samples).

Anything that keeps fast-agent from running -- no Python >= 3.12, an install
that fails, a run that fails -- raises :class:`Unavailable` with the reason,
which the benchmark prints as ``"skipped"`` instead of crashing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

VERSION = "0.10.48"
MODEL = "generic.bench-model"
RUN_LIMIT_S = 1800.0  # a run past this is killed and reported as skipped, not waited on

# Runs inside the fast-agent venv: argv = home tasks out card parallel.
PROGRAM = """\
import asyncio, json, sys
from fast_agent.batch import BatchRunner

async def main() -> None:
    home, tasks, out, card, parallel = sys.argv[1:6]
    result = await BatchRunner(home=home).run(
        input=tasks, output_path=out, agent_card=card, template="{{instruction}}",
        parallel=int(parallel), id_field="id", overwrite=True)
    print(json.dumps({"rows": len(result.rows), "summary": result.summary}))

asyncio.run(main())
"""


class Unavailable(Exception):
    """fast-agent cannot be had here; the message says why."""


def _version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    major, minor = out.split()
    return int(major), int(minor)


def find_python(explicit: str | None) -> str:
    """The newest Python >= 3.12 on this machine, or the one asked for."""
    if explicit:
        v = _version(explicit)
        if v is None or v < (3, 12):
            raise Unavailable(f"--fast-agent-python {explicit} is not a Python >= 3.12")
        return explicit
    candidates: list[str] = []
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    if pyenv.is_dir():
        candidates += [str(p / "bin" / "python") for p in pyenv.iterdir()
                       if (p / "bin" / "python").exists()]
    candidates += [p for name in ("python3.14", "python3.13", "python3.12")
                   if (p := shutil.which(name))]
    found = [(v, c) for c in candidates if (v := _version(c)) is not None and v >= (3, 12)]
    if not found:
        raise Unavailable("no Python >= 3.12 found (fast-agent-mcp "
                          f"{VERSION} needs one; pass --fast-agent-python)")
    return max(found)[1]


def ensure_venv(python: str) -> Path:
    """The cached venv's interpreter, with fast-agent-mcp installed (once)."""
    v = _version(python)
    assert v is not None
    cache = Path(os.environ.get("AGENTD_BENCH_CACHE",
                                Path.home() / ".cache" / "agentd-bench"))
    venv = cache / f"fast-agent-{VERSION}-py{v[0]}.{v[1]}"
    vpy = venv / "bin" / "python"
    marker = venv / ".installed"  # written only after a whole install
    if marker.exists():
        return vpy
    try:
        if not vpy.exists():
            subprocess.run([python, "-m", "venv", str(venv)], check=True,
                           capture_output=True, timeout=300)
        subprocess.run([str(vpy), "-m", "pip", "install", "-q",
                        f"fast-agent-mcp=={VERSION}"], check=True, capture_output=True,
                       timeout=1800)
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
        raise Unavailable(f"installing fast-agent-mcp=={VERSION} failed: "
                          f"{' '.join(tail) or exc}") from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"installing fast-agent-mcp=={VERSION} failed: {exc}") from exc
    marker.write_text(f"{VERSION}\n")
    return vpy


def write_project(work: Path, gateway_url: str, mcp_url: str) -> tuple[Path, Path, Path]:
    """The fast-agent home, AgentCard and program for one run (paths returned)."""
    home = work / "fast-agent-home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "fast-agent.yaml").write_text(json.dumps({  # JSON is YAML
        "default_model": MODEL,
        "generic": {"api_key": "bench", "base_url": gateway_url},
        "logger": {"level": "error", "progress_display": False, "show_chat": False,
                   "show_tools": False},
        "mcp": {"servers": {"sdk": {"transport": "http", "url": mcp_url}}},
    }, indent=1))
    card = work / "fast-agent-card.yaml"
    card.write_text(json.dumps({"name": "sampler", "model": MODEL, "servers": ["sdk"],
                                "instruction": "Call the tools you are asked to call."}))
    program = work / "fast_agent_batch_run.py"
    program.write_text(PROGRAM)
    return home, card, program


async def run(vpy: Path, work: Path, tasks: Path, parallel: int, gateway_url: str,
              mcp_url: str) -> tuple[float, list[dict]]:
    """One BatchRunner run: (wall seconds of the whole process, the output rows)."""
    home, card, program = write_project(work, gateway_url, mcp_url)
    out = work / "fast-agent.jsonl"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        str(vpy), str(program), str(home), str(tasks), str(out), str(card), str(parallel),
        cwd=work, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), RUN_LIMIT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise Unavailable(f"the fast-agent run took over {RUN_LIMIT_S:.0f} s; killed") from None
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:]
        raise Unavailable(f"the fast-agent run exited {proc.returncode}: {' '.join(tail)}")
    rows = [json.loads(ln) for ln in out.read_text().splitlines() if ln.strip()]
    return wall, rows

