"""The trajectory recorder's own rules, fed as the loop feeds it (sans-IO, an
injected clock): the bound and its marker, arguments that are not a JSON
object, results matched to their calls, subagents nested by handle."""

from __future__ import annotations

import json

from agentd.intelligence.base import Completion, FunctionCall, ToolCall
from agentd.output import Usage
from agentd.trajectory.recorder import ITEM_BYTES, TrajectoryRecorder


def _turn(rec: TrajectoryRecorder, step: int, *calls: tuple[str, str, str]) -> None:
    rec.turn(step, Completion(content="thinking", usage=Usage(5, 2, 7), tool_calls=[
        ToolCall(id=i, function=FunctionCall(name=n, arguments=a)) for i, n, a in calls]))


def test_observations_are_cut_with_a_marker_and_matched_to_their_calls():
    rec = TrajectoryRecorder(session_id="r1", clock=lambda: 0.0)
    rec.prompt("go")
    _turn(rec, 1, ("a", "s__t", '{"x": 1}'), ("b", "s__t", "not json"))
    rec.result(1, "s__t", "é" * ITEM_BYTES, False, 2 * ITEM_BYTES, 1.0, None, call_id="b")
    rec.result(1, "s__t", "", True, 0, 1.0, "refused", call_id="a")
    doc = json.loads(rec.dump())
    step = doc["steps"][1]
    assert step["timestamp"] == "1970-01-01T00:00:00+00:00"
    assert [c["arguments"] for c in step["tool_calls"]] == [{"x": 1}, {}]
    assert step["tool_calls"][1]["extra"] == {"raw_arguments": "not json"}
    cut, note = step["observation"]["results"]
    assert cut["source_call_id"] == "b" and cut["content"].endswith(
        f"[agentd] trajectory: cut at {ITEM_BYTES} of {2 * ITEM_BYTES} bytes")
    assert len(cut["content"].encode()) < ITEM_BYTES + 100
    assert note == {"source_call_id": "a", "content": "[agentd] refused",
                    "extra": {"is_error": True, "agentd_note": True}}
    assert doc["final_metrics"] == {"total_prompt_tokens": 5, "total_completion_tokens": 2,
                                    "total_steps": 1}


def test_subagents_nest_under_their_parents_by_handle():
    def child(text: str) -> TrajectoryRecorder:
        r = TrajectoryRecorder(clock=lambda: 0.0)
        r.prompt(text)
        return r

    rec = TrajectoryRecorder(clock=lambda: 0.0)
    rec.prompt("root")
    _turn(rec, 1, ("s", "agentd__subagent_spawn", '{"instruction": "a"}'))
    rec.result(1, "agentd__subagent_spawn", '{"handle": "0.2", "status": "completed"}', False,
               10, 1.0, None, call_id="s")
    rec.subagents.update({"0.10": child("ten").snapshot(), "0.2": child("two").snapshot(),
                          "0.2.1": child("two.one").snapshot()})
    doc = json.loads(rec.dump())
    subs = doc["subagent_trajectories"]
    assert [s["trajectory_id"] for s in subs] == ["subagent.2", "subagent.10"]
    assert subs[0]["subagent_trajectories"][0]["trajectory_id"] == "subagent.2.1"
    assert doc["steps"][1]["observation"]["results"][0]["subagent_trajectory_ref"] == [
        {"trajectory_id": "subagent.2"}]
