"""`agentd batch --trajectories DIR` as an operator runs it: the real CLI, the
playback intelligence scripting a sample that calls a tool of the official SDK
server and spawns a subagent, and Harbor's own model validating every file
(tests/support/harbor_peer.py). The sample echoes a secret of the server's header:
it never reaches a trajectory."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agentd_proc import run_agentd
from batch_helpers import read_results
from harbor_peer import harbor_validate
from peers import python_peer, require_modules
from trajectory_helpers import SECRET, env, script, tokens

from agentd.log import REDACTED

pytestmark = pytest.mark.timeout(300)
__all__ = ["harbor_validate"]  # the session fixture, used below by name


def without_run_facts(value: Any) -> Any:
    """A document without what differs per run by design (timestamps, run ids)."""
    if isinstance(value, dict):
        return {k: without_run_facts(v) for k, v in value.items()
                if k not in ("timestamp", "session_id")}
    if isinstance(value, list):
        return [without_run_facts(v) for v in value]
    return value


async def test_batch_trajectories_live_and_replayed(tmp_path, agentd_bin, harbor_validate):
    require_modules("mcp", "uvicorn", "starlette")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "tok").write_text(SECRET)
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "instruction": f"sample {n}: go"}) + "\n"
                             for n, i in enumerate(("t0", "a/b c"))))
    server = python_peer("sdk_servers.py").start()
    conf = tmp_path / "agentd.toml"
    conf.write_text(f'[[mcp_servers]]\nname = "sdk"\nurl = "{server.url}"\nrequired = true\n'
                    'headers = { Authorization = "Bearer {{secret:tok}}" }\n')
    common = ["--config", str(conf), "--secrets-dir", str(tmp_path / "secrets"),
              "--parallel", "1", "--intelligence", f"playback:{script(tmp_path / 'p.json')}"]
    live_dir, rec = tmp_path / "traj", tmp_path / "rec"
    try:
        live = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out", str(out),
                                             "--record", str(rec), "--trajectories",
                                             str(live_dir), *common], env=env())
    finally:
        server.stop()  # the replay below has no network at all
    assert live.rc == 0, live.stderr[-3000:]
    results = {r["id"]: r for r in read_results(out)}
    files = sorted(live_dir.iterdir())
    assert [f.name for f in files] == sorted(["t0.json", f"a_b_c-{_digest('a/b c')}.json"])
    harbor_validate(*files)
    for path in files:
        text = path.read_text()
        assert SECRET not in text and REDACTED in text
        doc = json.loads(text)
        sample = doc["extra"]["sample_id"]
        result = results[sample]
        assert doc["schema_version"] == "ATIF-v1.8" and doc["session_id"] == result["run_id"]
        assert doc["extra"]["status"] == "completed"
        user, first, last = doc["steps"]
        assert user["source"] == "user" and user["message"].startswith("sample ")
        assert [(c["tool_call_id"], c["function_name"], c["arguments"])
                for c in first["tool_calls"]] == [
            ("e1", "sdk__echo", {"text": "key ***"}),
            ("s1", "agentd__subagent_spawn", {"instruction": "[child] echo something"})]
        obs = {r["source_call_id"]: r for r in first["observation"]["results"]}
        assert "key ***" in obs["e1"]["content"]
        assert obs["s1"]["subagent_trajectory_ref"] == [{"trajectory_id": "subagent.1"}]
        assert last["message"] == "done, the key was ***"
        (child,) = doc["subagent_trajectories"]
        assert child["trajectory_id"] == "subagent.1"
        assert child["steps"][0]["message"] == "[child] echo something"
        assert child["steps"][1]["tool_calls"][0]["arguments"] == {"text": "from the child"}
        assert "from the child" in child["steps"][1]["observation"]["results"][0]["content"]
        assert child["steps"][2]["message"] == "child done"
        usage = result["usage"]
        assert tokens(doc) == (usage["prompt_tokens"], usage["completion_tokens"]) == (63, 21)

    replay_dir = tmp_path / "replayed"
    done = await run_agentd(agentd_bin, ["batch", "--tasks", str(tasks), "--out",
                                         str(tmp_path / "replay.jsonl"), "--replay", str(rec),
                                         "--trajectories", str(replay_dir), *common], env=env())
    assert done.rc == 0, done.stderr[-3000:]
    for path in files:
        again = replay_dir / path.name
        assert without_run_facts(json.loads(again.read_text())) == \
            without_run_facts(json.loads(path.read_text()))


def _digest(sample_id: str) -> str:
    import hashlib

    return hashlib.sha256(sample_id.encode()).hexdigest()[:16]
