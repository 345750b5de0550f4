"""agentd calls tools on inspect_ai's own bridged MCP server (issue 41).

inspect's `sandbox_agent_bridge(bridged_tools=[BridgedToolsSpec(...)])` serves
a task's host-side Python tool as an MCP server inside the sample's `local`
sandbox (its compiled `model_proxy`, at `http://localhost:<port>/mcp/<name>`),
beside the OpenAI-compatible model endpoint. tests/support/inspect_task.py runs
agentd there as the agent, with `--mcp host=<that URL>` and `--intelligence` at
the bridge, the scripted mockllm proposing `host__add`; these tests read
inspect's JSON eval logs (the host tool's events, the store, the score).

That server follows the harness conventions agentd must take without a
warning: revision 2025-03-26, -32601 (HTTP 200) to `server/discover`, 405 on
GET. The first test serves the tool with inspect's opt-out
(`require_proposal=False`); the second with its default proposal check (a host
tool runs only for a call it matches to a model proposal, by the tool
description the agent declared), which finds the served description behind
agentd's `[UNTRUSTED] ` mark (docs/harnesses.md says when it cannot).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from inspect_peer import inspect_eval  # noqa: F401  (the fixture)

pytestmark = pytest.mark.timeout(2400)  # the first run builds the inspect venv
QUESTION_ARGS = {"a": 17, "b": 25}


@pytest.fixture(scope="module")
def logs(inspect_eval, tmp_path_factory) -> dict[str, dict[str, Any]]:  # noqa: F811
    """Both tasks of inspect_task.py, one eval run: their logs by task name."""
    return inspect_eval("inspect_task.py", tmp_path_factory.mktemp("inspect-logs"))


def _sample(log: dict[str, Any]) -> dict[str, Any]:
    assert log["status"] == "success", log.get("error")
    (sample,) = log["samples"]
    return sample


def _host_tool_events(sample: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in sample["events"]
            if e["event"] == "tool" and e.get("metadata", {}).get("bridge", {}).get("server") == "host"]


def _log_lines(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """agentd's stderr in the sandbox: every line is a JSON log line (no stray text)."""
    return [json.loads(line) for line in sample["store"]["agentd_stderr"].splitlines()]


def _ran_clean(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """agentd completed with no warning or error; else the failure shows its own
    stderr, the host tool's events and the score, not just a missing store key."""
    lines = _log_lines(sample)
    loud = [r for r in lines if r["level"] in ("warning", "error")]
    outcome = (sample["store"].get("agentd", {}).get("status"), loud)
    assert outcome == ("completed", []), (
        f"agentd: {sample['store'].get('agentd')}\nscore: {sample['scores']}\n"
        f"host tool events: {_host_tool_events(sample)}\n"
        f"stderr: {sample['store']['agentd_stderr'][-4000:]}")
    return lines


def test_agentd_calls_a_host_tool_through_inspects_bridged_mcp_server(logs) -> None:
    sample = _sample(logs["proposal_exempt"])
    lines = _ran_clean(sample)
    assert sample["scores"]["includes"]["value"] == "C"
    assert "/mcp/host" in sample["store"]["mcp_url"]
    # the host tool ran once, on the host, with the arguments agentd sent
    assert sample["store"].get("add_calls") == [QUESTION_ARGS], _host_tool_events(sample)
    (event,) = _host_tool_events(sample)
    assert (event["function"], event["arguments"], event["result"]) == ("add", QUESTION_ARGS, "42")
    assert "error" not in event or event["error"] is None
    # inspect's server conventions are taken quietly (_ran_clean: no warning)
    (handshake,) = [r for r in lines if r["event"] == "mcp.handshake"]
    assert (handshake["server"], handshake["protocol_version"]) == ("host", "2025-03-26")
    events = {r["event"]: r for r in lines}
    assert "-32601" in events["mcp.discover.fallback"]["reason"]
    assert events["mcp.stream.not_offered"]["status"] == 405


def test_inspects_default_proposal_check_finds_agentds_description(logs) -> None:
    """With inspect's default check (a host tool runs only for a call the model
    proposed, matched by the description the agent sent), agentd's call goes
    through: its mark stands in front of the server's text, which the check finds
    whole -- for a description of at least 64 characters, inspect's own floor for
    a text with a preamble (docs/harnesses.md)."""
    sample = _sample(logs["proposal_checked"])
    _ran_clean(sample)
    assert sample["store"].get("add_calls") == [QUESTION_ARGS], _host_tool_events(sample)
    (event,) = _host_tool_events(sample)
    assert event["metadata"]["bridge"]["grant"] != "denied"
    assert (event["function"], event["arguments"], event["result"]) == ("add", QUESTION_ARGS, "42")
    assert sample["scores"]["includes"]["value"] == "C"
    declared = next(t["description"] for e in sample["events"] if e["event"] == "model"
                    for t in e["tools"] if t["name"] == "host__add")
    if declared.startswith("attachment://"):  # inspect stores long strings aside
        declared = sample["attachments"][declared.removeprefix("attachment://")]
    assert declared.startswith("[UNTRUSTED] ") and "END UNTRUSTED]" not in declared
