"""The fuzz harness (fuzz/run.py) with the suite: every kept input of
`fuzz/corpus/<target>/` (seeds and past findings) replayed through its target,
and a brief run of the harness itself (the random engine, every target, one
JSON line each).  A long run is `python fuzz/run.py --seconds 600`
(docs/fuzzing.md)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("agentd_fuzz_run", ROOT / "fuzz" / "run.py")
assert _spec is not None and _spec.loader is not None
fuzz_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz_run)
TARGETS = fuzz_run.discover()
KEPT = [(name, path) for name in TARGETS for path, _data in fuzz_run.corpus(name)]


def test_the_twins_targets_are_found() -> None:
    assert {"sse", "framing", "traceparent", "otlp", "span"} <= set(TARGETS)
    assert all(callable(t) for t in TARGETS.values())


@pytest.mark.parametrize(("name", "path"), KEPT, ids=[f"{n}/{p.name}" for n, p in KEPT])
def test_kept_input_passes(name: str, path: Path) -> None:
    TARGETS[name](path.read_bytes())


def test_every_twin_target_has_a_corpus() -> None:
    for name in ("sse", "framing", "traceparent", "otlp", "span"):
        assert fuzz_run.corpus(name), f"fuzz/corpus/{name}/ is empty"


def test_a_target_that_diverges_is_a_finding(tmp_path, monkeypatch) -> None:
    """The random engine reports and keeps an input that makes a target fail."""
    monkeypatch.setattr(fuzz_run, "CORPUS", tmp_path)

    def picky(data: bytes) -> None:
        assert b"\n" not in data, "a line end"

    res = fuzz_run.random_loop("picky", picky, 2.0, seed=1)
    assert res["execs"] > 0 and len(res["findings"]) == 1
    kept = list((tmp_path / "picky").iterdir())
    assert len(kept) == 1 and b"\n" in kept[0].read_bytes()


def test_the_harness_runs_briefly() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "fuzz" / "run.py"), "--seconds", "2",
                           "--engine", "random", "--seed", "7", "sse", "traceparent"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["fuzz"] for line in lines] == ["sse", "traceparent"], proc.stderr
    assert all(line["execs"] > 0 and line["findings"] == [] for line in lines), proc.stdout
    assert proc.returncode == 0, proc.stderr
