"""The sans-IO parts of `agentd batch`: task lines, the results file, the cassette's diff,
which cassette versions replay and how its update lines are handed out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd.batch.cassette import Replay, cassette_path
from agentd.batch.files import ResultsFile, load_tasks
from agentd.errors import ConfigError, TreeError
from agentd.journal.exchange import first_difference


def test_first_difference_names_the_path_and_both_values():
    rec = {"kind": "call", "name": "fs__read", "arguments": {"path": "/a", "n": [1, 2]}}
    assert first_difference(rec, rec) is None
    now = {**rec, "arguments": {"path": "/a", "n": [1, 3]}}
    assert first_difference(rec, now, "request") == \
        "request.arguments.n[1]: recorded 2, now 3"
    assert first_difference(rec, {**rec, "extra": True}, "r") == \
        "r.extra: recorded (absent), now true"
    assert first_difference([1], [1, 2], "r") == "r: recorded 1 items, now 2"
    assert first_difference(1, 1.0, "r") == "r: recorded 1, now 1.0"  # types count


def test_cassette_paths_never_take_a_path_from_the_id(tmp_path):
    p = cassette_path(str(tmp_path), "../../etc/passwd")
    assert p.startswith(str(tmp_path) + "/") and "/.." not in p[len(str(tmp_path)):]
    assert cassette_path(str(tmp_path), "a/b") != cassette_path(str(tmp_path), "a_b")


def test_task_line_bounds(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"id": "a", "instruction": "' + "x" * 100 + '"}\n')
    with pytest.raises(ConfigError, match=r":1: line longer than --task-line-bytes=50"):
        load_tasks(str(f), line_bytes=50)
    f.write_text('{"id": "a", "instruction": "x"}\n{"id": "b", "instruction": "y"}\n')
    with pytest.raises(ConfigError, match=r":2: more than --max-tasks=1"):
        load_tasks(str(f), max_tasks=1)
    f.write_text('{"id": "", "instruction": "x"}\n')
    with pytest.raises(ConfigError, match=r":1: empty id"):
        load_tasks(str(f))
    with pytest.raises(ConfigError, match=r"--tasks .*nope"):
        load_tasks(str(tmp_path / "nope"))


def test_a_results_file_that_is_not_results_is_refused(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n')
    with pytest.raises(ConfigError, match=r"--out .*:1: not a result line"):
        ResultsFile(str(out), resume=True)
    assert out.read_text() == '{"id": "a"}\n'
    absent = ResultsFile(str(tmp_path / "absent.jsonl"), resume=True)
    assert absent.finished == {}
    absent.close()


def write(directory: Path, version: int, *lines: dict) -> None:
    head = {"cassette": version, "sample": "s", "scope": []}
    Path(cassette_path(str(directory), "s")).write_text(
        "".join(json.dumps(x) + "\n" for x in (head, *lines)))


SUB = {"handle": "", "step": 1, "request": {"kind": "subscribe", "uri": "u://a", "server": "x"},
       "response": {"kind": "done", "ok": True}}


def upd(after: int, uri: str, handle: str = "") -> dict:
    return {"handle": handle, "after": after, "update": {"server": "x", "uri": uri}}


def test_updates_are_handed_out_once_at_their_step_in_order(tmp_path):
    write(tmp_path, 2, SUB, upd(1, "u://a"), upd(1, "u://b"), upd(1, "u://c", ".1"))
    replay = Replay(str(tmp_path), "s")
    assert [u.uri for u in replay.updates_after("", 1)] == ["u://a", "u://b"]
    assert replay.updates_after("", 1) == []  # once
    assert [u.uri for u in replay.updates_after(".1", 1)] == ["u://c"]
    assert replay.updates_after("", 2) == []


def test_a_version_1_cassette_replays_and_may_not_hold_updates(tmp_path):
    write(tmp_path, 1, SUB)
    assert Replay(str(tmp_path), "s").updates_after("", 1) == []
    write(tmp_path, 1, SUB, upd(1, "u://a"))
    with pytest.raises(TreeError, match="an update line in a version-1 cassette"):
        Replay(str(tmp_path), "s")


@pytest.mark.parametrize("line", [
    upd(0, "u://a"),  # before any answer: no handle gets an update unsubscribed
    {"handle": "", "after": 1, "update": {"uri": "u://a"}},  # no server
    {**upd(1, "u://a"), "extra": 1},  # an unknown member
])
def test_a_malformed_update_line_is_refused(tmp_path, line):
    write(tmp_path, 2, SUB, line)
    with pytest.raises(TreeError, match="not a version-3 cassette"):
        Replay(str(tmp_path), "s")


def test_version_4_is_refused(tmp_path):
    write(tmp_path, 4, SUB)
    with pytest.raises(TreeError, match="version 4 of sample 's'"):
        Replay(str(tmp_path), "s")


def test_a_recording_stops_at_the_cassette_bound(tmp_path):
    """A subtree that floods updates cannot fill the disk: the line that would
    cross --cassette-bytes is not written and is an OSError(EFBIG), which the
    broker reports as an unrecorded sample (the full-disk path)."""
    import errno
    import os

    from agentd.batch.cassette import Recorder, cassette_path

    rec = Recorder(str(tmp_path), "s", [], None, max_bytes=400)
    written = 0
    with pytest.raises(OSError) as info:
        for _ in range(100):
            rec.update("", 1, "x", "u://a")
            written += 1
    rec.close()
    assert info.value.errno == errno.EFBIG and "--cassette-bytes=400" in str(info.value)
    assert 0 < written < 100
    assert os.path.getsize(cassette_path(str(tmp_path), "s")) <= 400
    assert Replay(str(tmp_path), "s").updates_after("", 1)  # what was written still reads


def test_a_cassette_nested_past_the_decoders_guard_is_a_cassette_error(tmp_path):
    deep = {"handle": "", "step": 1, "request": {"kind": "read", "uri": "u://a", "server": "x"},
            "response": {"kind": "done", "ok": True, "x": "["}}
    write(tmp_path, 2, deep)
    path = next(tmp_path.glob("*.jsonl"))
    text = path.read_text().replace('"["', "[" * 100_000 + "]" * 100_000)
    path.write_text(text)
    with pytest.raises(TreeError, match="not a version-3 cassette"):
        Replay(str(tmp_path), "s")


def test_a_replayed_answer_is_held_to_the_smaller_of_its_kinds_bound_and_the_frame():
    from agentd.child.control import ENVELOPE_HEADROOM
    from agentd.journal.exchange import AnswerBounds

    bounds = AnswerBounds(completion=100, observation=1 << 30, frame=4096 + ENVELOPE_HEADROOM)
    assert bounds.of("complete") == (100, "--intelligence-max-bytes=100")
    limit, name = bounds.of("call")  # the frame is the smaller one here
    assert limit == 4096 and name.startswith("the control wire's answer bound of 4096")
    assert bounds.of("read") == bounds.of("call")
    assert bounds.of("subscribe")[0] == 4096  # a kind without its own bound: the frame's


def test_lines_within_reads_at_most_one_byte_past_its_bound(tmp_path):
    from agentd.batch.files import lines_within

    f = tmp_path / "f"
    f.write_bytes(b"ab\ncd\n")
    with f.open("rb") as r:
        assert lines_within(r, 6) == [b"ab\n", b"cd\n"]
    with f.open("rb") as r:
        assert lines_within(r, 5) is None
        assert r.tell() == 6  # never more than bound + 1


def test_a_cassette_that_is_a_link_or_a_fifo_is_refused_without_a_read(tmp_path):
    import os

    write(tmp_path, 2, SUB)
    real = Path(cassette_path(str(tmp_path), "s"))
    moved = tmp_path / "elsewhere.jsonl"
    real.rename(moved)
    real.symlink_to(moved)  # a valid cassette, but through a link
    with pytest.raises(TreeError, match=r"a symbolic link: refused"):
        Replay(str(tmp_path), "s")
    real.unlink()
    os.mkfifo(real)  # nobody writes it: an open that blocked would hang here
    with pytest.raises(TreeError, match=r"not a regular file \(a FIFO\): refused"):
        Replay(str(tmp_path), "s")
