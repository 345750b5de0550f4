"""`agentd batch` as an operator runs it: the real CLI, the official SDK server as
the MCP side and a recording gateway (tests/support/gateway.py) as the intelligence."""

from __future__ import annotations

import json
import signal
import urllib.request
from collections import Counter

import aiohttp
import pytest
from agentd_proc import run_agentd, start_agentd
from batch_helpers import Samples, batch_args, cassette_of, env, read_results, write_tasks
from gateway import Gateway
from peers import python_peer, require_modules

pytestmark = pytest.mark.timeout(240)
def stats(peer) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{peer.port}/stats", timeout=10) as r:
        return json.loads(r.read())


async def test_48_tasks_at_parallel_8_each_once_never_over_8(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    ids = write_tasks(tasks, 48)
    samples = Samples()
    calls_before = stats(sdk)["calls"]
    async with Gateway([samples] * 96) as gw:
        done = await run_agentd(agentd_bin, batch_args(tasks, out, gw, sdk, "--parallel", "8"),
                                env=env(), limit=200)
    assert done.rc == 0, done.stderr[-3000:]
    results = read_results(out)
    assert sorted(r["id"] for r in results) == ids  # every sample, exactly once
    for r in results:
        n = int(r["id"][1:])
        assert r["status"] == "completed" and r["partial"] is False
        assert r["result"] == f"done {n}: echo {n}"  # its own tool result, not another's
        assert r["steps"] == 2 and r["usage"]["total_tokens"] == 30
        assert "error" not in r and r["run_id"]
    assert len({r["run_id"] for r in results}) == 48
    assert len(gw.bodies) == 96 and stats(sdk)["calls"] - calls_before == 48
    assert samples.max_open <= 8
    end = done.events("batch.end")[-1]
    assert end["by_status"] == {"completed": 48} and end["max_in_flight"] <= 8
    assert end["tokens"] == 48 * 30 and end["sample_p95_s"] >= end["sample_p50_s"]


async def test_a_failing_sample_does_not_stop_the_others(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    write_tasks(tasks, 4)
    with tasks.open("a") as f:  # a scope naming no declared server: refused at spawn
        f.write(json.dumps({"id": "bad", "instruction": "sample 9", "tool_scope": ["nope"]})
                + "\n")
    async with Gateway([Samples()] * 8) as gw:
        done = await run_agentd(agentd_bin, batch_args(tasks, out, gw, sdk, "--parallel", "2"),
                                env=env())
    assert done.rc == 1, done.stderr[-3000:]
    by_id = {r["id"]: r for r in read_results(out)}
    assert len(by_id) == 5
    assert by_id["bad"]["status"] == "failed" and "tool_scope" in by_id["bad"]["error"]
    assert all(by_id[f"t{i:03d}"]["status"] == "completed" for i in range(4))


@pytest.mark.parametrize(("lines", "needle"), [
    (['{"id": "a", "instruction": "x"}', '{"id": "b", "instruction": 3}'], ":2: not a task"),
    (['{"id": "a", "instruction": "x"}', "{not json"], ":2: not a task"),
    (['{"id": "a", "instruction": "x", "tools": []}'], ":1: not a task"),
    (['{"id": "a", "instruction": "x"}', "", '{"id": "a", "instruction": "y"}'],
     ":3: duplicate id 'a' (first on line 1)"),
])
async def test_a_malformed_tasks_file_is_exit_2_before_anything_runs(
        tmp_path, agentd_bin, lines, needle):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    async with Gateway([]) as gw:
        done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(out),
                                             "--intelligence", gw.url], env=env())
    assert done.rc == 2
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and str(tasks) in err[0], done.stderr
    assert not out.exists() and gw.bodies == []


async def test_an_unwritable_results_file_is_exit_2(tmp_path, agentd_bin):
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, 1)
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                         str(tmp_path / "no" / "out.jsonl"),
                                         "--intelligence", "http://127.0.0.1:9/v1"], env=env())
    assert done.rc == 2 and "--out " in done.stderr and len(done.stderr.splitlines()) == 1


async def test_a_required_server_down_is_exit_6_before_any_sample(tmp_path, agentd_bin):
    from peers import free_port

    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    write_tasks(tasks, 2)
    async with Gateway([]) as gw:
        done = await run_agentd(agentd_bin, [
            "--init-timeout", "5", "batch", "--tasks", str(tasks), "--out", str(out),
            "--intelligence", gw.url, "--mcp", f"sdk=http://127.0.0.1:{free_port()}/mcp"],
            env=env())
    assert done.rc == 6 and done.events("mcp.required_failed")
    assert read_results(out) == [] and gw.bodies == []


async def test_an_existing_results_file_needs_resume(tmp_path, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    write_tasks(tasks, 1)
    out.write_text('{"id": "zzz"}\n')
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(out),
                                         "--intelligence", "http://127.0.0.1:9/v1"], env=env())
    assert done.rc == 2 and "--resume" in done.stderr
    assert out.read_text() == '{"id": "zzz"}\n'  # untouched


async def test_sigint_mid_batch_then_resume_runs_each_sample_once(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    ids = write_tasks(tasks, 12)
    # samples 0-3 answer at once; the rest hang at their first call until the
    # batch is interrupted (the drain cancels them: they are not written)
    async with Gateway([Samples(stall=lambda n: 120.0 if n >= 4 else 0.0)] * 24) as gw:
        proc = await start_agentd(agentd_bin, batch_args(
            tasks, out, gw, sdk, "--parallel", "4", "--drain-timeout", "4"), env=env())
        for n in range(4):
            await proc.wait_for_event("batch.sample.end", id=f"t{n:03d}", limit=90)
        await proc.wait_for_event("batch.sample.start", handle="0.8", limit=60)
        proc.signal(signal.SIGINT)
        first = await proc.done(limit=90)
    assert first.rc == 130, first.stderr[-3000:]
    written = read_results(out)  # only whole lines
    assert sorted(r["id"] for r in written) == ids[:4]
    assert first.events("batch.end")[-1]["by_status"]["interrupted"] == 8
    assert {e["id"] for e in first.events("batch.sample.dropped")} == set(ids[4:8])

    samples = Samples()
    async with Gateway([samples] * 24) as gw:
        second = await run_agentd(agentd_bin, batch_args(tasks, out, gw, sdk, "--resume",
                                                         "--parallel", "4"), env=env())
    assert second.rc == 0, second.stderr[-3000:]
    results = read_results(out)
    assert Counter(r["id"] for r in results) == Counter(ids)  # each exactly once
    assert sorted(samples.first) == list(range(4, 12))  # only the rest ran
    assert second.events("batch.end")[-1]["skipped"] == 4


async def test_resume_cuts_a_torn_last_line(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    ids = write_tasks(tasks, 2)
    async with Gateway([Samples()] * 4) as gw:
        assert (await run_agentd(agentd_bin, batch_args(tasks, out, gw, sdk),
                                 env=env())).rc == 0
    lines = out.read_text().splitlines(keepends=True)
    keep = next(ln for ln in lines if '"t000"' in ln)
    out.write_text(keep + '{"id": "t001", "status": "compl')  # killed mid-write
    samples = Samples()
    async with Gateway([samples] * 4) as gw:
        done = await run_agentd(agentd_bin, batch_args(tasks, out, gw, sdk, "--resume"),
                                env=env())
    assert done.rc == 0, done.stderr[-3000:]
    assert [r["id"] for r in read_results(out)] == ids
    assert samples.first == [1] and done.events("batch.resume.torn_line")


async def test_batch_token_ceiling_stops_calls_within_the_trees_bound(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    ids = write_tasks(tasks, 10)
    ceiling, inflight, largest = 100, 2, 15  # each call is 15 tokens (tests/support/gateway.py)
    async with Gateway([Samples()] * 20) as gw:
        done = await run_agentd(agentd_bin, batch_args(
            tasks, out, gw, sdk, "--parallel", "3", "--batch-token-ceiling", str(ceiling),
            "--max-inflight-intelligence", str(inflight)), env=env())
    assert done.rc == 1, done.stderr[-3000:]
    results = read_results(out)
    assert sorted(r["id"] for r in results) == ids
    spent = sum(r["usage"]["total_tokens"] for r in results)
    assert spent == 15 * len(gw.bodies) == done.events("batch.end")[-1]["tokens"]
    assert ceiling <= spent <= ceiling - 1 + inflight * largest  # docs/subagents.md's bound
    out_of_budget = [r for r in results if r["status"] == "budget_exhausted"]
    assert out_of_budget and all(r["partial"] for r in out_of_budget)
    assert all(r["status"] in ("completed", "budget_exhausted") for r in results)


class Storm:
    """Answers requests number `first`..`first + n - 1` with 429 Retry-After: 1."""

    def __init__(self, samples: Samples, first: int, n: int) -> None:
        self.samples, self.first, self.n, self.seen, self.refused = samples, first, n, 0, 0

    def __call__(self, body):
        from gateway import Reply

        self.seen += 1
        if self.first <= self.seen < self.first + self.n:
            self.refused += 1
            return Reply.error(429, retry_after="1")
        return self.samples(body)


async def test_a_429_storm_slows_the_batch_and_loses_no_sample(tmp_path, sdk, agentd_bin):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    ids = write_tasks(tasks, 12)
    storm = Storm(Samples(), first=5, n=8)
    async with Gateway([storm] * 40) as gw:
        done = await run_agentd(agentd_bin, ["--intelligence-attempts", "10", *batch_args(
            tasks, out, gw, sdk, "--parallel", "4")], env=env())
    assert done.rc == 0, done.stderr[-3000:]
    results = read_results(out)
    assert sorted(r["id"] for r in results) == ids
    assert all(r["status"] == "completed" for r in results)
    assert storm.refused == 8 and len(gw.bodies) == 24 + 8
    retries = done.events("intelligence.retry")
    assert len(retries) == 8 and all(r["delay_s"] >= 1.0 for r in retries)  # Retry-After kept


def strip_run(results: list[dict]) -> dict[str, dict]:
    """Results by id without what differs per run by design (run ids, tokens)."""
    return {r["id"]: {k: v for k, v in r.items() if k not in ("run_id", "usage", "wall_ms")}
            for r in results}


async def test_record_then_replay_with_gateway_and_server_down(tmp_path, agentd_bin):
    require_modules("mcp", "uvicorn", "starlette")
    secret = "s3cr3t-token-4711"
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "tok").write_text(secret)
    tasks, out, rec = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl", tmp_path / "rec"
    ids = write_tasks(tasks, 8)
    with tasks.open("a") as f:  # a secret in the traffic: scrubbed from the cassette
        f.write(json.dumps({"id": "s", "instruction": f"sample 8 with {secret}"}) + "\n")
    server = python_peer("sdk_servers.py").start()
    conf = tmp_path / "agentd.toml"
    conf.write_text(f'[[mcp_servers]]\nname = "sdk"\nurl = "{server.url}"\nrequired = true\n'
                    'headers = { Authorization = "Bearer {{secret:tok}}" }\n')
    common = ["--config", str(conf), "--secrets-dir", str(tmp_path / "secrets"),
              "--parallel", "4"]
    try:
        async with Gateway([Samples()] * 18) as gw:
            live = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                                 str(out), "--intelligence", gw.url,
                                                 "--record", str(rec), *common], env=env())
        assert live.rc == 0, live.stderr[-3000:]
        assert stats(server)["calls"] == 9
    finally:
        server.stop()  # the gateway is closed too: replay has no network at all
    cassettes = sorted(rec.iterdir())
    assert len(cassettes) == 9
    for path in cassettes:
        text = path.read_text()
        assert secret not in text
        lines = [json.loads(ln) for ln in text.splitlines()]
        assert lines[0]["cassette"] == 3 and lines[0]["scope"] == ["sdk"]
        assert [(e["handle"], e["step"], e["request"]["kind"]) for e in lines[1:]] == [
            ("", 1, "complete"), ("", 2, "call"), ("", 3, "complete")]
        assert lines[2]["request"]["name"] == "sdk__echo"
        assert lines[2]["response"]["kind"] == "observation"
    replayed = tmp_path / "replayed.jsonl"
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(replayed),
                                         "--replay", str(rec), *common], env=env())
    assert done.rc == 0, done.stderr[-3000:]
    live_results, replay_results = read_results(out), read_results(replayed)
    assert strip_run(replay_results) == strip_run(live_results)
    assert sorted(strip_run(replay_results)) == sorted([*ids, "s"])
    # a replay reports the tokens the recording spent (it spends none itself)
    assert all(r["usage"] == {"prompt_tokens": 20, "completion_tokens": 10,
                              "total_tokens": 30} for r in replay_results)
    assert [r["usage"] for r in replay_results] != [] and done.events(
        "batch.end")[-1]["tokens"] == sum(r["usage"]["total_tokens"] for r in live_results)

    # a divergent task: sample 3's instruction changed since the recording
    lines = tasks.read_text().splitlines()
    lines[3] = json.dumps({"id": ids[3], "instruction": "sample 3: echo it twice"})
    tasks.write_text("\n".join(lines) + "\n")
    diverged = tmp_path / "diverged.jsonl"
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(diverged),
                                         "--replay", str(rec), *common], env=env())
    assert done.rc == 1, done.stderr[-3000:]
    by_id = {r["id"]: r for r in read_results(diverged)}
    bad = by_id.pop(ids[3])
    assert bad["status"] == "failed"
    assert bad["error"].startswith(
        f"replay diverged at sample {ids[3]!r} step 1 of the sample: request.messages[")
    assert '"sample 3: echo it"' in bad["error"] and '"sample 3: echo it twice"' in bad["error"]
    assert all(r["status"] == "completed" for r in by_id.values()) and len(by_id) == 8


async def test_a_samples_subagent_traffic_is_recorded_and_replayed(tmp_path, agentd_bin):
    script = {"playback": 1, "scripts": [
        {"match": "child", "turns": [{"content": "child ok"}]},
        {"match": "parent", "turns": [
            {"tool_calls": [{"name": "agentd__subagent_spawn",
                             "arguments": {"instruction": "child of the parent"}}]},
            {"content": "parent done", "expect": "child ok"}]}]}
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(script))
    tasks, out, rec = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl", tmp_path / "rec"
    tasks.write_text(json.dumps({"id": "a", "instruction": "parent a"}) + "\n")
    live = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(out),
                                         "--intelligence", f"playback:{pb}",
                                         "--record", str(rec)], env=env())
    assert live.rc == 0, live.stderr[-2000:]
    (cassette,) = rec.iterdir()
    entries = [json.loads(ln) for ln in cassette.read_text().splitlines()[1:]]
    assert [(e["handle"], e["step"], e["request"]["kind"]) for e in entries] == [
        ("", 1, "complete"), (".1", 1, "complete"), ("", 2, "complete")]
    replayed = tmp_path / "replayed.jsonl"
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                         str(replayed), "--replay", str(rec)], env=env())
    assert done.rc == 0, done.stderr[-2000:]
    (r,) = read_results(replayed)
    assert r["result"] == "parent done" and r["steps"] == 2
    assert r["usage"]["total_tokens"] == 0
    # a version-1 cassette (no update lines: the same lines otherwise) still replays
    head, *rest = cassette.read_text().splitlines(keepends=True)
    assert json.loads(head)["cassette"] == 3
    cassette.write_text(head.replace('"cassette":3', '"cassette":1', 1) + "".join(rest))
    v1 = tmp_path / "v1.jsonl"
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(v1),
                                         "--replay", str(rec)], env=env())
    assert done.rc == 0, done.stderr[-2000:]
    assert strip_run(read_results(v1)) == strip_run(read_results(replayed))
    # a task the recording never saw: no cassette, that sample fails and only it;
    # --parallel 1, so sample a starts first and gets the handle it was recorded
    # under, which its parent's second request carries (docs/batch.md, "Replay")
    with tasks.open("a") as f:
        f.write(json.dumps({"id": "new", "instruction": "parent new"}) + "\n")
    again = tmp_path / "again.jsonl"
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(again),
                                         "--replay", str(rec), "--parallel", "1"], env=env())
    assert done.rc == 1, done.stderr[-2000:]
    by_id = {r["id"]: r for r in read_results(again)}
    assert by_id["a"]["status"] == "completed", by_id["a"]
    assert by_id["new"]["status"] == "failed"
    assert by_id["new"]["error"].startswith("no cassette for sample 'new': ")


def log_line(line: str) -> dict:
    """One JSON log line a child wrote (forwarded as `subagent.stderr`), or {}."""
    try:
        out = json.loads(line)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


async def test_a_cassette_that_cannot_be_written_fails_its_sample_only(tmp_path, agentd_bin):
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps({"playback": 1, "turns": [{"content": "ok"}]}))
    tasks, out, rec = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl", tmp_path / "rec"
    tasks.write_text(json.dumps({"id": "x", "instruction": "one"}) + "\n"
                     + json.dumps({"id": "y", "instruction": "two"}) + "\n")
    rec.mkdir()
    cassette_of(rec, "x").mkdir()  # where x's cassette would go: not a file
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(out),
                                         "--intelligence", f"playback:{pb}",
                                         "--record", str(rec)], env=env())
    assert done.rc == 1, done.stderr[-2000:]
    by_id = {r["id"]: r for r in read_results(out)}
    assert by_id["y"]["status"] == "completed"
    assert by_id["x"]["status"] == "failed"
    assert by_id["x"]["error"].startswith("--record: the cassette of sample 'x' could not be")
    assert done.events("batch.record.failed")
    assert cassette_of(rec, "y").is_file()


AWAIT_TURNS = [
    {"tool_calls": [{"name": "agentd__await_resource",
                     "arguments": {"uri": "mem://watched", "timeout": 600}}]},
    {"expect": ["updated; current state", "v-new"], "content": "saw v-new"}]
# the waiting handle: the sample itself, or its subagent (the cassette's `.1`)
AWAITERS = {
    "": {"playback": 1, "turns": AWAIT_TURNS},
    ".1": {"playback": 1, "scripts": [
        {"match": "child", "turns": AWAIT_TURNS},
        {"match": "wait for", "turns": [
            {"tool_calls": [{"name": "agentd__subagent_spawn",
                             "arguments": {"instruction": "child: wait for it"}}]},
            {"content": "saw v-new", "expect": "saw v-new"}]}]},
}


@pytest.mark.parametrize("waiter", sorted(AWAITERS))
async def test_a_resource_update_is_recorded_and_replayed_at_its_point(
        tmp_path, agentd_bin, waiter):
    """A handle of a sample (the sample, or its subagent) awaits `mem://watched` on the
    official SDK server (agentd__await_resource); the update arrives live, is in the
    cassette after that handle's subscribe, and replay with the server down delivers it
    there: the same wake, the same result, no timeout. Without its update line the
    replay is starved and diverges; a v1 header with one is refused."""
    require_modules("mcp", "uvicorn", "starlette")
    script = AWAITERS[waiter]
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(script))
    tasks, out, rec = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl", tmp_path / "rec"
    tasks.write_text(json.dumps({"id": "w", "instruction": "wait for the change"}) + "\n")
    server = python_peer("sdk_servers.py").start()
    common = ["batch", "--tasks", str(tasks), "--intelligence", f"playback:{pb}",
              "--mcp", f"sdk={server.url}"]
    try:
        proc = await start_agentd(agentd_bin, [*common, "--deadline", "60", "--out", str(out),
                                               "--record", str(rec)], env=env())
        await proc.wait_for_event("batch.subscribed", uri="mem://watched", handle=waiter,
                                  limit=120)
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{server.port}/update?value=v-new") as r:
                assert r.status == 200
        live = await proc.done(limit=150)
    finally:
        server.stop()  # replay below has no MCP server (and playback: no gateway)
    assert live.rc == 0, live.stderr[-3000:]
    (live_result,) = read_results(out)
    assert live_result["status"] == "completed" and live_result["result"] == "saw v-new"
    (cassette,) = rec.iterdir()
    lines = [json.loads(ln) for ln in cassette.read_text().splitlines()]
    assert lines[0]["cassette"] == 3
    (at,) = [i for i, ln in enumerate(lines) if "update" in ln]
    update = lines[at]
    assert update["update"] == {"server": "sdk", "uri": "mem://watched"}
    assert update["handle"] == waiter and update["after"] >= 1
    (before,) = [ln for ln in lines[1:at] if (ln["handle"], ln.get("step")) == (
        waiter, update["after"])]  # the answer it arrived after: that handle's subscribe
    assert before["request"]["kind"] == "subscribe"
    later = [ln for ln in lines[at + 1:] if ln.get("request", {}).get("kind") == "read"
             and ln["handle"] == waiter]
    assert later and "v-new" in later[0]["response"]["text"]  # the read after the wake

    replayed = tmp_path / "replayed.jsonl"
    done = await run_agentd(agentd_bin, [*common, "--deadline", "60", "--out", str(replayed),
                                         "--replay", str(rec)], env=env(), limit=150)
    assert done.rc == 0, done.stderr[-3000:]
    assert strip_run(read_results(replayed)) == strip_run([live_result])
    (woke,) = done.events("batch.replay.update")
    assert woke["uri"] == "mem://watched" and woke["after"] == update["after"]
    assert woke["handle"] == waiter
    # the replay's last model request of that handle matched the recording: the wake
    last = [ln for ln in lines[1:] if ln.get("request", {}).get("kind") == "complete"
            and ln["handle"] == waiter][-1]
    assert "updated; current state of mem://watched" in json.dumps(last["request"])
    child = [log_line(e["line"]) for e in done.events("subagent.stderr")]
    assert [(c["uri"], c["updated"]) for c in child if c.get("event") == "reactive.await"] \
        == [("mem://watched", True)]  # the handle itself was woken, not timed out
    (end,) = done.events("batch.sample.end")
    assert end["status"] == "completed" and not done.events("batch.replay.diverged")

    # a run that waits for an update its cassette does not hold: no wake, and once its
    # --deadline ends the wait, the recording's next request is one it never made
    whole = cassette.read_text()
    cassette.write_text("".join(ln + "\n" for ln in whole.splitlines() if '"update":' not in ln))
    starved = tmp_path / "starved.jsonl"
    done = await run_agentd(agentd_bin, [*common, "--deadline", "10", "--out", str(starved),
                                         "--replay", str(rec)], env=env(), limit=150)
    assert done.rc == 1 and not done.events("batch.replay.update")
    (bad,) = read_results(starved)
    assert bad["status"] == "failed"
    assert bad["error"].startswith("replay diverged at sample 'w' step "), bad["error"]
    assert "the run ended; the recording goes on with a read request" in bad["error"]

    # an update line is a version-2 line: a "version-1" cassette holding one is refused
    cassette.write_text(whole.replace('"cassette":3', '"cassette":1', 1))
    again = tmp_path / "again.jsonl"
    done = await run_agentd(agentd_bin, [*common, "--out", str(again), "--replay", str(rec)],
                            env=env(), limit=150)
    assert done.rc == 1
    (bad,) = read_results(again)
    assert bad["status"] == "failed" and "an update line in a version-1 cassette" in bad["error"]
