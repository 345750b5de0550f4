"""`agentd --trajectory FILE` as a user runs it: the real CLI on the playback
intelligence and the official SDK server; the file is written at the end of
the run, a partial one too, and Harbor's own model validates it."""

from __future__ import annotations

import json

import pytest
from agentd_proc import run_agentd
from harbor_peer import harbor_validate
from peers import python_peer, require_modules
from trajectory_helpers import SECRET, env, script, tokens

pytestmark = pytest.mark.timeout(240)
__all__ = ["harbor_validate"]  # the session fixture, used below by name


@pytest.fixture
def run_args(tmp_path):
    require_modules("mcp", "uvicorn", "starlette")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "tok").write_text(SECRET)
    with python_peer("sdk_servers.py") as server:
        conf = tmp_path / "agentd.toml"
        conf.write_text(f'[[mcp_servers]]\nname = "sdk"\nurl = "{server.url}"\n'
                        'required = true\n'
                        'headers = { Authorization = "Bearer {{secret:tok}}" }\n')
        yield ["--instruction", "sample 0: go", "--config", str(conf), "--secrets-dir",
               str(tmp_path / "secrets"), "--intelligence",
               f"playback:{script(tmp_path / 'p.json')}"]


async def test_run_writes_its_trajectory_with_the_subagent(tmp_path, agentd_bin, run_args,
                                                          harbor_validate):
    path = tmp_path / "run.json"
    done = await run_agentd(agentd_bin, [*run_args, "--trajectory", str(path)], env=env())
    assert done.rc == 0, done.stderr[-3000:]
    harbor_validate(path)
    text = path.read_text()
    assert SECRET not in text
    doc = json.loads(text)
    result = json.loads(done.stdout)
    assert doc["session_id"] == result["run_id"] and doc["extra"]["status"] == "completed"
    assert [s["source"] for s in doc["steps"]] == ["user", "agent", "agent"]
    (child,) = doc["subagent_trajectories"]
    assert child["trajectory_id"] == "subagent.1"
    assert child["steps"][1]["tool_calls"][0]["function_name"] == "sdk__echo"
    # the run's own usage is its own steps'; the child's are in its document
    own = doc["final_metrics"]
    assert (own["total_prompt_tokens"], own["total_completion_tokens"]) == (
        result["usage"]["prompt_tokens"], result["usage"]["completion_tokens"])
    assert tokens(doc) == (63, 21)
    assert done.events("trajectory.written")[0]["subagents"] == 1


async def test_a_partial_run_writes_its_trajectory_too(tmp_path, agentd_bin, run_args,
                                                       harbor_validate):
    path = tmp_path / "partial.json"
    done = await run_agentd(agentd_bin, [*run_args, "--max-steps", "1",
                                         "--trajectory", str(path)], env=env())
    assert done.rc == 3, done.stderr[-3000:]
    harbor_validate(path)
    doc = json.loads(path.read_text())
    assert doc["extra"]["status"] == "budget_exhausted"
    assert [s["source"] for s in doc["steps"]] == ["user", "agent"]
    assert doc["steps"][1]["observation"]["results"][0]["source_call_id"] == "e1"


async def test_a_trajectory_file_in_a_missing_directory_is_a_usage_error(tmp_path, agentd_bin,
                                                                         run_args):
    done = await run_agentd(agentd_bin, [*run_args, "--trajectory",
                                         str(tmp_path / "nope" / "t.json")], env=env())
    assert done.rc == 2 and "--trajectory" in done.stderr
