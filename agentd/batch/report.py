"""`agentd batch report`: one self-contained HTML file people open (docs/batch.md).

A results file (and, with `--trajectories`, one ATIF trajectory per sample) is
read, summarised and embedded in a copy of the page template shipped beside
this module (`report.html`, `report.js`). The page needs nothing
else: no server, no network, no external script, style or font; its Content
Security Policy allows only its own script (by hash) and inline style.

Everything read is untrusted input, written by a batch or by hand:

- each file is opened with `open_regular` (never through a symbolic link,
  never a FIFO or a device) and read within a bound, whatever `stat` says;
- each line and each trajectory is decoded through the guarded entry
  (`agentd.wire.guard`), then read member by member: a member of the wrong
  type, or absent, is shown as "—" (the result line grows with the batch's
  features, and a report of an older file still works);
- a line that is not a JSON object with a string `id` is skipped, named (file
  and line) on stderr and in the page, and the report is written for the rest;
- every text is clipped (`TEXT_CHARS`) and each sample's trajectory embedded
  only up to `TRAJECTORY_EMBED_CHARS`, the cut marked where it is made;
- the data goes into the page as JSON in a `<script type="application/json">`
  block with `<`, `>` and `&` escaped, so no text can close the block; the
  page's script renders every text with `textContent`, never as markup.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import tempfile
import time
from importlib import resources
from typing import Any

import msgspec
import orjson

from agentd.batch.cassette import cassette_path
from agentd.batch.files import lines_within, open_regular
from agentd.errors import ConfigError
from agentd.wire.guard import loads_peer

__all__ = ["Limits", "Report", "build_report", "render", "write_report"]

RESULTS_BYTES = 256 << 20
"""The most bytes of a results file read; the lines past it are not reported (marked)."""
RESULTS_LINES = 100_000
"""The most result lines reported (`--max-tasks`'s default); the rest marked as not reported."""
TRAJECTORY_BYTES = 16 << 20
"""The largest trajectory file read; a larger one is not embedded (marked)."""
TRAJECTORY_EMBED_CHARS = 512 << 10
"""The characters of text embedded per sample's trajectory (its subagents' too);
the steps past it are dropped, their count marked."""
TEXT_CHARS = 8_000
"""The longest text embedded (a message, a tool call's arguments, an observation,
a result, an error); longer ones are clipped with the count of characters cut."""
SUBAGENT_DEPTH = 8
"""Nested subagent trajectories embedded this deep; deeper ones are marked."""

STATUS_ORDER = ("completed", "failed", "error", "interrupted", "budget_exhausted",
                "deadline", "cancelled")
_EPOCH_SEPARATORS = "#:@._-"


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """The bounds of one report (the module's defaults; the tests and the
    benchmark pass smaller ones)."""

    results_bytes: int = RESULTS_BYTES
    results_lines: int = RESULTS_LINES
    trajectory_bytes: int = TRAJECTORY_BYTES
    embed_chars: int = TRAJECTORY_EMBED_CHARS
    text_chars: int = TEXT_CHARS


class Report(msgspec.Struct, kw_only=True):
    """What the page shows: the summary, the samples, and what could not be read."""

    source: str
    samples: list[dict[str, Any]] = msgspec.field(default_factory=list)
    problems: list[str] = msgspec.field(default_factory=list)
    summary: dict[str, Any] = msgspec.field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        return {"source": self.source, "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "summary": self.summary, "problems": self.problems, "samples": self.samples}


class _Budget:
    """Characters left to embed for one sample's trajectory."""

    def __init__(self, chars: int, text_chars: int) -> None:
        self.chars = chars
        self.left = chars
        self.text_chars = text_chars

    def text(self, value: str) -> str:
        keep = max(0, min(len(value), self.text_chars, self.left))
        self.left -= keep
        return value if keep == len(value) else \
            f"{value[:keep]}… [clipped: {len(value) - keep} more characters]"


def _text_of(value: Any) -> str | None:
    """A message or an observation's content as text: a string as it is, a list
    of content parts as their texts, anything else as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        texts = [p["text"] if isinstance(p.get("text"), str)
                 else f"[{p.get('type', 'part')}]" for p in value]
        return "\n".join(texts)
    return _json_text(value)


def _json_text(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except (TypeError, ValueError):
        return repr(value)


def _num(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _clip(value: str | None, chars: int) -> str | None:
    if value is None or len(value) <= chars:
        return value
    return f"{value[:chars]}… [clipped: {len(value) - chars} more characters]"


def _sample(obj: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """A result line's members the page shows, each checked for its type."""
    usage = _obj(obj.get("usage"))
    raw_score = obj.get("score")
    score = {str(k): v for k, v in raw_score.items() if _num(v) is not None} \
        if isinstance(raw_score, dict) else None
    epoch = obj.get("epoch")
    contract = obj.get("contract_met")
    result = obj.get("result")
    metadata = obj.get("metadata")
    return {
        "id": obj["id"],
        "status": _str(obj.get("status")) or "—",
        "score": score or None,
        "epoch": epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
        "steps": _num(obj.get("steps")),
        "prompt_tokens": _num(usage.get("prompt_tokens")),
        "completion_tokens": _num(usage.get("completion_tokens")),
        "tokens": _num(usage.get("total_tokens")),
        "wall_ms": _num(obj.get("wall_ms")),
        "model": _str(obj.get("model")),
        "contract_met": contract if isinstance(contract, bool) else None,
        "partial": obj.get("partial") is True,
        "error": _clip(_str(obj.get("error")), limits.text_chars),
        "result": None if result is None else _clip(_text_of(result), limits.text_chars),
        "metadata": None if metadata is None else _clip(_json_text(metadata),
                                                        limits.text_chars),
        "run_id": _str(obj.get("run_id")),
        "sample": _str(obj.get("sample")),
    }


def read_results(path: str, limits: Limits, report: Report) -> None:
    """The result lines of `path` into `report.samples`; the lines that are not
    result lines into `report.problems` (file:line: cause). ConfigError (exit 2)
    when the file cannot be opened at all."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError as exc:
        raise ConfigError(f"agentd batch report {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        left = limits.results_bytes
        n = 0
        while left > 0 and (raw := f.readline(left)):
            n += 1
            left -= len(raw)
            if len(report.samples) >= limits.results_lines:
                report.problems.append(f"{path}:{n}: past {limits.results_lines} result "
                                       "lines: this line and the rest are not reported")
                return
            if not raw.endswith(b"\n") and left <= 0:
                break
            if not raw.strip():
                continue
            why = _result_object(raw)
            if isinstance(why, str):
                report.problems.append(f"{path}:{n}: not a result line: {why}")
                continue
            report.samples.append(_sample(why, limits))
        if left <= 0 and f.read(1):
            report.problems.append(f"{path}:{n}: past {limits.results_bytes} bytes: "
                                   "this line and the rest are not reported")


def _result_object(raw: bytes) -> dict[str, Any] | str:
    """The line as an object with a string `id`, or the reason it is not one."""
    try:
        obj = loads_peer(raw, ValueError)
    except ValueError as exc:
        return f"not JSON ({exc})"
    if not isinstance(obj, dict):
        return "not a JSON object"
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        return "no string id"
    return obj


def _trajectory_names(sample_id: str) -> list[str]:
    """Where a sample's trajectory may be in the directory: `<id>.json` when the id
    is a plain file name, and the cassette's naming (slug and hash of the id)."""
    names = []
    if "/" not in sample_id and "\0" not in sample_id and not sample_id.startswith("."):
        names.append(f"{sample_id}.json")
    names.append(os.path.basename(cassette_path("", sample_id))[:-len(".jsonl")] + ".json")
    return names


def read_trajectory(directory: str, sample_id: str, limits: Limits) -> dict[str, Any]:
    """The sample's trajectory as the page shows it: `{"trajectory": …}` or
    `{"note": why there is none}`."""
    for name in _trajectory_names(sample_id):
        path = os.path.join(directory, name)
        if not os.path.lexists(path):
            continue
        try:
            fd = open_regular(path, os.O_RDONLY)
        except OSError as exc:
            return {"note": f"{path}: {exc.strerror or exc}"}
        with os.fdopen(fd, "rb") as f:
            lines = lines_within(f, limits.trajectory_bytes)
        if lines is None:
            return {"note": f"{path}: larger than {limits.trajectory_bytes} bytes: "
                            "not embedded"}
        try:
            obj = loads_peer(b"".join(lines), ValueError)
        except ValueError as exc:
            return {"note": f"{path}: not JSON ({exc})"}
        if not isinstance(obj, dict):
            return {"note": f"{path}: not an ATIF trajectory (not a JSON object)"}
        return {"trajectory": _trajectory(obj, _Budget(limits.embed_chars,
                                                       limits.text_chars), 0)}
    return {"note": "no trajectory file for this sample"}


def _trajectory(obj: dict[str, Any], budget: _Budget, depth: int) -> dict[str, Any]:
    """An ATIF trajectory's steps and subagents, every member read for its type."""
    agent = _obj(obj.get("agent"))
    label = " ".join(s for s in (_str(agent.get("name")), _str(agent.get("version")))
                     if s)
    out: dict[str, Any] = {
        "agent": label or None, "model": _str(agent.get("model_name")),
        "session": _str(obj.get("session_id")), "schema": _str(obj.get("schema_version")),
        "steps": [], "subagents": [], "notes": []}
    steps = _list(obj.get("steps"))
    for i, step in enumerate(steps):
        if budget.left <= 0:
            out["notes"].append(f"{len(steps) - i} more steps not embedded (past "
                                f"{budget.chars} characters of this sample)")
            break
        if isinstance(step, dict):
            out["steps"].append(_step(step, budget))
    for sub in _list(obj.get("subagent_trajectories")):
        if not isinstance(sub, dict):
            continue
        if depth + 1 >= SUBAGENT_DEPTH:
            out["notes"].append(f"subagents deeper than {SUBAGENT_DEPTH} not embedded")
            break
        out["subagents"].append(_trajectory(sub, budget, depth + 1))
    final = obj.get("final_metrics")
    out["final"] = budget.text(_json_text(final)) if isinstance(final, dict) else None
    return out


def _step(step: dict[str, Any], budget: _Budget) -> dict[str, Any]:
    metrics = _obj(step.get("metrics"))
    calls = []
    for call in _list(step.get("tool_calls")):
        if isinstance(call, dict):
            args = call.get("arguments")
            calls.append({"id": _str(call.get("tool_call_id")),
                          "name": _str(call.get("function_name")) or "—",
                          "arguments": budget.text(_text_of(args) or "")})
    results = []
    obs = _obj(step.get("observation"))
    for res in _list(obs.get("results")):
        if isinstance(res, dict):
            results.append({"call": _str(res.get("source_call_id")),
                            "content": budget.text(_text_of(res.get("content")) or "")})
    message = _text_of(step.get("message"))
    return {"id": _num(step.get("step_id")), "source": _str(step.get("source")) or "—",
            "time": _str(step.get("timestamp")),
            "message": None if message is None else budget.text(message),
            "calls": calls, "results": results,
            "prompt_tokens": _num(metrics.get("prompt_tokens")),
            "completion_tokens": _num(metrics.get("completion_tokens"))}


def _percentile(values: list[float], p: float) -> float | None:
    d = sorted(values)
    return d[min(int(p * len(d)), len(d) - 1)] if d else None


def _group(sample: dict[str, Any]) -> str:
    """The task an epoch's sample belongs to: `sample` when the line has it, else
    the id without its epoch suffix (`q17#2` -> `q17`)."""
    if sample["sample"]:
        return str(sample["sample"])
    sid, epoch = sample["id"], sample["epoch"]
    for sep in _EPOCH_SEPARATORS:
        if sid.endswith(f"{sep}{epoch}"):
            return str(sid[:-len(f"{sep}{epoch}")])
    return str(sid)


def _pass_at(n: int, c: int, k: int) -> tuple[float, float]:
    """pass@k (some of k draws succeed) and pass^k (all k do), from n tries with c
    successes, without replacement."""
    total = math.comb(n, k)
    return 1 - math.comb(n - c, k) / total, math.comb(c, k) / total


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts by status, mean score ± standard error per score name, pass@k and
    pass^k where epochs are present, tokens, p50/p95 wall time."""
    by_status: dict[str, int] = {}
    for s in samples:
        by_status[s["status"]] = by_status.get(s["status"], 0) + 1
    order = [k for k in STATUS_ORDER if k in by_status] + \
        sorted(k for k in by_status if k not in STATUS_ORDER)
    scores: dict[str, list[float]] = {}
    for s in samples:
        for name, value in (s["score"] or {}).items():
            scores.setdefault(name, []).append(float(value))
    score_rows = []
    for name, vals in scores.items():
        mean = sum(vals) / len(vals)
        var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1) if len(vals) > 1 else 0.0
        score_rows.append({"name": name, "n": len(vals), "mean": mean,
                           "stderr": math.sqrt(var / len(vals))})
    walls = [float(s["wall_ms"]) for s in samples if s["wall_ms"] is not None]

    def total(key: str) -> int | None:
        vals = [s[key] for s in samples if s[key] is not None]
        return int(sum(vals)) if vals else None

    return {"samples": len(samples),
            "by_status": [[k, by_status[k]] for k in order],
            "scores": score_rows, "pass_at": _pass_rows(samples, list(scores)),
            "tokens": total("tokens"), "prompt_tokens": total("prompt_tokens"),
            "completion_tokens": total("completion_tokens"),
            "wall_p50_ms": _percentile(walls, 0.50), "wall_p95_ms": _percentile(walls, 0.95)}


def _pass_rows(samples: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """pass@k and pass^k per score name (a try succeeds when the score is at least
    1), or on `completed` when no sample has a score; k up to the fewest epochs of
    a task. Nothing without epochs."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        if s["epoch"] is not None:
            groups.setdefault(_group(s), []).append(s)
    if not groups:
        return []
    kmax = min(len(g) for g in groups.values())
    rows = []
    for name in names or ["completed"]:
        def ok(s: dict[str, Any], name: str = name) -> bool:
            if not names:
                return bool(s["status"] == "completed")
            return (s["score"] or {}).get(name, 0) >= 1
        for k in range(1, kmax + 1):
            pairs = [_pass_at(len(g), sum(ok(s) for s in g), k) for g in groups.values()]
            rows.append({"name": name, "k": k, "tasks": len(pairs),
                         "pass_at_k": sum(p for p, _ in pairs) / len(pairs),
                         "pass_hat_k": sum(q for _, q in pairs) / len(pairs)})
    return rows


def build_report(results: str, trajectories: str | None = None,
                 limits: Limits | None = None) -> Report:
    """The report of a results file (and its trajectories' directory)."""
    limits = limits or Limits()
    report = Report(source=os.path.basename(results))
    read_results(results, limits, report)
    if trajectories is not None:
        if not os.path.isdir(trajectories):
            raise ConfigError(f"--trajectories {trajectories}: not a directory")
        for s in report.samples:
            s.update(read_trajectory(trajectories, s["id"], limits))
    report.summary = summarise(report.samples)
    return report


def _embedded_json(data: Any) -> str:
    """`data` as JSON safe inside a `<script>` block: no `<`, `>` or `&` left, so
    no text can end the block or open a comment."""
    raw = orjson.dumps(data).decode()
    return raw.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(report: Report) -> str:
    """The page: the template with its script (allowed by hash) and the data."""
    pkg = resources.files("agentd.batch")
    page = (pkg / "report.html").read_text(encoding="utf-8")
    script = (pkg / "report.js").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    page = page.replace("{{script_hash}}", f"'sha256-{digest}'", 1)
    page = page.replace("{{script}}", script, 1)
    return page.replace("{{data}}", _embedded_json(report.data()), 1)


def write_report(results: str, out: str, trajectories: str | None = None,
                 limits: Limits | None = None) -> Report:
    """Build the report and put it at `out` (a new file of a random name in its
    directory, renamed onto `out`: whatever was at that name, a link included, is
    replaced, never written through)."""
    report = build_report(results, trajectories, limits)
    page = render(report).encode()
    directory = os.path.dirname(os.path.abspath(out))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp",
                                   prefix=f".{os.path.basename(out)}.")
    except OSError as exc:
        raise ConfigError(f"--out {out}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(page)
        os.replace(tmp, out)
    except OSError as exc:
        raise ConfigError(f"--out {out}: {exc.strerror or exc}") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return report
