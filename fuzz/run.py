"""Run the fuzz targets of `fuzz/fuzz_*.py` for a while; keep what they find.

    python fuzz/run.py --seconds 600 [TARGET...]    # all targets when none is named
    python fuzz/run.py --replay [TARGET...]         # the corpus only (what the suite does)
    python fuzz/run.py --list

Every module `fuzz/fuzz_*.py` exposes `TARGETS: dict[str, Callable[[bytes], None]]`:
a target feeds the bytes to one decoder (or a twin pair) and raises
AssertionError on a divergence or on an exception that is not one of the
project's own errors.  Any exception out of a target is a finding.

Engines: with atheris importable (`pip install -e .[fuzz]`) each target runs
under libFuzzer in a child process of its own (coverage-guided; new inputs go
to a scratch directory, a crashing input to `fuzz/corpus/<target>/crash-*`);
otherwise a seeded random loop mutates the corpus and random bytes (bit flips,
inserted SSE/trace-context tokens, splices) for the same time.  The time is
split evenly between the targets.  A finding is written to
`fuzz/corpus/<target>/` (named by its SHA-1), where `tests/native/test_fuzz_corpus.py`
replays it with every test run from then on.  One JSON line per target:
`{"fuzz": target, "engine", "seconds", "execs", "findings", "corpus"}`; the exit
status is 1 when anything was found.  docs/fuzzing.md has the details.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
Target = Callable[[bytes], None]

# tokens the random engine splices in: the bytes the decoders branch on
_TOKENS = (b"\n", b"\r", b"\r\n", b"\n\n", b":", b": ", b"data:", b"data: ", b"event:", b"id:",
           b"retry:", b"retry: 99999999999999999999", b"\xef\xbb\xbf", b"\x00", b"-", b"00-",
           b"ff-", b" ", b"\t", b"\x0b", b"\xa0", b"\xff\xff\xff\xff", b"\x00\x00\x00\x05",
           b"{", b"}", b'"', b"[", b"]", b"0", b"9" * 20, b"f" * 16, b"\xc3\xa9", b"\xed\xa0\x80")


def discover(directory: Path = HERE) -> dict[str, Target]:
    """Every TARGETS entry of every fuzz_*.py in `directory` (names must be unique)."""
    found: dict[str, Target] = {}
    if str(directory.parent) not in sys.path:  # the project itself, when run from anywhere
        sys.path.insert(0, str(directory.parent))
    for path in sorted(directory.glob("fuzz_*.py")):
        spec = importlib.util.spec_from_file_location(f"agentd_fuzz_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        targets = getattr(module, "TARGETS", None)
        if not isinstance(targets, dict):
            raise SystemExit(f"{path}: no TARGETS dict")
        for name, fn in targets.items():
            if name in found:
                raise SystemExit(f"{path}: target {name!r} is defined twice")
            if not callable(fn):
                raise SystemExit(f"{path}: target {name!r} is not callable")
            found[name] = fn
    return found


def corpus(name: str) -> list[tuple[Path, bytes]]:
    """The kept inputs of one target (seeds and past findings), in name order."""
    d = CORPUS / name
    if not d.is_dir():
        return []
    return [(p, p.read_bytes()) for p in sorted(d.iterdir()) if p.is_file()]


def keep(name: str, data: bytes, prefix: str = "crash-") -> Path:
    d = CORPUS / name
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{prefix}{hashlib.sha1(data).hexdigest()}"
    path.write_bytes(data)
    return path


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """One to four random edits of `data` (or of fresh random bytes)."""
    buf = bytearray(data if data and rng.random() < 0.9 else rng.randbytes(rng.randrange(64)))
    for _ in range(rng.randrange(1, 5)):
        op = rng.randrange(7)
        at = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[at:at] = rng.choice(_TOKENS)
        elif op == 2 and buf:
            del buf[at:at + rng.randrange(1, 16)]
        elif op == 3 and buf:
            piece = buf[at:at + rng.randrange(1, 64)]
            buf[at:at] = piece * rng.randrange(1, 8)
        elif op == 4 and pool:
            other = rng.choice(pool)
            cut = rng.randrange(len(other) + 1)
            buf[at:] = other[cut:]
        elif op == 5:
            buf[at:at] = rng.randbytes(rng.randrange(1, 8))
        else:
            buf[at:at] = bytes([rng.choice(b"0123456789abcdef")]) * rng.randrange(1, 40)
    return bytes(buf[:1 << 16])


def _shown(path: Path) -> str:
    """A kept input's path as printed: relative to the project when inside it."""
    return str(path.relative_to(HERE.parent)) if path.is_relative_to(HERE.parent) else str(path)


def _finding(name: str, data: bytes, exc: BaseException) -> dict:
    path = keep(name, data)
    tb = "".join(traceback.format_exception(exc)).strip().splitlines()
    print(f"fuzz {name}: {type(exc).__name__}: {exc!s:.300} -> {path}", file=sys.stderr)
    return {"input": _shown(path), "error": type(exc).__name__,
            "where": tb[-3:] if len(tb) > 3 else tb}


def random_loop(name: str, target: Target, seconds: float, seed: int) -> dict:
    """The engine without atheris: mutate the corpus and random bytes for `seconds`."""
    rng = random.Random(f"{seed}:{name}")
    pool = [data for _path, data in corpus(name)] or [b""]
    execs, findings, seen = 0, [], set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        data = mutate(rng, rng.choice(pool), pool)
        execs += 1
        try:
            target(data)
        except Exception as exc:  # any escape is a finding (a target raises AssertionError)
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            key = (type(exc).__name__, frame.filename, frame.lineno)  # one finding a site
            if key not in seen:
                seen.add(key)
                findings.append(_finding(name, data, exc))
                pool.append(data)
    return {"execs": execs, "findings": findings}


def replay(name: str, target: Target) -> dict:
    """Every kept input of `name` through its target once."""
    findings = []
    inputs = corpus(name)
    for path, data in inputs:
        try:
            target(data)
        except Exception as exc:
            findings.append({"input": _shown(path),
                             "error": f"{type(exc).__name__}: {exc!s:.300}"})
    return {"execs": len(inputs), "findings": findings}


def _atheris_child(name: str, seconds: float) -> None:
    """(In a child process.) One target under libFuzzer until `seconds` are up."""
    import atheris

    target = discover()[name]
    atheris.instrument_all()  # coverage of the Python twins and decoders, not just the C
    scratch = tempfile.mkdtemp(prefix=f"fuzz-{name}-")
    (CORPUS / name).mkdir(parents=True, exist_ok=True)
    atheris.Setup([sys.argv[0], f"-max_total_time={max(1, int(seconds))}",
                   f"-artifact_prefix={CORPUS / name}/crash-", "-print_final_stats=1",
                   scratch, str(CORPUS / name)], target)
    atheris.Fuzz()


def atheris_run(name: str, seconds: float) -> dict:
    before = {p.name for p, _ in corpus(name)}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--atheris-child",
                           name, "--seconds", str(seconds)], capture_output=True, text=True)
    execs = 0
    for line in proc.stderr.splitlines():
        if line.startswith("stat::number_of_executed_units:"):
            execs = int(line.split(":")[-1])
    found = [{"input": _shown(p)} for p, _ in corpus(name)
             if p.name not in before]
    if proc.returncode and not found:
        found = [{"error": f"libFuzzer exited {proc.returncode}", "tail": proc.stderr[-800:]}]
    return {"execs": execs, "findings": found}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("targets", nargs="*", metavar="TARGET", help="default: every target")
    ap.add_argument("--seconds", type=float, default=60.0, help="in all, split between targets")
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "big"),
                    help="the random engine's seed (printed, to rerun a run exactly)")
    ap.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto")
    ap.add_argument("--replay", action="store_true", help="run the corpus only")
    ap.add_argument("--list", action="store_true", help="print the target names")
    ap.add_argument("--atheris-child", metavar="TARGET", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.atheris_child:
        _atheris_child(args.atheris_child, args.seconds)
        return 0
    targets = discover()
    if args.list:
        print("\n".join(targets))
        return 0
    unknown = [t for t in args.targets if t not in targets]
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(targets)}")
    chosen = args.targets or list(targets)
    engine = args.engine
    if engine == "auto":
        engine = "atheris" if importlib.util.find_spec("atheris") else "random"
    if args.replay:
        engine = "replay"
    each = args.seconds / len(chosen)
    failed = False
    for name in chosen:
        t0 = time.monotonic()
        if engine == "replay":
            res = replay(name, targets[name])
        elif engine == "atheris":
            res = atheris_run(name, each)
        else:
            res = random_loop(name, targets[name], each, args.seed)
        failed = failed or bool(res["findings"])
        print(json.dumps({"fuzz": name, "engine": engine, "seed": args.seed,
                          "seconds": round(time.monotonic() - t0, 1), "execs": res["execs"],
                          "findings": res["findings"], "corpus": len(corpus(name))}),
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
