"""`agentd batch`'s progress: a live display in a pty (pexpect), with rich and
without it (rich hidden from the child by a package of that name on its
PYTHONPATH that refuses to import), JSON lines elsewhere; on a terminal the log
goes to a file and the batch ends with one readable block."""

from __future__ import annotations

import json
import re
import signal
import sys

import pytest
from agentd_proc import run_agentd
from batch_helpers import env, read_results
from peers import require_modules

pytestmark = pytest.mark.timeout(120)
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



def without_rich(tmp_path) -> str:
    """A directory that, first on PYTHONPATH, makes `import rich` fail as it does
    where the `top` extra is not installed."""
    hide = tmp_path / "norich"
    (hide / "rich").mkdir(parents=True)
    (hide / "rich" / "__init__.py").write_text("raise ImportError('rich is hidden by the test')\n")
    return str(hide)


def spawn_batch(tmp_path, tasks, out, pb, *extra: str, hide_rich: bool):
    import pexpect

    first = (without_rich(tmp_path),) if hide_rich else ()
    return pexpect.spawn(sys.executable, ["-m", "agentd", "batch", "--tasks", str(tasks),
                                          "--out", str(out), "--parallel", "3",
                                          "--intelligence", f"playback:{pb}", *extra],
                         env=env(*first), encoding="utf-8", timeout=90, dimensions=(40, 160))


def log_events(path) -> list[str]:
    return [json.loads(line)["event"] for line in path.read_text().splitlines()]


def test_a_progress_bar_is_drawn_on_a_terminal(tmp_path):
    require_modules("pexpect", "rich")
    import pexpect

    pb, tasks, out = setup(tmp_path, 6)
    child = spawn_batch(tmp_path, tasks, out, pb, hide_rich=False)
    child.expect(r"batch .*\d/6 done, \d+ failed, \d+ errors, \d+ running, [\d.]+/s, ETA")
    child.expect(r"6/6 done, 0 failed, 0 errors, 0 running")
    child.expect(r"batch: 6 of 6 samples in [\d.]+s: 6 completed\r?\n"
                 r"  tokens: 30, per sample p50 [\d.]+s p95 [\d.]+s\r?\n"
                 rf"  results: {re.escape(str(out))}   log: {re.escape(str(out))}.log")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert len(read_results(out)) == 6
    assert '"event"' not in child.before  # the log is in its file, not on the terminal
    assert log_events(tmp_path / "out.jsonl.log").count("batch.sample.end") == 6


def test_without_rich_a_plain_line_shows_progress_and_the_log_stays_off(tmp_path):
    require_modules("pexpect")
    import pexpect

    pb, tasks, out = setup(tmp_path, 6)
    log = tmp_path / "batch.log"
    child = spawn_batch(tmp_path, tasks, out, pb, "--log-file", str(log), hide_rich=True)
    child.expect(r"\rbatch [0-5]/6 done, 0 failed, 0 errors, \d running, [\d.]+/s, ETA ")
    child.expect(r"\rbatch 6/6 done, 0 failed, 0 errors, 0 running, [\d.]+/s, ETA 0s, "
                 r"30 tokens")
    child.expect(r"batch: 6 of 6 samples in [\d.]+s: 6 completed\r?\n")
    child.expect(rf"  results: {re.escape(str(out))}   log: {re.escape(str(log))}")
    child.expect(pexpect.EOF)
    seen = child.before
    child.close()
    assert child.exitstatus == 0
    events = log_events(log)
    # the children's stderr and the info lines are in the log file, not on the terminal
    assert events.count("subagent.stderr") >= 6 and events.count("batch.sample.end") == 6
    assert "subagent.stderr" not in seen and '{"' not in seen and "Traceback" not in seen
    assert not (tmp_path / "out.jsonl.log").exists()  # --log-file named another place


def test_an_interrupted_batch_counts_its_samples_in_the_closing_block(tmp_path):
    require_modules("pexpect")
    import pexpect

    script = {"playback": 1, "scripts": [{"match": "", "turns": [{"content": "ok",
                                                                  "delay": 60}]}]}
    pb, tasks, out = setup(tmp_path, 5)
    pb.write_text(json.dumps(script))
    child = spawn_batch(tmp_path, tasks, out, pb, "--drain-timeout", "1", hide_rich=True)
    child.expect(r"\rbatch 0/5 done, 0 failed, 0 errors, 3 running")
    child.kill(signal.SIGINT)
    # the drain's warning is printed as text above the display
    child.expect(r"WARNING batch.signal signal=SIGINT")
    child.expect(r"batch: 5 of 5 samples in [\d.]+s: 5 interrupted\r?\n"
                 r"  interrupted: 5 not run or cut short \(--resume runs them\)")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert read_results(out) == []
    end = [json.loads(line) for line in (tmp_path / "out.jsonl.log").read_text().splitlines()
           if '"batch.end"' in line]
    assert end[0]["by_status"] == {"interrupted": 5}


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
