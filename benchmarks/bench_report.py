"""`agentd batch report` at 1,000 samples: the page's size, the time to write it,
and its load time in headless Chromium (tests/support/headless_chromium.py).

Each sample has a result line shaped like the batch's (status, score, epoch,
usage, wall time, a result) and an ATIF trajectory of `--steps` steps (a user
message, then agent steps with a tool call, its arguments and observation) and
one subagent of 2 steps. Printed as one JSON object; figures in
docs/benchmarks.md.

    PYTHONPATH=. python benchmarks/bench_report.py [--samples 1000] [--steps 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

from headless_chromium import browser, load  # noqa: E402

from agentd.batch.report import write_report  # noqa: E402

STATUSES = ("completed",) * 8 + ("failed", "error")


def inputs(tmp: Path, samples: int, steps: int) -> tuple[Path, Path]:
    results = tmp / "results.jsonl"
    traj = tmp / "traj"
    traj.mkdir()
    with results.open("w") as f:
        for i in range(samples):
            status = STATUSES[i % len(STATUSES)]
            sid = f"t{i // 2:04d}#{i % 2 + 1}"
            f.write(json.dumps({
                "id": sid, "sample": f"t{i // 2:04d}", "epoch": i % 2 + 1, "status": status,
                "score": {"acc": 1.0 if status == "completed" else 0.0}, "steps": steps,
                "usage": {"prompt_tokens": 900 + i, "completion_tokens": 120,
                          "total_tokens": 1020 + i},
                "wall_ms": 800 + (i * 37) % 5000, "model": "bench-model",
                "contract_met": status == "completed",
                "result": {"answer": i, "why": "a short explanation " * 4},
                **({} if status == "completed" else {"error": "a failure's text " * 5})}) + "\n")
            agent_steps = [{"step_id": n + 2, "source": "agent", "message": f"step {n} " * 10,
                            "tool_calls": [{"tool_call_id": f"c{n}", "function_name": "fs__read",
                                            "arguments": {"path": f"/data/{i}/{n}.txt"}}],
                            "observation": {"results": [{"source_call_id": f"c{n}",
                                                         "content": "file text " * 40}]},
                            "metrics": {"prompt_tokens": 100, "completion_tokens": 15}}
                           for n in range(steps - 1)]
            (traj / f"{sid}.json").write_text(json.dumps({
                "schema_version": "ATIF-v1.8", "session_id": sid,
                "agent": {"name": "agentd", "version": "0", "model_name": "bench-model"},
                "steps": [{"step_id": 1, "source": "user", "message": f"task {i} " * 20},
                          *agent_steps],
                "subagent_trajectories": [{"agent": {"name": "helper"}, "steps": [
                    {"step_id": 1, "source": "user", "message": "sub"},
                    {"step_id": 2, "source": "agent", "message": "sub answer"}]}]}))
    return results, traj


async def measure(samples: int, steps: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="agentd-bench-report-") as d:
        tmp = Path(d)
        results, traj = inputs(tmp, samples, steps)
        out = tmp / "report.html"
        began = time.perf_counter()
        write_report(str(results), str(out), str(traj))
        write_s = time.perf_counter() - began
        async with browser() as page:
            loads = []
            for _ in range(3):
                began = time.perf_counter()
                await load(page, out.as_uri())
                loads.append(time.perf_counter() - began)
            rows = await page.js("document.querySelectorAll('#samples tbody tr').length")
            began = time.perf_counter()
            await page.click("#samples th[data-key='wall'] button")
            sort_s = time.perf_counter() - began
            began = time.perf_counter()
            await page.click("#samples tbody tr:nth-child(5)")
            open_s = time.perf_counter() - began
            assert page.problems() == [], page.problems()
        return {"samples": samples, "steps_per_sample": steps, "rows": rows,
                "results_bytes": results.stat().st_size,
                "trajectories_bytes": sum(p.stat().st_size for p in traj.iterdir()),
                "report_bytes": out.stat().st_size, "write_s": round(write_s, 3),
                "load_s_best_of_3": round(min(loads), 3), "sort_click_s": round(sort_s, 3),
                "open_sample_s": round(open_s, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(measure(args.samples, args.steps)), indent=2))


if __name__ == "__main__":
    main()
