"""`agentd batch report`: the page in a real headless Chromium (Debian's, over the
DevTools protocol: tests/support/headless_chromium.py), and its reading of untrusted
results and trajectories (bounds, malformed lines, hostile text).

The inputs are hand-written lines shaped like the result-line and ATIF
contracts (docs/batch.md), plus the results of a real `agentd batch` run. The
screenshots are kept under a temporary directory the test prints.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from agentd_proc import run_agentd
from batch_helpers import env
from headless_chromium import browser, load

from agentd.batch.report import Limits, build_report, render
from agentd.errors import ConfigError

pytestmark = pytest.mark.timeout(240)
HOSTILE = "</script><img src=x onerror=alert(1)><script>document.title='pwned'</script>"
ROWS = "[...document.querySelectorAll('#samples tbody tr')].map(r => r.dataset.id)"



def result(i: str, status: str, **extra) -> str:
    return json.dumps({"id": i, "status": status, **extra}) + "\n"


def write_inputs(tmp: Path) -> tuple[Path, Path]:
    results = tmp / "results.jsonl"
    results.write_text(
        result("q1#1", "completed", sample="q1", epoch=1, score={"acc": 1.0}, steps=2,
               usage={"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40},
               wall_ms=1500, model="m1", contract_met=True, result={"answer": 4})
        + result("q1#2", "failed", sample="q1", epoch=2, score={"acc": 0.0}, steps=1,
                 usage={"total_tokens": 5}, wall_ms=200, error=HOSTILE)
        + "{this is not json\n"
        + result("q2#1", "error", sample="q2", epoch=1, usage={"total_tokens": 900},
                 wall_ms=9000, error="gateway 503 after 3 attempts")
        + result("q2#2", "completed", sample="q2", epoch=2, score={"acc": 1.0},
                 usage={"total_tokens": 100}, wall_ms=50, result=HOSTILE)
        + '["an array"]\n')
    traj = tmp / "traj"
    traj.mkdir()
    atif = {"schema_version": "ATIF-v1.8", "session_id": "s-1",
            "agent": {"name": "agentd", "version": "0.1", "model_name": "m1"},
            "steps": [
                {"step_id": 1, "timestamp": "2026-01-01T00:00:00Z", "source": "user",
                 "message": "add 2 and 2 " + HOSTILE},
                {"step_id": 2, "source": "agent", "message": "calling the tool",
                 "tool_calls": [{"tool_call_id": "c1", "function_name": "calc__add",
                                 "arguments": {"a": 2, "b": 2, "note": HOSTILE}}],
                 "observation": {"results": [{"source_call_id": "c1", "content": "4"}]},
                 "metrics": {"prompt_tokens": 20, "completion_tokens": 7}},
                {"step_id": 3, "source": "agent", "message": "4"}],
            "subagent_trajectories": [
                {"session_id": "s-1.1", "agent": {"name": "helper"},
                 "steps": [{"step_id": 1, "source": "user", "message": "sub question"},
                           {"step_id": 2, "source": "agent", "message": "sub answer"}]}],
            "final_metrics": {"total_prompt_tokens": 30}}
    (traj / "q1#1.json").write_text(json.dumps(atif))
    (traj / "q2#1.json").write_text("{not json")
    return results, traj


async def report(agentd_bin: str, tmp: Path, results: Path, *extra: str) -> tuple[Path, str]:
    out = tmp / "report.html"
    done = await run_agentd(agentd_bin,
                            ["batch", "report", str(results), "--out", str(out), *extra],
                            env=env())
    assert done.rc == 0, done.stderr[-2000:]
    return out, done.stderr


def artifacts() -> Path:
    path = Path(tempfile.mkdtemp(prefix="agentd-report-shots-"))
    print(f"screenshots kept in {path}")
    return path


async def test_the_report_in_chromium_sorts_opens_a_sample_and_never_runs_its_text(
        tmp_path, agentd_bin):
    results, traj = write_inputs(tmp_path)
    out, stderr = await report(agentd_bin, tmp_path, results, "--trajectories", str(traj))
    # the malformed lines are named (file and line), the rest reported
    assert f"{results}:3: not a result line: not JSON" in stderr
    assert f"{results}:6: not a result line: not a JSON object" in stderr
    html = out.read_text()
    data_block = html.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data_block and "&" not in data_block  # no text can leave the block
    shots = artifacts()
    async with browser() as page:
        await load(page, out.as_uri())
        assert await page.js("document.querySelectorAll('#samples tbody tr').length") == 4
        assert await page.js("document.getElementById('problems').hidden") is False
        # sort: a click on "tokens" orders ascending, a second descending
        await page.click("#samples th[data-key='tokens'] button")
        assert await page.js(ROWS) == ["q1#2", "q1#1", "q2#2", "q2#1"]
        await page.click("#samples th[data-key='tokens'] button")
        assert await page.js(ROWS) == ["q2#1", "q2#2", "q1#1", "q1#2"]
        assert await page.js("document.querySelector(\"th[data-key='tokens']\")"
                             ".getAttribute('aria-sort')") == "descending"
        # the failing ones are one choice away
        await page.js("(() => { const s = document.getElementById('status');"
                      " s.value = '!completed'; s.dispatchEvent(new Event('change')); })()")
        assert sorted(await page.js(ROWS)) == ["q1#2", "q2#1"]
        await page.js("(() => { const s = document.getElementById('status');"
                      " s.value = ''; s.dispatchEvent(new Event('change')); })()")
        # a sample opens: its steps, the tool call with its arguments, the subagent
        await page.click("#samples tbody tr[data-id='q1#1']")
        steps = await page.js("[...document.querySelectorAll('#detail .trajectory > .step')]"
                              ".map(s => s.querySelector('.h').textContent)")
        assert [s.split(" ")[:2] for s in steps] == [["#1", "user"], ["#2", "agent"],
                                                     ["#3", "agent"]]
        assert "20 prompt + 7 completion tokens" in steps[1]
        call = await page.js("document.querySelector('#detail .call').textContent")
        assert "calc__add (c1)" in call and '"a": 2' in call and HOSTILE in call
        sub = await page.js("[...document.querySelectorAll('#detail details.subagent .step"
                            " pre')].map(p => p.textContent)")
        assert sub == ["sub question", "sub answer"]
        await page.screenshot(shots / "sample-open.png")
        # the hostile texts are shown as text and never run
        await page.click("#samples tbody tr[data-id='q1#2']")
        assert await page.js("document.querySelector('#detail pre.error').textContent") \
            == HOSTILE
        await page.click("#samples tbody tr[data-id='q2#2']")
        assert await page.js("document.querySelector('#detail pre.result').textContent") \
            == HOSTILE
        await page.click("#samples tbody tr[data-id='q2#1']")
        note = await page.js("document.querySelector('#detail .trajectory .note').textContent")
        assert "not JSON" in note
        assert await page.js("document.images.length") == 0
        assert await page.js("document.scripts.length") == 2  # the data and the page's own
        assert await page.js("document.title") == "agentd batch report"
        await page.screenshot(shots / "hostile.png")
        assert page.problems() == []  # no console error, exception or dialog
    assert (shots / "sample-open.png").stat().st_size > 0


async def test_a_real_batch_run_is_reported(tmp_path, agentd_bin):
    script = {"playback": 1, "scripts": [{"match": "", "turns": [
        {"content": "ok", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}]}]}
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(script))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"r{i}", "instruction": f"task {i}"}) + "\n"
                             for i in range(3)))
    results = tmp_path / "out.jsonl"
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(results),
                                         "--intelligence", f"playback:{pb}"], env=env())
    assert done.rc == 0, done.stderr[-2000:]
    out, _ = await report(agentd_bin, tmp_path, results)
    async with browser() as page:
        await load(page, out.as_uri())
        assert sorted(await page.js(ROWS)) == ["r0", "r1", "r2"]
        assert "completed 3" in await page.js("document.getElementById('summary').textContent")
        await page.click("#samples tbody tr[data-id='r1']")
        assert await page.js("document.querySelector('#detail pre.result').textContent") \
            == "ok"
        await page.screenshot(artifacts() / "real-run.png")
        assert page.problems() == []


def test_the_summary_counts_scores_pass_at_k_tokens_and_times(tmp_path):
    results, _ = write_inputs(tmp_path)
    rep = build_report(str(results))
    s = rep.summary
    assert s["samples"] == 4
    assert s["by_status"] == [["completed", 2], ["failed", 1], ["error", 1]]
    (acc,) = s["scores"]
    assert acc["n"] == 3 and math.isclose(acc["mean"], 2 / 3)
    assert math.isclose(acc["stderr"], math.sqrt((1 / 3) / 3))  # sample variance 1/3
    # q1: 1 of 2 epochs right, q2: 1 of 2 (q2#1 has no score: not a success)
    assert [(r["k"], r["pass_at_k"], r["pass_hat_k"]) for r in s["pass_at"]] == \
        [(1, 0.5, 0.5), (2, 1.0, 0.0)]
    assert s["tokens"] == 1045 and s["prompt_tokens"] == 30
    assert s["wall_p50_ms"] == 1500 and s["wall_p95_ms"] == 9000
    assert len(rep.problems) == 2


def test_inputs_are_bounded_and_the_cuts_marked(tmp_path):
    results = tmp_path / "r.jsonl"
    results.write_text("".join(result(f"s{i}", "completed", error="x" * 500) for i in range(5)))
    traj = tmp_path / "t"
    traj.mkdir()
    steps = [{"step_id": n, "source": "agent", "message": "y" * 300} for n in range(50)]
    (traj / "s0.json").write_text(json.dumps({"steps": steps}))
    (traj / "s1.json").write_text(json.dumps({"steps": steps[:1]}) + " " * 25_000)
    limits = Limits(results_lines=3, text_chars=100, embed_chars=1000, trajectory_bytes=20_000)
    rep = build_report(str(results), str(traj), limits)
    assert [s["id"] for s in rep.samples] == ["s0", "s1", "s2"]
    assert rep.problems == [f"{results}:4: past 3 result lines: this line and the rest "
                            "are not reported"]
    assert rep.samples[0]["error"].endswith("… [clipped: 400 more characters]")
    t0 = rep.samples[0]["trajectory"]
    assert len(t0["steps"]) == 10 and t0["notes"] == [
        "40 more steps not embedded (past 1000 characters of this sample)"]
    assert rep.samples[1]["note"].endswith("larger than 20000 bytes: not embedded")
    assert rep.samples[2]["note"] == "no trajectory file for this sample"
    small = Limits(results_bytes=len(result("s0", "completed", error="x" * 500)) + 10)
    assert "past" in build_report(str(results), None, small).problems[0]


def test_a_link_or_a_fifo_is_refused_and_no_text_ends_the_data_block(tmp_path):
    real = tmp_path / "real.jsonl"
    real.write_text(result("a", "completed", result="</script><!--", error="</SCRIPT >"))
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="a symbolic link: refused"):
        build_report(str(link))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        build_report(str(fifo))
    page = render(build_report(str(real)))
    assert page.lower().count("</script") == 2  # the data block's end and the script's
    assert "<!--" not in page.split('id="report-data">', 1)[1]
