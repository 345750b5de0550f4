"""`agentd batch` against files planted where it reads and writes its own: a cassette
that is a link to /dev/zero or a FIFO, a link at the name --record will write, an
--out that is a link or not a results file, a second batch on one --out, a model
echoing a secret, a recorded answer past its live bound. Real `agentd batch`
processes; the playback intelligence or a recording gateway (tests/support/gateway.py) as
the model, the official SDK server where a sample needs MCP."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
from pathlib import Path

import aiohttp
import pytest
from agentd_proc import run_agentd, start_agentd
from batch_helpers import cassette_of, env, read_results
from gateway import Gateway, Reply
from peers import python_peer, require_modules

pytestmark = pytest.mark.timeout(240)

OK_SCRIPT = {"playback": 1, "turns": [{"content": "ok"}]}


def two_tasks(tmp_path: Path) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "x", "instruction": "one"}) + "\n"
                     + json.dumps({"id": "y", "instruction": "two"}) + "\n")
    return tasks


async def record_two(tmp_path: Path, agentd_bin: str) -> tuple[Path, Path]:
    """Samples x and y recorded (playback: each answers "ok"); the tasks and the cassettes."""
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(OK_SCRIPT))
    tasks, rec = two_tasks(tmp_path), tmp_path / "rec"
    live = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                         str(tmp_path / "live.jsonl"), "--intelligence",
                                         f"playback:{pb}", "--record", str(rec)], env=env())
    assert live.rc == 0, live.stderr[-2000:]
    return tasks, rec


async def test_a_cassette_linked_to_dev_zero_fails_its_sample_only(tmp_path, agentd_bin):
    tasks, rec = await record_two(tmp_path, agentd_bin)
    x = cassette_of(rec, "x")
    x.unlink()
    x.symlink_to("/dev/zero")  # read whole, it would never end
    out = tmp_path / "out.jsonl"
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(out),
                                         "--replay", str(rec)], env=env())
    assert done.rc == 1, done.stderr[-2000:]
    by_id = {r["id"]: r for r in read_results(out)}
    assert by_id["y"]["status"] == "completed" and by_id["y"]["result"] == "ok"
    assert by_id["x"]["status"] == "failed"
    assert by_id["x"]["error"] == f"cassette {x}: a symbolic link: refused (agentd never " \
                                  "follows a link in place of its own file)"
    # the largest child this test process has waited for (agentd among them) stayed small
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 1 << 20  # KiB: < 1 GiB


AWAIT_SCRIPT = {"playback": 1, "turns": [
    {"tool_calls": [{"name": "agentd__await_resource",
                     "arguments": {"uri": "mem://watched", "timeout": 600}}]},
    {"expect": ["updated; current state", "v-new"], "content": "saw v-new"}]}


async def test_a_fifo_cassette_is_refused_and_signals_still_end_the_batch(tmp_path, agentd_bin):
    """Sample w awaits an update its cassette no longer holds (so it waits while the
    batch runs); sample f's cassette is a FIFO nobody writes. f fails at once naming
    what its cassette is, and SIGTERM then ends the batch (130): the loop never blocked."""
    require_modules("mcp", "uvicorn", "starlette")
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(AWAIT_SCRIPT))
    tasks, rec = tmp_path / "tasks.jsonl", tmp_path / "rec"
    tasks.write_text(json.dumps({"id": "w", "instruction": "wait for the change"}) + "\n")
    server = python_peer("sdk_servers.py").start()
    common = ["batch", "--tasks", str(tasks), "--intelligence", f"playback:{pb}",
              "--mcp", f"sdk={server.url}", "--drain-timeout", "4"]
    try:
        proc = await start_agentd(agentd_bin, [*common, "--out", str(tmp_path / "live.jsonl"),
                                               "--record", str(rec)], env=env())
        await proc.wait_for_event("batch.subscribed", uri="mem://watched", limit=120)
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{server.port}/update?value=v-new") as r:
                assert r.status == 200
        assert (await proc.done(limit=150)).rc == 0
    finally:
        server.stop()
    w = cassette_of(rec, "w")
    w.write_text("".join(ln + "\n" for ln in w.read_text().splitlines()
                         if '"update":' not in ln))  # starved: w waits
    with tasks.open("a") as f:
        f.write(json.dumps({"id": "f", "instruction": "from a fifo"}) + "\n")
    fifo = cassette_of(rec, "f")
    os.mkfifo(fifo)
    out = tmp_path / "out.jsonl"
    proc = await start_agentd(agentd_bin, [*common, "--parallel", "2", "--out", str(out),
                                           "--replay", str(rec)], env=env())
    await proc.wait_for_event("batch.sample.end", id="f", limit=60)
    await proc.wait_for_event("batch.subscribed", handle="", uri="mem://watched", limit=60)
    proc.signal(signal.SIGTERM)
    done = await proc.done(limit=60)
    assert done.rc == 130, done.stderr[-3000:]
    (failed,) = read_results(out)  # w was cancelled by the drain: not written
    assert failed["id"] == "f" and failed["status"] == "failed"
    assert failed["error"] == f"cassette {fifo}: not a regular file (a FIFO): refused"


@pytest.mark.parametrize("target", ["a file", "nothing yet"])
async def test_record_never_writes_through_a_link_at_the_cassette_name(
        tmp_path, agentd_bin, target):
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(OK_SCRIPT))
    tasks, rec, victim = two_tasks(tmp_path), tmp_path / "rec", tmp_path / "victim"
    rec.mkdir()
    if target == "a file":
        victim.write_bytes(b"precious\n")
    cassette_of(rec, "x").symlink_to(victim)
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                         str(tmp_path / "out.jsonl"), "--intelligence",
                                         f"playback:{pb}", "--record", str(rec)], env=env())
    assert done.rc == 0, done.stderr[-2000:]
    if target == "a file":
        assert victim.read_bytes() == b"precious\n"
    else:
        assert not victim.exists() and not victim.is_symlink()
    x = cassette_of(rec, "x")
    assert not x.is_symlink() and x.is_file()  # the link was replaced, not followed
    assert json.loads(x.read_text().splitlines()[0])["sample"] == "x"
    assert sorted(p.name for p in rec.iterdir()) == sorted(
        [x.name, cassette_of(rec, "y").name])  # no temporary file left


TORN = b'{"id":"a","status":"completed","partial":false,"result":"r","steps":1,' \
       b'"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0},"run_id":"r/0.1"}\n' \
       b'{"id":"b","stat'


@pytest.mark.parametrize(("plant", "needle"), [
    ("link to a results file", "a symbolic link: refused"),
    ("not a results file", ":1: not a result line"),
    ("a torn line of another file", ":2: the last line is not a result line"),
    ("a FIFO", "not a regular file (a FIFO): refused"),
])
async def test_resume_refuses_an_out_that_is_not_a_results_file_before_touching_it(
        tmp_path, agentd_bin, plant, needle):
    tasks, out, target = two_tasks(tmp_path), tmp_path / "out.jsonl", tmp_path / "target"
    body = {"link to a results file": TORN, "not a results file": b"hello\nworld",
            "a torn line of another file": b"\n\x00\x01binary", "a FIFO": None}[plant]
    if body is None:
        os.mkfifo(out)
    elif plant.startswith("link"):
        target.write_bytes(body)
        out.symlink_to(target)
    else:
        out.write_bytes(body)
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(out),
                                         "--resume", "--intelligence", "http://127.0.0.1:9/v1"],
                            env=env(), limit=60)
    assert done.rc == 2, done.stderr[-2000:]
    (err,) = done.stderr.strip().splitlines()
    assert f"--out {out}" in err and needle in err, err
    if body is not None:  # byte for byte, through the link too
        assert (target if plant.startswith("link") else out).read_bytes() == body
    assert not done.events("batch.resume.torn_line")


async def test_a_second_batch_on_one_out_is_exit_2_naming_the_holder(tmp_path, agentd_bin):
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(OK_SCRIPT))
    tasks, out = two_tasks(tmp_path), tmp_path / "out.jsonl"
    thinking = asyncio.Event()  # the first batch's model answers once this is set
    async with Gateway([Reply(content="first", gate=thinking)] * 2) as gw:
        first = await start_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                                str(out), "--intelligence", gw.url,
                                                "--model", "m"], env=env())
        await first.wait_for_event("batch.sample.start", id="x", limit=60)
        for resume in ([], ["--resume"]):
            second = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                                   str(out), "--intelligence",
                                                   f"playback:{pb}", *resume], env=env())
            assert second.rc == 2, second.stderr[-2000:]
            (err,) = second.stderr.strip().splitlines()
            assert err.endswith(f"--out {out}: in use by another agentd batch "
                                f"(pid {first.proc.pid}): wait for it to end, or name "
                                "another file"), err
        thinking.set()
        done = await first.done(limit=90)
    assert done.rc == 0, done.stderr[-2000:]
    assert sorted(r["result"] for r in read_results(out)) == ["first", "first"]


async def test_a_secret_the_model_echoes_never_reaches_the_results_file(tmp_path, agentd_bin):
    require_modules("mcp", "uvicorn", "starlette")
    key, token = "gw-key-93ad1f0c77", "hdr-token-5c2e8b41"
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "tok").write_text(token)
    server = python_peer("sdk_servers.py").start()
    conf = tmp_path / "agentd.toml"
    conf.write_text(f'[[mcp_servers]]\nname = "sdk"\nurl = "{server.url}"\nrequired = true\n'
                    'headers = { Authorization = "Bearer {{secret:tok}}" }\n')
    tasks, out = two_tasks(tmp_path), tmp_path / "out.jsonl"
    echo = Reply(content=f"the key is {key}, the token {token}")
    try:
        async with Gateway([echo] * 2) as gw:
            done = await run_agentd(agentd_bin, [
                "batch", "--tasks", str(tasks), "--out", str(out), "--intelligence", gw.url,
                "--model", "m", "--config", str(conf), "--secrets-dir",
                str(tmp_path / "secrets")], env=env() | {"AGENTD_INTELLIGENCE_KEY": key})
    finally:
        server.stop()
    assert done.rc == 0, done.stderr[-2000:]
    assert gw.headers[0]["Authorization"] == f"Bearer {key}"  # the key was in use
    text = out.read_text()
    assert key not in text and token not in text
    results = read_results(out)
    assert [r["status"] for r in results] == ["completed"] * 2
    assert all(r["result"] == "the key is ***, the token ***" for r in results)
    assert key not in done.stderr + done.stdout and token not in done.stderr + done.stdout


@pytest.mark.parametrize(("size", "flags", "bound"), [
    (20 << 20, [], "the control wire's answer bound of 16711680 bytes (its 16777216-byte frame less 65536 for the envelope)"),
    (5000, ["--intelligence-max-bytes", "4096"], "--intelligence-max-bytes=4096"),
], ids=["20MB-past-the-frame", "5KB-past-intelligence-max-bytes"])
async def test_a_replayed_answer_past_its_live_bound_fails_its_sample_only(
        tmp_path, agentd_bin, size, flags, bound):
    content = "z" * size
    tasks, rec = await record_two(tmp_path, agentd_bin)
    x = cassette_of(rec, "x")
    head, entry = x.read_text().splitlines()
    answer = json.loads(entry)
    assert answer["response"]["completion"]["content"] == "ok"
    answer["response"]["completion"]["content"] = content
    x.write_text(head + "\n" + json.dumps(answer) + "\n")
    out = tmp_path / "out.jsonl"
    done = await run_agentd(agentd_bin, [*flags, "batch", "--tasks", str(tasks), "--out",
                                         str(out), "--replay", str(rec)], env=env())
    assert done.rc == 1, done.stderr[-2000:]
    by_id = {r["id"]: r for r in read_results(out)}
    assert by_id["y"]["status"] == "completed" and by_id["y"]["result"] == "ok"
    assert by_id["x"]["status"] == "failed"
    error = by_id["x"]["error"]
    prefix = f"cassette {x}: step 1 of the sample: a recorded answer of "
    assert error.startswith(prefix) and error.endswith(f" bytes, past {bound}: not replayed")
    assert int(error[len(prefix):].split()[0]) > len(content)
    assert done.events("batch.end")[-1]["by_status"] == {"completed": 1, "failed": 1}
