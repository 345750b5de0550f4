"""`graph.run`: a DAG of spawn specs through the chokepoint; cycles refused as isError."""

from __future__ import annotations

import pytest
from tree_helpers import make_config, precompile

from agentd.agent.graph import install, order, run_graph
from agentd.agent.selftools import SelfTools
from agentd.agent.subagents import Refusal
from agentd.app.compose import open_supervisor


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


def test_order_and_refusals():
    nodes = [{"id": "d", "instruction": "x", "after": ["b", "c"]},
             {"id": "b", "instruction": "x", "after": ["a"]},
             {"id": "c", "instruction": "x", "after": ["a"]},
             {"id": "a", "instruction": "x"}]
    got = order(nodes)
    assert not isinstance(got, Refusal)
    assert got.index("a") < got.index("b") < got.index("d") and got.index("c") < got.index("d")
    assert order([{"id": "a", "instruction": "x", "after": ["b"]},
                  {"id": "b", "instruction": "x", "after": ["a"]}]) == Refusal(
        "graph.run: cycle refused: a -> b -> a")
    assert order([{"id": "a", "instruction": "x", "after": ["zz"]}]) == Refusal(
        "graph.run: node 'a' comes after unknown node 'zz'")
    assert order([{"id": "a", "instruction": "x"}, {"id": "a", "instruction": "y"}]) == Refusal(
        "graph.run: duplicate node id 'a'")
    assert order([]) == Refusal("graph.run: 'nodes' must be a non-empty array")


@pytest.mark.timeout(120)
async def test_diamond_feeds_distillates(tmp_path):
    async with open_supervisor(make_config(tmp_path, spawn="forkserver")) as sup:
        out = await run_graph(sup, "0", [
            {"id": "a", "instruction": "first"},
            {"id": "b", "instruction": "second", "after": ["a"]},
            {"id": "c", "instruction": "third", "after": ["a"]},
            {"id": "d", "instruction": "combine them", "after": ["b", "c"]},
        ])
        assert out["status"] == "completed", out
        assert out["nodes"]["d"]["result"] == '{"combined": true}'
        assert {n["handle"] for n in out["nodes"].values()} == {"0.1", "0.2", "0.3", "0.4"}


@pytest.mark.timeout(120)
async def test_self_tool_cycle_is_error_and_refusal_is_reported(tmp_path):
    async with open_supervisor(make_config(tmp_path, spawn="forkserver", max_children=1)) as sup:
        tools = SelfTools(backend=sup, caller="0")
        install(tools, sup, "0")
        assert "agentd__graph_run" in tools
        obs = await tools.call("agentd__graph_run", {"nodes": [
            {"id": "a", "instruction": "x", "after": ["a"]}]})
        assert obs.is_error and "cycle refused: a -> a" in obs.text
        assert sup.counts()["spawned"] == 0
        obs = await tools.call("agentd__graph_run", {"nodes": [
            {"id": "a", "instruction": "x", "after": ["b"]},
            {"id": "b", "instruction": "y"}]})
        assert not obs.is_error
        assert obs.structured["status"] == "completed"
