"""`agentd acp` driven the way harnesses drive it, by their own code:

* the TypeScript ACP SDK (`@agentclientprotocol/sdk`, tests/ts_peers/acp_client.mjs)
  sending Harbor's sequence (initialize, session/new with `cwd` and an http MCP
  server with `headers: []`, session/set_config_option for the model,
  session/prompt) to a real `agentd acp` child, its updates asserted in order;
* Harbor's own ACP runner (`harbor/agents/installed/acp_runner.py` of the
  Harbor venv, tests/support/harbor_peer.py), run as Harbor runs it inside a task
  environment: a copy of the file, `--instruction`, `--logs-dir`, `--launcher`
  and its `ACP_RUNNER_*` environment -- here on this machine, without the
  container Harbor would start it in (docs/harnesses.md says why only this half).

Both sessions write their trajectory (`agentd acp --trajectories DIR`), which
Harbor's own `Trajectory` model must accept.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from agentd_proc import agentd_env
from harbor_peer import VENV, harbor_validate  # noqa: F401  (the fixture)
from peers import NPM_BIN, TESTS, ensure_npm_peers, npm_env, python_peer, unavailable

TS_CLIENT = TESTS / "ts_peers" / "acp_client.mjs"
ECHO = {"name": "sdk__echo", "arguments": {"text": "harbor-ping"}, "id": "call-1"}
SCRIPT = {"playback": 1, "scripts": [{"turns": [
    {"content": "checking", "tool_calls": [ECHO]},
    {"expect": "harbor-ping", "content": "the tool said harbor-ping"}]}]}


@pytest.fixture(scope="module")
def sdk() -> Any:
    with python_peer("sdk_servers.py") as peer:
        yield peer


def playback(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return f"playback:{path}"


def acp_sdk_modules() -> Path:
    """The npm peers' node_modules holding the ACP SDK (`npm ci --prefix tests/peers`)."""
    ensure_npm_peers("node")
    nm = Path(os.environ.get("MCP_PEERS_NODE_MODULES", NPM_BIN.parent))
    if not (nm / "@agentclientprotocol" / "sdk" / "package.json").exists():
        unavailable(f"@agentclientprotocol/sdk is not under {nm}: run "
                    "`npm ci --prefix tests/peers` (tests/peers/package-lock.json)")
    return nm


def check_trajectory(directory: Path, sid: str, validate: Any) -> dict:
    path = directory / f"{sid}.json"
    assert validate(path).startswith("valid")
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == "ATIF-v1.8" and doc["session_id"] == sid
    assert [s["source"] for s in doc["steps"]] == ["user", "agent", "agent"]
    call = doc["steps"][1]["tool_calls"][0]
    assert (call["tool_call_id"], call["function_name"], call["arguments"]) == (
        "call-1", "sdk__echo", {"text": "harbor-ping"})
    result = doc["steps"][1]["observation"]["results"][0]
    assert result["source_call_id"] == "call-1" and "harbor-ping" in result["content"]
    assert doc["steps"][2]["message"] == "the tool said harbor-ping"
    assert doc["extra"]["status"] == "completed"
    return doc


async def test_ts_sdk_client_sends_harbors_sequence(agentd_bin, sdk, tmp_path,
                                                    harbor_validate) -> None:  # noqa: F811
    nm = acp_sdk_modules()
    out_dir = tmp_path / "trajectories"
    proc = await asyncio.create_subprocess_exec(
        str(NPM_BIN / "node"), str(TS_CLIENT), str(tmp_path), sdk.url, "chosen-model",
        "call the tool", "--", agentd_bin, "acp", "--intelligence", playback(tmp_path),
        "--trajectories", str(out_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=npm_env({**agentd_env(), "MCP_PEERS_NODE_MODULES": str(nm)}))
    async with asyncio.timeout(180):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-3000:]
    got = json.loads(out.decode().strip().splitlines()[-1])
    assert got["init"]["protocolVersion"] == 1 and got["init"]["agentInfo"]["name"] == "agentd"
    assert got["session"]["configOptions"][0]["currentValue"] == "test-model"
    assert got["setModel"]["configOptions"][0]["currentValue"] == "chosen-model"
    updates = got["updates"]
    assert [(u["sessionUpdate"], u.get("status")) for u in updates] == [
        ("agent_message_chunk", None), ("tool_call", "pending"),
        ("tool_call_update", "in_progress"), ("tool_call_update", "completed"),
        ("agent_message_chunk", None)]
    assert updates[1]["toolCallId"] == "call-1" and updates[1]["rawInput"] == {
        "text": "harbor-ping"}
    assert "harbor-ping" in updates[3]["content"][0]["content"]["text"]
    assert updates[4]["content"]["text"] == "the tool said harbor-ping"
    assert got["stop"]["stopReason"] == "end_turn" and got["exitCode"] == 0
    sid = got["session"]["sessionId"]
    doc = check_trajectory(out_dir, sid, harbor_validate)
    assert doc["agent"]["model_name"] == "chosen-model"  # the client's choice, recorded
    assert b"Traceback" not in err


def harbor_runner(tmp_path: Path) -> Path:
    """A copy of Harbor's runner, alone in its directory as Harbor uploads it (beside
    Harbor's own `acp.py` it would import that instead of the ACP SDK)."""
    found = sorted(VENV.glob("lib/python3.*/site-packages/harbor/agents/installed/"
                             "acp_runner.py"))
    if not found:
        unavailable(f"Harbor's acp_runner.py is not in {VENV}")
    runner = tmp_path / "runner" / "acp_runner.py"
    runner.parent.mkdir()
    shutil.copy(found[-1], runner)
    return runner


async def test_harbors_acp_runner_drives_agentd(agentd_bin, sdk, tmp_path,
                                                harbor_validate) -> None:  # noqa: F811
    runner = harbor_runner(tmp_path)
    out_dir, logs, work = tmp_path / "trajectories", tmp_path / "logs", tmp_path / "work"
    work.mkdir()
    launcher = tmp_path / "launch-agentd"
    argv = " ".join(json.dumps(a) for a in (agentd_bin, "acp", "--intelligence",
                                             playback(tmp_path), "--model", "test-model",
                                             "--trajectories", str(out_dir)))
    launcher.write_text(f"#!/bin/sh\nexec {argv} 2>>{tmp_path / 'agentd.log'}\n")
    launcher.chmod(0o755)
    env = agentd_env(
        ACP_RUNNER_MCP_SERVERS_JSON=json.dumps([{"name": "sdk", "type": "http",
                                                 "url": sdk.url, "headers": []}]),
        ACP_RUNNER_REQUESTED_MODEL="openai/test-model", ACP_RUNNER_AGENT_ID="agentd",
        ACP_RUNNER_PERMISSION_MODE="allow", ACP_RUNNER_AUTH_POLICY="auto")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(runner), "--instruction", "call the tool",
        f"--logs-dir={logs}", f"--launcher={launcher}", cwd=work, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    async with asyncio.timeout(180):
        out, _ = await proc.communicate()
    summary = json.loads((logs / "acp-summary.json").read_text())
    assert proc.returncode == 0, (summary.get("error"), out.decode()[-2000:])
    assert summary["agent_info"]["name"] == "agentd"
    assert summary["set_model_mechanism"] == "session_config_option"
    assert summary["set_model_candidates"] == ["test-model"]  # the providerless match
    assert "set_model_error" not in summary
    assert summary["prompt_response"]["stopReason"] == "end_turn"
    events = [json.loads(line) for line in (logs / "acp-events.jsonl").read_text().splitlines()]
    tags = [e["payload"]["update"]["sessionUpdate"] for e in events
            if e["event_type"] == "session_update"]
    assert tags == ["agent_message_chunk", "tool_call", "tool_call_update",
                    "tool_call_update", "agent_message_chunk"]
    check_trajectory(out_dir, summary["session"]["sessionId"], harbor_validate)


async def test_trajectories_dir_that_cannot_be_made_is_exit_2(agentd_bin, tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = await asyncio.create_subprocess_exec(
        agentd_bin, "acp", "--intelligence", playback(tmp_path), "--trajectories",
        str(blocker / "sub"), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=agentd_env())
    out, err = await proc.communicate()
    assert proc.returncode == 2 and out == b""
    assert f"--trajectories {blocker / 'sub'}" in err.decode() and b"Traceback" not in err
