"""The journal directory (agentd.journal.store) on a real filesystem: its lock, its
identity and key, and what `load` makes of every run file an earlier process (or
an operator, or a disk) left: a run file that cannot be trusted is `Broken` with
the words of why, and every other run of the directory still loads.

The files are real SQLite files written by `Journal` itself; a corruption is
made the way a disk or a hand makes it (bytes cut or overwritten, a row changed
with the sqlite3 module, a link put in place of the file)."""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from logcapture import events

from agentd.child.control import IoCall, IoComplete, IoCompletion
from agentd.errors import ConfigError, TreeError
from agentd.intelligence.base import Completion, Message
from agentd.journal.records import RunRecord
from agentd.journal.store import Broken, Journal, Loaded, RunJournal, run_path
from agentd.log import register_secret, secret_set
from agentd.wire.jsonrpc import ErrorObject
from agentd.wire.shapes import Observed

ASK = IoComplete(messages=[Message(role="user", content="what is the weather")])
CALL = IoCall(name="srv__charge", arguments={"amount": 3})


def record(name: str, **fields) -> RunRecord:
    return RunRecord(name=name, handle=name, request={"instruction": f"job {name}"},
                     started_at=time.time(), principal="alice", **fields)


def answer(text: str) -> IoCompletion:
    return IoCompletion(completion=Completion(content=text))


async def write_run(journal: Journal, name: str, steps: int = 3, **fields) -> RunJournal:
    """A run with `steps` answered model requests on its own handle, then a call sent."""
    rj = await journal.begin(record(name, **fields))
    for k in range(1, steps + 1):
        await rj.answered("", k, ASK, answer(f"answer {k}"))
    await rj.sent("", steps + 1, CALL)
    await rj.close()
    return rj


async def reopened(path: Path, *, ended_steps: bool = False,
                   **options) -> list[Loaded | Broken]:
    journal = Journal.open(str(path), **options)
    try:
        return await journal.load(ended_steps=ended_steps)
    finally:
        await journal.aclose()


def by_name(loaded: list[Loaded | Broken]) -> dict[str, Loaded | Broken]:
    return {(x.record.name if x.record is not None else x.name): x for x in loaded}


# ------------------------------------------------------------------ the directory
async def test_a_second_open_of_the_directory_names_the_holder(tmp_path):
    first = Journal.open(str(tmp_path / "j"))
    try:
        with pytest.raises(ConfigError) as err:
            Journal.open(str(tmp_path / "j"))
        assert f"held by pid {os.getpid()}" in str(err.value)
        assert "journal directory of its own" in str(err.value)
    finally:
        await first.aclose()
    again = Journal.open(str(tmp_path / "j"))  # released with the first
    await again.aclose()


async def test_identity_is_stable_and_the_key_is_private(tmp_path):
    d = tmp_path / "j"
    first = Journal.open(str(d))
    ident = first.id
    await first.aclose()
    second = Journal.open(str(d))
    await second.aclose()
    assert len(ident) == 5 and second.id == ident
    assert stat.S_IMODE(os.stat(d / "key").st_mode) == 0o600
    assert len((d / "key").read_bytes()) == 32
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    other = Journal.open(str(tmp_path / "k"))  # another directory: another identity
    await other.aclose()
    assert other.id != ident


async def test_a_pool_key_writes_no_key_file(tmp_path):
    journal = Journal.open(str(tmp_path / "j"), key=b"the-pool-key")
    await journal.aclose()
    assert not (tmp_path / "j" / "key").exists()


async def test_a_key_file_of_another_size_is_a_config_error(tmp_path):
    d = tmp_path / "j"
    await Journal.open(str(d)).aclose()
    (d / "key").write_bytes(b"short")
    with pytest.raises(ConfigError, match=r"key file .* is not 32 bytes"):
        Journal.open(str(d))
    await Journal.open(str(d), key=b"a pool key instead").aclose()  # the lock was released


async def test_runs_round_trip(tmp_path):
    d = tmp_path / "j"
    journal = Journal.open(str(d))
    await write_run(journal, "served.1")
    rj = await journal.begin(record("served.2"))
    await rj.answered("", 1, ASK, ErrorObject(-32000, "the model refused"))
    await rj.ended("completed", {"answer": 42}, False, None)
    await rj.close()
    await journal.aclose()
    runs = by_name(await reopened(d, ended_steps=True))
    one, two = runs["served.1"], runs["served.2"]
    assert isinstance(one, Loaded) and isinstance(two, Loaded)
    assert one.record.status == "running" and one.record.principal == "alice"
    assert sorted(one.steps) == [("", 1), ("", 2), ("", 3), ("", 4)]
    assert one.steps[("", 4)].state == "sent" and one.steps[("", 4)].kind == "call"
    assert one.steps[("", 1)].state == "answered" and b"answer 1" in one.steps[("", 1)].answer
    assert two.record.terminal and two.record.result == {"answer": 42}
    assert two.steps[("", 1)].error == {"code": -32000, "message": "the model refused",
                                         "data": None}
    # a worker's start reads an ended run's record only, not its exchanges
    ended = by_name(await reopened(d))["served.2"]
    assert isinstance(ended, Loaded) and ended.record.terminal and ended.steps == {}


# ------------------------------------------------------------- broken run files
def _sql(statement: str, *args) -> Callable[[Path], None]:
    def alter(path: Path) -> None:
        conn = sqlite3.connect(path)
        with conn:
            conn.execute(statement, args)
        conn.close()
    return alter


def _cut(path: Path) -> None:
    os.truncate(path, os.path.getsize(path) // 3)


def _garbage(path: Path) -> None:
    with open(path, "r+b") as f:
        f.write(os.urandom(64) + b"garbage" * 64)


def _symlink(path: Path) -> None:
    target = path.parent.parent / "elsewhere.sqlite"
    os.replace(path, target)
    os.symlink(target, path)


CORRUPTIONS = {
    "truncated": (_cut, "corrupt or truncated"),
    "garbage": (_garbage, "corrupt or truncated"),
    "altered row": (_sql("UPDATE steps SET request = ? WHERE seq = 2",
                         '{"kind":"complete","messages":[]}'), "row 2 fails its MAC"),
    "altered record": (_sql("UPDATE meta SET v = replace(v, 'alice', 'mallory') "
                            "WHERE k = 'run'"), "run record fails its MAC"),
    "another version": (_sql("UPDATE meta SET v = '2' WHERE k = 'version'"),
                        "of version 2; this agentd reads version 1"),
    "a gap": (_sql("DELETE FROM steps WHERE seq = 2"), "step row 2 is missing"),
    "a symlink": (_symlink, "not a regular file"),
}


@pytest.mark.parametrize("how", list(CORRUPTIONS))
async def test_a_broken_run_file_costs_that_run_only(tmp_path, how):
    alter, reason = CORRUPTIONS[how]
    d = tmp_path / "j"
    journal = Journal.open(str(d))
    await write_run(journal, "served.1")
    await write_run(journal, "served.2")
    await journal.aclose()
    alter(Path(run_path(str(d / "runs"), "served.1")))
    loaded = await reopened(d)
    assert len(loaded) == 2
    broken = [x for x in loaded if isinstance(x, Broken)]
    good = [x for x in loaded if isinstance(x, Loaded)]
    assert len(broken) == 1 and reason in broken[0].reason, broken
    assert broken[0].path == run_path(str(d / "runs"), "served.1")
    assert [g.record.name for g in good] == ["served.2"] and len(good[0].steps) == 4


async def test_a_run_of_another_key_is_broken(tmp_path):
    d = tmp_path / "j"
    journal = Journal.open(str(d), key=b"pool key one")
    await write_run(journal, "served.1")
    await journal.aclose()
    journal = Journal.open(str(d), key=b"pool key two")
    await write_run(journal, "served.2")
    await journal.aclose()
    runs = by_name(await reopened(d, key=b"pool key two"))
    one = runs[next(n for n in runs if n != "served.2")]
    assert isinstance(one, Broken) and "another key" in one.reason
    # named (not trusted) so that the worker can end that run failed, saying why
    assert one.record is not None and one.record.handle == "served.1"
    assert isinstance(runs["served.2"], Loaded)


async def test_a_run_file_past_its_bound_is_not_read(tmp_path):
    d = tmp_path / "j"
    journal = Journal.open(str(d))
    rj = await journal.begin(record("served.1"))
    await rj.answered("", 1, ASK, answer("x" * (1 << 20)))
    await rj.close()
    await write_run(journal, "served.2", steps=1)
    await journal.aclose()
    runs = by_name(await reopened(d, run_bytes=4096))
    big = next(x for x in runs.values() if isinstance(x, Broken))
    assert "past journal_run_bytes=4096" in big.reason and big.record is None
    assert isinstance(runs["served.2"], Loaded)


async def test_a_run_past_journal_run_bytes_stops_and_cannot_resume(tmp_path, logs):
    d = tmp_path / "j"
    journal = Journal.open(str(d), run_bytes=4096)
    rj = await journal.begin(record("served.1"))
    await rj.answered("", 1, ASK, answer("short"))
    assert rj.stopped is None
    await rj.answered("", 2, ASK, answer("y" * 8192))
    assert rj.stopped is not None and "journal_run_bytes=4096" in rj.stopped
    await rj.answered("", 3, ASK, answer("after"))  # not journaled any more
    await rj.close()
    done = await journal.begin(record("served.2"))
    await done.answered("", 1, ASK, answer("z" * 8192))
    await done.ended("completed", "it ended", False, None)  # a terminal run still loads
    await done.close()
    await journal.aclose()
    stopped = events(logs, "journal.stopped")
    assert [e["run"] for e in stopped] == ["served.1", "served.2"]
    runs = by_name(await reopened(d, run_bytes=4096))
    one, two = runs["served.1"], runs["served.2"]
    assert isinstance(one, Broken) and "stopped" in one.reason
    assert "journal_run_bytes=4096" in one.reason and one.record is not None
    assert isinstance(two, Loaded) and two.record.result == "it ended"


async def test_retention_deletes_old_terminal_runs_at_load(tmp_path):
    d = tmp_path / "j"
    journal = Journal.open(str(d))
    long_ago = time.time() - 7200
    old = await journal.begin(record("served.1", status="completed", ended_at=long_ago))
    await old.close()
    recent = await journal.begin(record("served.2", status="failed", ended_at=time.time()))
    await recent.close()
    running = await journal.begin(record("served.3"))
    await running.close()
    await journal.aclose()
    journal = Journal.open(str(d))
    try:
        loaded = await journal.load(retention=3600)
    finally:
        await journal.aclose()
    assert sorted(x.record.name for x in loaded if x.record is not None) == \
        ["served.2", "served.3"]
    files = os.listdir(d / "runs")
    assert os.path.basename(run_path(str(d / "runs"), "served.1")) not in files
    assert os.path.basename(run_path(str(d / "runs"), "served.2")) in files


async def test_registered_secrets_never_reach_the_files(tmp_path):
    secret = "sk-journal-secret-5f9d2c"
    register_secret(secret)
    try:
        d = tmp_path / "j"
        journal = Journal.open(str(d))
        rj = await journal.begin(RunRecord(
            name="served.1", handle="served.1", started_at=time.time(),
            request={"instruction": f"use the token {secret}"}))
        ask = IoComplete(messages=[Message(role="user", content=f"token {secret}")])
        call = IoCall(name="srv__charge", arguments={"token": secret})
        await rj.answered("", 1, ask, answer(f"I saw {secret}"))
        await rj.sent("", 2, call)
        await rj.answered("", 2, call, Observed(f"charged with {secret}"))
        await rj.answered("", 3, ask, ErrorObject(-32000, f"bad {secret}", {"k": secret}))

        def every_byte() -> bytes:
            return b"".join(p.read_bytes() for p in d.rglob("*") if p.is_file())

        assert b"served.1" in every_byte()  # the files are there, written
        assert secret.encode() not in every_byte()  # while open (the WAL too)
        await rj.ended("completed", f"done with {secret}", False, f"reason {secret}")
        await rj.close()
        await journal.aclose()
        assert secret.encode() not in every_byte()
        run = by_name(await reopened(d))["served.1"]
        assert isinstance(run, Loaded) and "***" in run.record.request["instruction"]
    finally:
        secret_set().discard(secret)


async def test_a_run_file_that_cannot_be_made_is_a_tree_error(tmp_path):
    """The spawn of a run the journal cannot record is refused (the Supervisor's
    TreeError -> Refusal): here its file's name is taken by a directory."""
    journal = Journal.open(str(tmp_path / "j"))
    try:
        os.mkdir(run_path(journal.runs_dir, "served.1"))
        with pytest.raises(TreeError, match=r"run 'served\.1' cannot be journaled"):
            await journal.begin(record("served.1"))
    finally:
        await journal.aclose()

