"""A cassette records what every request asked the gateway with besides the
messages: the model and the sampling settings (docs/batch.md, the cassette
format), as sent -- the gateway's received bodies are the reference."""

from __future__ import annotations

import json
from pathlib import Path

from agentd_proc import run_agentd
from batch_helpers import cassette_of, env, read_results
from gateway import Gateway, Reply


async def test_the_cassette_header_records_the_model_and_sampling_settings(
        tmp_path: Path, agentd_bin: str) -> None:
    tasks, rec, out = tmp_path / "tasks.jsonl", tmp_path / "rec", tmp_path / "out.jsonl"
    tasks.write_text(json.dumps({"id": "s1", "instruction": "say ok"}) + "\n")
    async with Gateway([Reply.text("ok")]) as gw:
        done = await run_agentd(agentd_bin, [
            "batch", "--tasks", str(tasks), "--out", str(out), "--record", str(rec),
            "--intelligence", gw.url, "--model", "m-rec", "--temperature", "0.2",
            "--seed", "7", "--model-param", '{"reasoning_effort": "high"}'], env=env())
    assert done.rc == 0, done.stderr[-2000:]
    assert [r["status"] for r in read_results(out)] == ["completed"]
    (body,) = gw.bodies
    sent = {k: body[k] for k in ("temperature", "seed", "reasoning_effort")}
    assert sent == {"temperature": 0.2, "seed": 7, "reasoning_effort": "high"}
    header = json.loads(cassette_of(rec, "s1").read_text().splitlines()[0])
    assert header["model"] == body["model"] == "m-rec"
    assert header["sampling"] == sent
