"""`agentd batch --journal DIR`, killed mid-sample and run again: the real CLI, the
official SDK server as the MCP side (its `/stats` counts the tool calls made) and
a recording gateway (tests/support/gateway.py) whose answer to a sample's second
model request is held on a gate the test never opens, so the batch is SIGKILLed
exactly while that request is in flight, its earlier steps journaled."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agentd_proc import run_agentd, start_agentd
from batch_helpers import Samples, batch_args, cassette_of, env, read_results, write_tasks
from gateway import Gateway, Reply
from waiting import until

from agentd.journal.store import run_path

pytestmark = pytest.mark.timeout(240)


def calls(sdk) -> int:
    """The tool calls the SDK server has run so far."""
    with urllib.request.urlopen(f"http://127.0.0.1:{sdk.port}/stats", timeout=10) as r:
        return int(json.loads(r.read())["calls"])


def held_at_step_3(samples: Samples, gate: asyncio.Event) -> Callable[[dict], Reply]:
    """`samples`' replies, the answer after the tool result held until `gate`."""
    def reply(body: dict[str, Any]) -> Reply:
        out = samples(body)
        if body["messages"][-1]["role"] == "tool":
            out.gate = gate
        return out
    return reply


def journal_of(journal: Path, name: str) -> Path:
    return Path(run_path(str(journal / "runs"), name))


def run_files(journal: Path) -> list[str]:
    return sorted(p.name for p in (journal / "runs").iterdir())


async def killed_mid_sample(agentd_bin: str, tmp_path: Path, sdk, n: int,
                            sig: int = signal.SIGKILL) -> tuple[Path, Path, Path, list[dict]]:
    """A batch of `n` samples with --journal, SIGKILLed once every sample made its
    tool call and sent its next model request (its 3rd step, held by the gateway):
    (tasks, out, journal, the bodies the gateway received). With `sig` SIGINT the
    batch drains instead: the sample is cancelled when the drain's grace ends and
    its journal ends `cancelled`, its line not written."""
    tasks, out, journal = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl", tmp_path / "j"
    write_tasks(tasks, n)
    gate = asyncio.Event()
    async with Gateway([held_at_step_3(Samples(), gate)] * (2 * n)) as gw:
        proc = await start_agentd(agentd_bin, batch_args(
            tasks, out, gw, sdk, "--journal", str(journal), "--parallel", str(n),
            "--drain-timeout", "2"), env=env())
        await until(lambda: len(gw.bodies) == 2 * n or proc.proc.poll() is not None,
                    limit=90, what="every sample's 3rd step at the gateway")
        assert len(gw.bodies) == 2 * n, proc.stderr()[-3000:]
        proc.signal(sig)
        assert await asyncio.to_thread(proc.proc.wait, 60) == \
            (-sig if sig == signal.SIGKILL else 130)
    assert read_results(out) == []  # nothing ended
    return tasks, out, journal, list(gw.bodies)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
async def test_an_interrupted_sample_resumes_from_its_journal_each_step_sent_once(
        tmp_path, sdk, agentd_bin, sig):
    before = calls(sdk)
    tasks, out, journal, first = await killed_mid_sample(agentd_bin, tmp_path, sdk, 1, sig)
    assert calls(sdk) - before == 1
    assert journal_of(journal, "t000").exists()

    rec = tmp_path / "rec"
    async with Gateway([Samples()] * 2) as gw:
        done = await run_agentd(agentd_bin, batch_args(
            tasks, out, gw, sdk, "--journal", str(journal), "--resume",
            "--record", str(rec)), env=env())
    assert done.rc == 0, done.stderr[-3000:]
    [line] = read_results(out)
    assert line["status"] == "completed" and line["result"] == "done 0: echo 0"
    # two model answers, the first replayed from the journal: both count, as does
    # the usage the recording spent (15 tokens each)
    assert line["steps"] == 2 and line["usage"]["total_tokens"] == 30
    # the steps answered before the kill were not sent again; the one in flight was
    assert [b["messages"] for b in gw.bodies] == [first[1]["messages"]]
    assert calls(sdk) - before == 1  # the tool ran once, before the kill
    # a drained sample's journal ended `cancelled`: replayed all the same
    assert [(e["sample"], e.get("ended")) for e in done.events("batch.sample.resumable")] \
        == [("t000", "cancelled" if sig == signal.SIGINT else None)]
    # its cassette is whole: the replayed steps and the live one, in order
    lines = [json.loads(x) for x in cassette_of(rec, "t000").read_text().splitlines()]
    assert [(x["handle"], x["step"], x["request"]["kind"]) for x in lines[1:]] == [
        ("", 1, "complete"), ("", 2, "call"), ("", 3, "complete")]
    # its line is written: its journal is gone
    assert run_files(journal) == []


def garbage(path: Path) -> str:
    """The file replaced by bytes that are no database (its WAL gone too: the
    committed rows live there until a checkpoint)."""
    for part in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm"))):
        part.unlink(missing_ok=True)
    path.write_bytes(b"not a journal at all " * 64)
    return "its journal is corrupt or truncated"


def altered(path: Path) -> str:
    """A recorded answer rewritten in place (SQLite itself is content)."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE steps SET answer = CAST('{}' AS BLOB) WHERE seq = 1")
    return "its journal's row 1 fails its MAC (altered or corrupt)"


@pytest.mark.parametrize("spoil", [garbage, altered])
async def test_a_spoilt_journal_fails_its_sample_the_others_resume(
        tmp_path, sdk, agentd_bin, spoil):
    tasks, out, journal, _ = await killed_mid_sample(agentd_bin, tmp_path, sdk, 2)
    bad = journal_of(journal, "t000")
    why = spoil(bad)

    async with Gateway([Samples()] * 2) as gw:
        done = await run_agentd(agentd_bin, batch_args(
            tasks, out, gw, sdk, "--journal", str(journal), "--resume"), env=env())
    assert done.rc == 1, done.stderr[-3000:]
    lines = {r["id"]: r for r in read_results(out)}
    assert lines["t001"]["status"] == "completed"
    assert lines["t001"]["result"] == "done 1: echo 1"
    broken = lines["t000"]
    assert broken["status"] == "failed" and broken["steps"] == 0
    assert broken["error"].startswith(f"--journal {journal}: the journal of sample 't000' "
                                      f"cannot be resumed: {why}"), broken["error"]
    assert "--resume --retry-failed" in broken["error"]
    assert len(gw.bodies) == 1  # only t001's request in flight; t000 ran nothing
    # the bad file is kept aside for the operator, never read again
    assert bad.name + ".broken" in run_files(journal)
    assert not [n for n in run_files(journal) if n.endswith(".sqlite")]


async def test_without_resume_a_journaled_sample_runs_from_its_start(tmp_path, sdk, agentd_bin):
    before = calls(sdk)
    tasks, out, journal, first = await killed_mid_sample(agentd_bin, tmp_path, sdk, 1)

    async with Gateway([Samples()] * 2) as gw:
        done = await run_agentd(agentd_bin, batch_args(
            tasks, out, gw, sdk, "--journal", str(journal)), env=env())
    assert done.rc == 0, done.stderr[-3000:]
    [line] = read_results(out)
    assert line["status"] == "completed" and line["steps"] == 2
    assert [b["messages"] for b in gw.bodies] == [b["messages"] for b in first]
    assert calls(sdk) - before == 2  # the tool ran again
    assert done.events("batch.sample.resumable") == []
    assert run_files(journal) == []


async def test_journal_and_replay_exclude_each_other(tmp_path, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    write_tasks(tasks, 1)
    (tmp_path / "rec").mkdir()
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(out),
                                         "--replay", str(tmp_path / "rec"),
                                         "--journal", str(tmp_path / "j")], env=env())
    assert done.rc == 2 and "--journal and --replay exclude each other" in done.stderr
    assert not (tmp_path / "j").exists()
