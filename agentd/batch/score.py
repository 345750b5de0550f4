"""Scoring a batch's samples, and the statistics of the scores (docs/batch.md).

A scorer turns one sample (its task line: target, output_contract, metadata)
and its result line into numbers. The built-ins are pure functions of the two;
`command:CMD` runs the operator's program, never through a shell: its argv is
`shlex.split(CMD)` of the operator's flag, never anything of a task's text.
It reads one JSON object on stdin (`sample`, `result`, `trajectory`) and
prints one JSON object of numbers (Harbor's `reward.json`: `{"reward": 1.0}`),
within `--scorer-timeout` seconds and `SCORER_OUTPUT_BYTES` bytes, in the
scrubbed environment a subagent gets (no secret of ours). Anything else (a
timeout, a crash, garbage, a value that is not a number) is a scoring error
of that sample, recorded in its result line; never the batch's.

`summarize` reduces the final result lines of a batch to one entry per score
name: the mean over samples (each sample's epochs averaged first) with its
standard error, the accuracy (the share of scored runs that pass: a score of
at least 1), and pass@k / pass^k for every k up to the most epochs a sample
was scored in (`pass_at_k`, `pass_hat_k`: the unbiased estimators over each
sample's n scored epochs, c of them passing).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import shlex
import signal
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import msgspec

from agentd.agent.loop import wants_json
from agentd.batch.files import ResultLine, TaskLine
from agentd.errors import ConfigError
from agentd.mcp.client.rules.schema import schemas
from agentd.tree.procs import scrub_env
from agentd.wire.guard import PEER_FAULTS, fault_text

BUILTINS = ("exact", "includes", "regex", "json", "schema")
SCORER_OUTPUT_BYTES = 64 * 1024
"""The most a command scorer may print: its score object, a few numbers."""
PASS = 1.0  # a score at least this passes (accuracy, pass@k, pass^k)


class Unscored(NamedTuple):
    """One scorer could not score one sample: why (its line records it)."""

    why: str


class Scorer(msgspec.Struct, frozen=True):
    """One `--scorer` value: a built-in's name, or `command:` with its argv."""

    name: str
    argv: tuple[str, ...] = ()


def parse_scorer(spec: str) -> Scorer:
    """`--scorer SPEC`, or ConfigError naming the flag and what it accepts."""
    if spec in BUILTINS:
        return Scorer(spec)
    if spec.startswith("command:"):
        try:
            argv = tuple(shlex.split(spec[len("command:"):]))
        except ValueError as exc:
            raise ConfigError(f"--scorer {spec!r}: {exc}") from None
        if not argv:
            raise ConfigError(f"--scorer {spec!r}: command: needs a program to run")
        return Scorer("command", argv)
    raise ConfigError(f"--scorer {spec!r}: expected one of {', '.join(BUILTINS)} "
                      "or command:CMD")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _parsed(value: Any) -> Any:
    """A string result that is JSON, as JSON (the agent's text when no contract
    asked for JSON); anything else as it is."""
    if isinstance(value, str):
        with contextlib.suppress(*PEER_FAULTS):
            return msgspec.json.decode(value)
    return value


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, but `true` is not `1`; members unordered."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def contract_schema(contract: str | None) -> dict[str, Any] | None:
    """The output_contract as a JSON Schema, when it is one (a JSON object)."""
    if not contract or not contract.lstrip().startswith("{"):
        return None
    try:
        schema = msgspec.json.decode(contract)
    except PEER_FAULTS:
        return None
    return schema if isinstance(schema, dict) else None


def contract_met(contract: str | None, status: str, result: Any) -> bool | None:
    """Whether a result met its output_contract: a JSON Schema contract is
    checked; one that asks for JSON needs a JSON result (the agent parsed it);
    free text cannot be checked (None), nor a sample without a contract."""
    if not contract or status != "completed":
        return None
    schema = contract_schema(contract)
    if schema is not None:
        v = schemas.get(schema, what="output_contract")
        return None if v is None else v.is_valid(_parsed(result))
    if wants_json(contract):
        return not isinstance(result, str)
    return None


def builtin(name: str, target: Any, contract: str | None, result: Any) -> float | Unscored:
    """A built-in's score of `result` (1.0 or 0.0), or why it cannot say."""
    if name == "schema":
        schema = contract_schema(contract)
        if schema is None:
            return Unscored("the sample's output_contract is not a JSON Schema object")
        v = schemas.get(schema, what="output_contract")
        if v is None:
            return Unscored("the sample's output_contract does not compile as a JSON Schema")
        return float(v.is_valid(_parsed(result)))
    if target is None:
        return Unscored(f"--scorer {name}: the task line has no target")
    if name == "json":
        return float(json_equal(_parsed(result), _parsed(target)))
    text = "" if result is None else _text(result)
    if name == "exact":
        return float(text.strip() == _text(target).strip())
    if name == "includes":
        return float(_text(target) in text)
    if not isinstance(target, str):
        return Unscored("--scorer regex: the target must be a string (a pattern)")
    try:
        return float(re.search(target, text) is not None)
    except re.error as exc:
        return Unscored(f"--scorer regex: the target is not a pattern: {exc}")


async def run_command(argv: tuple[str, ...], payload: bytes, seconds: float
                      ) -> dict[str, float] | Unscored:
    """The score object a command scorer prints for `payload`, or why not: a
    timeout, an exit other than 0, more than SCORER_OUTPUT_BYTES, or output that
    is not one JSON object of numbers. The scorer runs in its own process group
    and is killed with it when it overruns."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, env=scrub_env(os.environ),
            start_new_session=True)
    except OSError as exc:
        return Unscored(f"--scorer command: {argv[0]}: {exc.strerror or exc}")
    try:
        out = await asyncio.wait_for(_exchange(proc, payload), seconds)
    except TimeoutError:
        return Unscored(f"--scorer command: no score within --scorer-timeout={seconds:g}s")
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    if out is None:
        return Unscored(f"--scorer command: printed more than {SCORER_OUTPUT_BYTES} bytes")
    if proc.returncode != 0:
        return Unscored(f"--scorer command: exited with code {proc.returncode}")
    try:
        scores = msgspec.json.decode(out)
    except PEER_FAULTS as exc:
        return Unscored(f"--scorer command: its output is not JSON: {fault_text(exc)}")
    if not isinstance(scores, dict) or not scores or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in scores.values()):
        return Unscored("--scorer command: expected one JSON object of numbers, "
                         'like {"reward": 1.0}')
    return {str(k): float(v) for k, v in scores.items()}


async def _exchange(proc: asyncio.subprocess.Process, payload: bytes) -> bytes | None:
    """Feed `payload`, read at most SCORER_OUTPUT_BYTES + 1 bytes, wait for the exit;
    None past the bound."""
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(payload)
        await proc.stdin.drain()
        proc.stdin.close()
    out = bytearray()
    while len(out) <= SCORER_OUTPUT_BYTES:
        chunk = await proc.stdout.read(SCORER_OUTPUT_BYTES + 1 - len(out))
        if not chunk:
            break
        out += chunk
    if len(out) > SCORER_OUTPUT_BYTES:
        return None
    await proc.wait()
    return bytes(out)


async def score(scorers: Iterable[Scorer], sample: dict[str, Any], line: dict[str, Any],
                seconds: float) -> tuple[dict[str, float], dict[str, str]]:
    """Every scorer's scores of one result line, and the scorers' errors."""
    scores: dict[str, float] = {}
    errors: dict[str, str] = {}
    for s in scorers:
        got: dict[str, float] | float | Unscored
        if s.argv:
            payload = msgspec.json.encode({"sample": sample, "result": line,
                                           "trajectory": line.get("trajectory")})
            got = await run_command(s.argv, payload, seconds)
        else:
            got = builtin(s.name, sample.get("target"), sample.get("output_contract"),
                          line.get("result"))
        if isinstance(got, Unscored):
            errors[s.name] = got.why
        elif isinstance(got, dict):
            scores.update(got)
        else:
            scores[s.name] = got
    return scores, errors


async def score_line(line: ResultLine, task: TaskLine, scorers: Iterable[Scorer],
                     seconds: float) -> ResultLine:
    """`line` with the scores (and scoring errors) of `scorers`, which replace
    any it had."""
    sample = {"id": task.id, "epoch": line.epoch or 1, "instruction": task.instruction,
              "target": task.target, "output_contract": task.output_contract,
              "metadata": task.metadata}
    body = msgspec.to_builtins(msgspec.structs.replace(line, scores=None, score_errors=None))
    scores, errors = await score(scorers, sample, body, seconds)
    return msgspec.structs.replace(line, scores=scores or None, score_errors=errors or None)


async def rescore(lines: list[ResultLine], tasks: dict[str, TaskLine],
                  scorers: tuple[Scorer, ...], seconds: float,
                  write: Callable[[ResultLine], None] | None) -> str:
    """`agentd batch score`: each final line scored afresh (its contract_met too,
    from the task's contract), handed to `write` if given; the summary as JSON."""
    done: list[dict[str, Any]] = []
    by_status: dict[str, int] = {}
    for line in lines:
        task = tasks[line.id]
        line = msgspec.structs.replace(
            line, scores=None, score_errors=None,
            contract_met=contract_met(task.output_contract, line.status, line.result))
        if line.status != "error":
            line = await score_line(line, task, scorers, seconds)
        if write is not None:
            write(line)
        by_status[line.status] = by_status.get(line.status, 0) + 1
        done.append(msgspec.to_builtins(line))
    return msgspec.json.encode({"results": len(done), "by_status": by_status,
                                "scores": summarize(done)}).decode()


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one sample: n runs, c of them passing."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k of one sample: the chance that k of its n runs, drawn together, all pass."""
    return math.comb(c, k) / math.comb(n, k)


def _mean_stderr(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))


def summarize(lines: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per score name, over the final result lines of a batch (module doc)."""
    runs: dict[str, dict[str, list[float]]] = {}  # name -> sample id -> its epochs' scores
    errors: dict[str, int] = {}
    for line in lines:
        for name, value in (line.get("scores") or {}).items():
            runs.setdefault(name, {}).setdefault(line["id"], []).append(value)
        for name in line.get("score_errors") or {}:
            errors[name] = errors.get(name, 0) + 1
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(runs) | set(errors)):
        per = runs.get(name, {})
        mean, stderr = _mean_stderr([sum(v) / len(v) for v in per.values()])
        every = [x for v in per.values() for x in v]
        entry: dict[str, Any] = {
            "samples": len(per), "runs": len(every), "scoring_errors": errors.get(name, 0),
            "mean": _round(mean), "stderr": _round(stderr),
            "accuracy": _round(sum(x >= PASS for x in every) / len(every)) if every else None}
        top = max((len(v) for v in per.values()), default=0)
        at, hat = {}, {}
        for k in range(1, top + 1):
            counted = [(len(v), sum(x >= PASS for x in v)) for v in per.values() if len(v) >= k]
            at[str(k)] = _round(sum(pass_at_k(n, c, k) for n, c in counted) / len(counted))
            hat[str(k)] = _round(sum(pass_hat_k(n, c, k) for n, c in counted) / len(counted))
        entry["pass_at_k"], entry["pass_hat_k"] = at, hat
        out[name] = entry
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)
