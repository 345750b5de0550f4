"""`agentd batch`'s progress: a live bar in a pty (pexpect), JSON lines elsewhere."""

from __future__ import annotations

import json
import os
import sys

import pytest
from agentd_proc import agentd_env, run_agentd
from batch_helpers import read_results
from peers import require_modules

pytestmark = pytest.mark.timeout(120)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# no tools: each sample is one model answer, played in the batch root (its broker)
SCRIPT = {"playback": 1, "scripts": [
    {"match": "", "turns": [{"content": "ok", "delay": 0.5,
                             "usage": {"prompt_tokens": 3, "completion_tokens": 2}}]}]}


def setup(tmp_path, n: int):
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(SCRIPT))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"p{i}", "instruction": f"task {i}"}) + "\n"
                             for i in range(n)))
    return pb, tasks, tmp_path / "out.jsonl"


def env() -> dict[str, str]:
    return agentd_env(PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def test_a_progress_bar_is_drawn_on_a_terminal(tmp_path):
    require_modules("pexpect", "rich")
    import pexpect

    pb, tasks, out = setup(tmp_path, 6)
    child = pexpect.spawn(sys.executable, ["-m", "agentd", "batch", "--tasks", str(tasks),
                                           "--out", str(out), "--parallel", "3",
                                           "--intelligence", f"playback:{pb}"],
                          env=env(), encoding="utf-8", timeout=90, dimensions=(40, 160))
    child.expect(r"batch .*\d/6 done, \d+ failed, \d+ running, [\d.]+/s, ETA")
    child.expect(r"6/6 done, 0 failed, 0 running")
    child.expect(r"batch: \{'completed': 6\} in [\d.]+s, 30 tokens, sample p50 ")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert len(read_results(out)) == 6
    assert '"event":"batch.sample.end"' not in child.before  # info lines stay off the bar


async def test_off_a_terminal_progress_is_json_lines(tmp_path, agentd_bin):
    pb, tasks, out = setup(tmp_path, 2)
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(out),
                                         "--parallel", "1", "--progress-interval", "0.05",
                                         "--intelligence", f"playback:{pb}"], env=env())
    assert done.rc == 0, done.stderr[-2000:]
    lines = done.events("batch.progress")
    assert lines and set(lines[0]) >= {"done", "total", "failed", "running", "rate_per_s",
                                       "eta_s", "tokens"}
    assert all(e["total"] == 2 and e["running"] <= 1 for e in lines)
    end = done.events("batch.end")[-1]
    assert end["by_status"] == {"completed": 2} and end["tokens"] == 10
    assert set(end) >= {"wall_s", "sample_p50_s", "sample_p95_s"}



async def test_the_batch_limits_are_config_file_keys(tmp_path, agentd_bin):
    pb, tasks, out = setup(tmp_path, 5)
    conf = tmp_path / "agentd.toml"
    conf.write_text("parallel = 2\nprogress_interval = 0.05\n")
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(out),
                                         "--config", str(conf),
                                         "--intelligence", f"playback:{pb}"], env=env())
    assert done.rc == 0, done.stderr[-2000:]
    assert done.events("batch.start")[0]["parallel"] == 2
    assert done.events("batch.end")[-1]["max_in_flight"] <= 2
    assert all(e["running"] <= 2 for e in done.events("batch.progress"))
    conf.write_text("parallel = 0\n")
    bad = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                        str(tmp_path / "o2.jsonl"), "--config", str(conf),
                                        "--intelligence", f"playback:{pb}"], env=env())
    assert bad.rc == 2 and "--parallel must be at least 1" in bad.stderr
