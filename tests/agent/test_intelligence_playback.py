"""The playback provider: format, choice by instruction, turns in order."""

from __future__ import annotations

import json

import pytest

from agentd.errors import ConfigError
from agentd.intelligence import make_intelligence
from agentd.intelligence.base import IntelligenceUnavailable, assistant, tool_result, user


def write(tmp_path, data) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(data))
    return f"playback:{path}"


SCRIPTS = {"playback": 1, "scripts": [
    {"name": "child", "match": "[child]", "turns": [{"content": "child answer"}]},
    {"name": "re", "match_regex": r"^count \d+$", "turns": [{"content": "counted"}]},
    {"name": "root", "turns": [
        {"tool_calls": [{"name": "a__x", "arguments": {"n": 1}},
                        {"name": "a__y", "arguments": {}, "id": "mine"}],
         "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
        {"expect": ["first", "second"], "content": "root done"}]},
]}


async def test_scripts_chosen_by_instruction_and_turns_in_order(tmp_path) -> None:
    p = make_intelligence(write(tmp_path, SCRIPTS))
    c = await p.complete([user("[child] summarise")], [])
    assert c.content == "child answer" and not c.tool_calls and c.finish_reason == "stop"
    assert (await p.complete([user("count 12")], [])).content == "counted"
    conv = [user("anything else")]
    c1 = await p.complete(conv, [])
    assert [(t.id, t.function.name, json.loads(t.function.arguments)) for t in c1.tool_calls] \
        == [("call_1_1", "a__x", {"n": 1}), ("mine", "a__y", {})]
    assert c1.usage.total_tokens == 7
    conv += [c1.message(), tool_result("call_1_1", "first"), tool_result("mine", "second")]
    c2 = await p.complete(conv, [])
    assert c2.content == "root done" and c2.usage.total_tokens == 0


async def test_expect_checks_what_the_model_was_shown(tmp_path) -> None:
    p = make_intelligence(write(tmp_path, SCRIPTS))
    conv = [user("root"), assistant("..."), tool_result("x", "only first")]
    with pytest.raises(IntelligenceUnavailable, match="expected 'second'"):
        await p.complete(conv, [])


async def test_out_of_turns_and_repeat_last(tmp_path) -> None:
    p = make_intelligence(write(tmp_path, {"turns": [{"content": "one"}]}))
    with pytest.raises(IntelligenceUnavailable, match="has no turn 2"):
        await p.complete([user("x"), assistant("one")], [])
    p = make_intelligence(write(tmp_path, {"repeat_last": True, "turns": [
        {"tool_calls": [{"name": "a__b"}]}]}))
    c = await p.complete([user("x"), assistant("1"), assistant("2")], [])
    assert c.tool_calls[0].id == "call_3_1"  # ids stay unique when a turn repeats


async def test_fail_and_no_match(tmp_path) -> None:
    p = make_intelligence(write(tmp_path, {"scripts": [
        {"match": "boom", "turns": [{"fail": "scripted outage"}]}]}))
    with pytest.raises(IntelligenceUnavailable, match="scripted outage"):
        await p.complete([user("boom")], [])
    with pytest.raises(IntelligenceUnavailable, match="no script matches"):
        await p.complete([user("other")], [])


@pytest.mark.parametrize("data", [
    {"playback": 2, "turns": [{"content": "x"}]},
    {"scripts": []},
    {"turns": [{}]},
    {"turns": [{"content": "x", "bogus": 1}]},
    {"scripts": [{"match_regex": "(", "turns": [{"content": "x"}]}]},
    "not an object",
])
def test_malformed_files_are_config_errors(tmp_path, data) -> None:
    with pytest.raises(ConfigError, match="playback:"):
        make_intelligence(write(tmp_path, data))


def test_invalid_json_is_a_config_error(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{")
    with pytest.raises(ConfigError):
        make_intelligence(f"playback:{path}")
