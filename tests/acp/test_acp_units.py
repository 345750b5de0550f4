"""The sans-IO parts of `agentd acp`: the bounded line framer, the repair of a
cancelled conversation, and the harness env fallbacks of the model config."""

from __future__ import annotations

from agentd.acp.agent import CANCELLED_NOTE, answered
from agentd.acp.framing import LineFramer, Oversized
from agentd.cli.flags import config_from_flags
from agentd.intelligence.base import FunctionCall, Message, ToolCall, tool_result, user


def test_framer_cuts_lines_across_chunks_and_drops_an_oversized_one() -> None:
    f = LineFramer(max_line=8)
    assert f.feed(b'{"a"') == []
    assert f.pending()
    assert f.feed(b":1}\r\n\n") == [b'{"a":1}']
    assert f.feed(b"x" * 5) == []
    assert f.feed(b"y" * 5) == []  # over the bound now: dropped as it arrives
    assert f.feed(b"zz\nok\n") == [Oversized(12), b"ok"]
    assert not f.pending()


def test_an_unanswered_tool_call_gets_a_cancelled_result() -> None:
    calls = [ToolCall("c1", FunctionCall("t", "{}")), ToolCall("c2", FunctionCall("t", "{}"))]
    msgs = [user("go"), Message(role="assistant", tool_calls=calls), tool_result("c1", "ok")]
    fixed = answered(msgs)
    assert [(m.role, m.tool_call_id, m.content) for m in fixed[2:]] == [
        ("tool", "c1", "ok"), ("tool", "c2", CANCELLED_NOTE)]
    assert answered(fixed) == fixed  # an answered conversation is left as it is


def test_openai_base_url_is_the_intelligence_fallback(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "https://gw.example/v1")
    assert config_from_flags({}, needs_instruction=False).intelligence == "https://gw.example/v1"
    flagged = config_from_flags({"intelligence": "playback:x"}, needs_instruction=False)
    assert flagged.intelligence == "playback:x"  # the flag wins
