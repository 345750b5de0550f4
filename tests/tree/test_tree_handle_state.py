"""A handle's state reads the same wherever it is asked: in the root, over the
self-MCP, and inside a subagent over its control wire (`tree/*`)."""

from __future__ import annotations

import json

import pytest
from tree_helpers import make_config, precompile

from agentd.agent.subagents import SpawnRequest
from agentd.app.compose import open_supervisor

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


NESTED_WARM = {"playback": 1, "scripts": [
    {"name": "outer", "match": "talk to your session",
     "turns": [
         {"tool_calls": [{"name": "agentd__subagent_spawn",
                          "arguments": {"instruction": "inner session", "warm": True}}]},
         {"tool_calls": [{"name": "agentd__subagent_send",
                          "arguments": {"handle": "0.1.1", "message": "and again"}}]},
         {"expect": "inner answer two", "content": "{\"relayed\": true}"}]},
    {"name": "inner", "match": "inner session",
     "turns": [{"content": "inner answer one"}, {"content": "inner answer two"}]},
]}


async def test_a_subagents_send_to_its_warm_session_carries_the_turns_result(tmp_path):
    """The same handle state on the control wire as in the root: a child's
    `subagent.send` answer (running, with the turn's result) keeps that result."""
    script = tmp_path / "nested.json"
    script.write_text(json.dumps(NESTED_WARM))
    cfg = make_config(tmp_path, intelligence=f"playback:{script}")
    async with open_supervisor(cfg) as sup:
        st = await sup.spawn("0", SpawnRequest("talk to your session"))
        assert st.status == "completed", st.result
        assert st.result == '{"relayed": true}'
