"""`agentd batch` as a benchmark runner, through the real CLI: targets and
scorers (built-in and a command), rescoring a finished file, epochs resumed
mid-way, a 5xx storm's `error` samples re-run by --resume and --retry-errors,
selection, and run flags written after `batch` (the suite's gateway and the
official SDK's MCP server: tests/batch/conftest.py, tests/support/batch_helpers.py)."""

from __future__ import annotations

import json
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agentd_proc import run_agentd, start_agentd
from batch_helpers import SAMPLE_RE, Samples, batch_args, env, read_results, write_tasks
from gateway import Gateway, Reply

pytestmark = pytest.mark.timeout(240)

SCHEMA = {"type": "object", "required": ["answer"]}
SCORER = """\
import json, sys
d = json.load(sys.stdin)
target, result = d["sample"]["target"], d["result"]["result"]
print(json.dumps({"reward": float(target is not None and target in result)}))
"""


def write_eval_tasks(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


async def test_scorers_score_each_line_and_batch_score_rescores(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    scorer = tmp_path / "scorer.py"
    scorer.write_text(SCORER)
    write_eval_tasks(tasks, [
        {"id": "right", "instruction": "sample 0", "target": "done 0: echo 0",
         "metadata": {"topic": "echo", "n": [0]}},
        {"id": "wrong", "instruction": "sample 1", "target": "done 9: echo 9"},
        {"id": "untargeted", "instruction": "sample 2"},
        {"id": "contract", "instruction": "sample 3", "target": "echo 3",
         "output_contract": json.dumps(SCHEMA)},
    ])
    async with Gateway([Samples()] * 8) as gw:
        done = await run_agentd(agentd_bin, batch_args(
            tasks, out, gw, sdk, "--model", "m-1", "--scorer", "exact", "--scorer", "includes",
            "--scorer", f"command:{sys.executable} {scorer}"), env=env())
    # every sample completed, but one result broke its output_contract: not a clean 0
    assert done.rc == 1, done.stderr[-3000:]
    by_id = {r["id"]: r for r in read_results(out)}
    assert {r["status"] for r in by_id.values()} == {"completed"}
    assert by_id["right"]["scores"] == {"exact": 1.0, "includes": 1.0, "reward": 1.0}
    assert by_id["right"]["metadata"] == {"topic": "echo", "n": [0]}  # untouched
    assert by_id["wrong"]["scores"] == {"exact": 0.0, "includes": 0.0, "reward": 0.0}
    assert by_id["untargeted"]["scores"] == {"reward": 0.0}
    assert set(by_id["untargeted"]["score_errors"]) == {"exact", "includes"}
    assert by_id["contract"]["contract_met"] is False
    assert "contract_met" not in by_id["right"]  # no contract: nothing to say
    for r in by_id.values():
        assert r["epoch"] == 1 and r["model"] == "m-1" and r["steps"] == 2
        assert isinstance(r["wall_ms"], int) and r["settings"]["max_steps"] == 50
    end = done.events("batch.end")[-1]
    assert end["contract_broken"] == 1
    assert end["scores"]["exact"]["mean"] == pytest.approx(1 / 3, abs=1e-6)
    assert end["scores"]["exact"]["scoring_errors"] == 1
    assert end["scores"]["reward"]["pass_at_k"] == {"1": 0.5}

    # rescoring the finished file: no gateway, no MCP server, a new scorer
    rescored = tmp_path / "rescored.jsonl"
    again = await run_agentd(agentd_bin, ["batch", "score", str(out), "--tasks", str(tasks),
                                          "--scorer", "regex", "--out", str(rescored)],
                             env=env())
    assert again.rc == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout)
    assert summary["results"] == 4 and summary["by_status"] == {"completed": 4}
    assert summary["scores"]["regex"]["mean"] == pytest.approx(2 / 3, abs=1e-6)
    new = {r["id"]: r for r in read_results(rescored)}
    assert new["right"]["scores"] == {"regex": 1.0} and new["wrong"]["scores"] == {"regex": 0.0}
    assert new["right"]["result"] == by_id["right"]["result"]
    assert out.read_text().count('"exact"') == 4  # the batch's own file is untouched


async def test_a_rescore_naming_a_sample_the_tasks_lack_is_exit_2(tmp_path, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    write_tasks(tasks, 1)
    out.write_text(json.dumps({"id": "other", "status": "completed", "partial": False,
                               "result": "x", "steps": 1, "usage": {}, "run_id": "r"}) + "\n")
    done = await run_agentd(agentd_bin, ["batch", "score", str(out), "--tasks", str(tasks),
                                         "--scorer", "exact"], env=env())
    assert done.rc == 2 and "'other' is not in --tasks" in done.stderr


class Interrupting:
    """Samples, where sample n's runs past its first `free.get(n, 1)` hang at their
    first call (until the batch is interrupted and cancels them)."""

    def __init__(self, free: dict[int, int]) -> None:
        self.samples, self.free, self.runs = Samples(), free, Counter[int]()

    def __call__(self, body: dict[str, Any]) -> Reply:
        reply = self.samples(body)
        if body["messages"][-1]["role"] != "tool":
            n = self.samples.first[-1]
            self.runs[n] += 1
            if self.runs[n] > self.free.get(n, 1):
                reply.hang = 120.0
        return reply


async def test_epochs_resumed_mid_way_run_each_epoch_once(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    write_eval_tasks(tasks, [{"id": f"t{n}", "instruction": f"sample {n}",
                              "target": f"done {n}: echo {n}" if n < 3 else "no"}
                             for n in range(4)])
    flags = ("--epochs", "3", "--scorer", "exact", "--parallel", "2")
    # epoch 1 and t0's epoch 2 end; t1's and t2's epoch 2 then hold both workers
    gate = Interrupting(free={0: 2})
    async with Gateway([gate] * 24) as gw:
        proc = await start_agentd(agentd_bin, batch_args(tasks, out, gw, sdk, *flags,
                                                         "--drain-timeout", "4"), env=env())
        await proc.wait_for_event("batch.sample.end", id="t0", epoch=2, limit=90)
        proc.signal(signal.SIGINT)
        first = await proc.done(limit=90)
    assert first.rc == 130, first.stderr[-3000:]
    written = [(r["id"], r["epoch"]) for r in read_results(out)]
    assert sorted(written) == sorted([(f"t{n}", 1) for n in range(4)] + [("t0", 2)])

    samples = Samples()
    async with Gateway([samples] * 24) as gw:
        second = await run_agentd(agentd_bin, batch_args(tasks, out, gw, sdk, *flags,
                                                         "--resume"), env=env())
    assert second.rc == 0, second.stderr[-3000:]
    results = read_results(out)
    assert Counter((r["id"], r["epoch"]) for r in results) == Counter(
        (f"t{n}", e) for n in range(4) for e in (1, 2, 3))  # each run exactly once
    assert len(samples.first) == 7 and len(gw.bodies) == 14  # only the 7 left ran
    end = second.events("batch.end")[-1]
    assert end["skipped"] == 5 and end["tasks"] == 12
    exact = end["scores"]["exact"]  # over the whole file: t0-t2 always right, t3 never
    assert exact["mean"] == 0.75 and exact["stderr"] == 0.25 and exact["accuracy"] == 0.75
    assert exact["pass_at_k"] == {"1": 0.75, "2": 0.75, "3": 0.75}
    assert exact["pass_hat_k"] == {"1": 0.75, "2": 0.75, "3": 0.75}


class Storm:
    """Samples, with 503 for every call of the samples in `down` (a gateway
    failing for some requests past the client's retries); counts the 503s."""

    def __init__(self, down: set[int], times: int | None = None) -> None:
        self.samples, self.down, self.times, self.refused = Samples(), down, times, 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        n = int(SAMPLE_RE.search(user).group(1))  # type: ignore[union-attr]
        if n in self.down and (self.times is None or self.refused < self.times):
            self.refused += 1
            return Reply.error(503)
        return self.samples(body)


async def test_a_5xx_storm_is_error_and_resume_reruns_exactly_those(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    ids = write_tasks(tasks, 4)
    storm = Storm({1, 3})
    async with Gateway([storm] * 16) as gw:
        # a run flag written after `batch`: accepted there too
        done = await run_agentd(agentd_bin, [*batch_args(tasks, out, gw, sdk),
                                             "--intelligence-attempts", "2"], env=env())
    assert done.rc == 5, done.stderr[-3000:]
    by_id = {r["id"]: r for r in read_results(out)}
    assert {i: r["status"] for i, r in by_id.items()} == {
        ids[0]: "completed", ids[1]: "error", ids[2]: "completed", ids[3]: "error"}
    assert by_id[ids[1]]["error"].startswith("intelligence unavailable:")
    assert storm.refused == 4 and len(gw.bodies) == 4 + 4  # 2 attempts of each

    samples = Samples()
    async with Gateway([samples] * 8) as gw:
        again = await run_agentd(agentd_bin, batch_args(tasks, out, gw, sdk, "--resume"),
                                 env=env())
    assert again.rc == 0, again.stderr[-3000:]
    assert sorted(samples.first) == [1, 3] and len(gw.bodies) == 4  # exactly those two
    lines = read_results(out)
    assert len(lines) == 6 and [r["status"] for r in lines[-2:]] == ["completed"] * 2
    assert again.events("batch.end")[-1]["skipped"] == 2


async def test_retry_errors_reruns_an_errored_sample_within_the_run(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    ids = write_tasks(tasks, 2)
    storm = Storm({1}, times=2)  # sample 1's first two requests: 503 (one run's attempts)
    async with Gateway([storm] * 8) as gw:
        done = await run_agentd(agentd_bin, ["--intelligence-attempts", "2", *batch_args(
            tasks, out, gw, sdk, "--retry-errors", "1")], env=env())
    assert done.rc == 0, done.stderr[-3000:]
    by_id = {r["id"]: r for r in read_results(out)}
    assert len(by_id) == 2 and by_id[ids[1]]["status"] == "completed"
    assert by_id[ids[1]]["retries"] == 1 and "retries" not in by_id[ids[0]]
    assert [e["id"] for e in done.events("batch.sample.retry")] == [ids[1]]


async def test_limit_and_sample_select_tasks(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    ids = write_tasks(tasks, 6)
    samples = Samples()
    async with Gateway([samples] * 4) as gw:
        done = await run_agentd(agentd_bin, batch_args(
            tasks, out, gw, sdk, "--sample", ids[4], "--sample", ids[1], "--sample", ids[2],
            "--limit", "2"), env=env())
    assert done.rc == 0, done.stderr[-3000:]
    assert sorted(r["id"] for r in read_results(out)) == [ids[1], ids[2]]  # the first 2
    bad = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                        str(tmp_path / "o2.jsonl"), "--intelligence", gw.url,
                                        "--sample", "nope"], env=env())
    assert bad.rc == 2 and "--sample 'nope': no task of that id" in bad.stderr


async def test_a_misspelt_task_member_is_still_exit_2_naming_it(tmp_path, agentd_bin):
    tasks = tmp_path / "tasks.jsonl"
    write_eval_tasks(tasks, [{"id": "a", "instruction": "x", "target": 1, "metadata": {}},
                             {"id": "b", "instruction": "x", "targte": 1}])
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                         str(tmp_path / "o.jsonl"), "--intelligence",
                                         "http://127.0.0.1:9/v1"], env=env())
    assert done.rc == 2 and f"--tasks {tasks}:2" in done.stderr and "targte" in done.stderr


async def test_batch_help_lists_every_exit_code_and_the_new_flags(agentd_bin):
    done = await run_agentd(agentd_bin, ["batch", "--help"], env=env())
    assert done.rc == 0
    for words in ("  5    some sample ended in `error`", "  6    a required MCP server",
                  "  130  interrupted", "--epochs", "--scorer", "--retry-errors",
                  "--retry-failed", "--limit", "--sample", "Every run flag of `agentd --help`"):
        assert words in done.stdout, words
    assert "--intelligence-attempts" not in done.stdout  # accepted, not listed
