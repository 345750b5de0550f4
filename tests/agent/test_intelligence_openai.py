"""The OpenAI-compatible provider against a real HTTP gateway (tests/support/gateway.py)."""

from __future__ import annotations

import io
import json

import pytest
from gateway import Gateway, Reply
from peers import free_port

from agentd import log as logmod
from agentd.errors import ConfigError
from agentd.intelligence import make_intelligence
from agentd.intelligence.base import (
    FunctionDef,
    IntelligenceUnavailable,
    ToolDef,
    system,
    tool_result,
    user,
)
from agentd.intelligence.openai import OpenAICompatible, parse_retry_after

TOOLS = [ToolDef(function=FunctionDef(
    name="srv__echo", description="Echo.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}},
                "required": ["text"]}))]
MESSAGES = [system("sys"), user("do it")]
EXPECTED_TOOLS = [{"type": "function", "function": {
    "name": "srv__echo", "description": "Echo.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                   "required": ["text"]}}}]


def provider(gw: Gateway, **kw) -> OpenAICompatible:
    kw.setdefault("backoff", 0.01)
    return OpenAICompatible(gw.url, model="test-model", **kw)


async def test_non_streaming_request_and_answer() -> None:
    async with Gateway([Reply.tools(("srv__echo", {"text": "a"}, "c1"),
                                    ("srv__echo", {"text": "b"}, "c2"),
                                    usage={"prompt_tokens": 7, "completion_tokens": 3})]) as gw:
        async with provider(gw) as p:
            c = await p.complete(MESSAGES, TOOLS)
    assert gw.bodies == [{
        "model": "test-model",
        "messages": [{"role": "system", "content": "sys"},
                     {"role": "user", "content": "do it"}],
        "tools": EXPECTED_TOOLS}]
    assert [(t.id, t.function.name, json.loads(t.function.arguments)) for t in c.tool_calls] \
        == [("c1", "srv__echo", {"text": "a"}), ("c2", "srv__echo", {"text": "b"})]
    assert (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens) == (7, 3, 10)
    assert c.finish_reason == "tool_calls"
    # the assistant message goes back as the wire wants it
    msg = c.message()
    assert msg.role == "assistant" and msg.content is None and len(msg.tool_calls) == 2


async def test_tool_results_carry_tool_call_id_and_no_tools_key_when_none() -> None:
    async with Gateway([Reply.text("ok")]) as gw:
        async with provider(gw) as p:
            await p.complete([user("x"), tool_result("c1", "result text")], [])
    assert gw.bodies[0] == {"model": "test-model", "messages": [
        {"role": "user", "content": "x"},
        {"role": "tool", "tool_call_id": "c1", "content": "result text"}]}


async def test_streaming_is_reassembled() -> None:
    async with Gateway([Reply.tools(("srv__echo", {"text": "a long argument"}, "c1"),
                                    ("srv__echo", {"text": "second"}, "c2"),
                                    content="thinking out loud",
                                    usage={"prompt_tokens": 11, "completion_tokens": 4})]) as gw:
        async with provider(gw, stream=True) as p:
            c = await p.complete(MESSAGES, TOOLS)
    body = gw.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert gw.headers[0]["Accept"] == "text/event-stream"
    assert c.content == "thinking out loud"
    assert [(t.id, json.loads(t.function.arguments)) for t in c.tool_calls] == [
        ("c1", {"text": "a long argument"}), ("c2", {"text": "second"})]
    assert c.usage.total_tokens == 15 and c.finish_reason == "tool_calls"


async def test_stream_cut_midway_is_retried_whole() -> None:
    async with Gateway([Reply(cut=True), Reply.text("whole answer")]) as gw:
        async with provider(gw, stream=True) as p:
            c = await p.complete(MESSAGES, TOOLS)
    assert c.content == "whole answer" and len(gw.bodies) == 2


async def test_retries_5xx_and_429_honouring_retry_after() -> None:
    async with Gateway([Reply.error(503, retry_after="0"), Reply.error(429, retry_after="0"),
                        Reply(drop=True), Reply.text("finally")]) as gw:
        async with provider(gw, attempts=5) as p:
            c = await p.complete(MESSAGES, TOOLS)
    assert c.content == "finally"
    assert len(gw.bodies) == 4
    assert all(b == gw.bodies[0] for b in gw.bodies)  # the same request each time


async def test_client_error_is_not_retried() -> None:
    async with Gateway([Reply.error(401), Reply.text("never")]) as gw:
        async with provider(gw) as p:
            with pytest.raises(IntelligenceUnavailable, match="HTTP 401"):
                await p.complete(MESSAGES, TOOLS)
    assert len(gw.bodies) == 1


async def test_keeps_failing_is_unavailable() -> None:
    async with Gateway([Reply.error(500)] * 3) as gw:
        async with provider(gw, attempts=3) as p:
            with pytest.raises(IntelligenceUnavailable, match="after 3 attempts: HTTP 500"):
                await p.complete(MESSAGES, TOOLS)
    assert len(gw.bodies) == 3


async def test_unreachable_is_unavailable() -> None:
    p = OpenAICompatible(f"http://127.0.0.1:{free_port()}/v1", attempts=2, backoff=0.01)
    async with p:
        with pytest.raises(IntelligenceUnavailable, match="after 2 attempts"):
            await p.complete(MESSAGES, TOOLS)


async def test_request_timeout_is_retried_then_unavailable() -> None:
    async with Gateway([Reply(hang=30), Reply(hang=30)]) as gw:
        async with provider(gw, attempts=2, timeout=0.2) as p:
            with pytest.raises(IntelligenceUnavailable, match="timed out"):
                await p.complete(MESSAGES, TOOLS)
    assert len(gw.bodies) == 2


async def test_malformed_answer_is_retried() -> None:
    async with Gateway([Reply(raw=b"{not json"), Reply.text("good")]) as gw:
        async with provider(gw) as p:
            assert (await p.complete(MESSAGES, TOOLS)).content == "good"


async def test_bearer_from_env_sent_and_never_logged(monkeypatch) -> None:
    secret = "sk-test-secret-value-123"
    monkeypatch.setenv("AGENTD_INTELLIGENCE_KEY", secret)
    sink = io.StringIO()
    logmod.configure(stream=sink)
    try:
        async with Gateway([Reply.error(503, retry_after="0"), Reply.text("ok")]) as gw:
            async with provider(gw) as p:
                await p.complete(MESSAGES, TOOLS)
            logmod.log.info("probe", value=f"key is {secret}")
    finally:
        import sys

        logmod.configure(stream=sys.stderr)
    assert gw.headers[0]["Authorization"] == f"Bearer {secret}"
    logged = sink.getvalue()
    assert "intelligence.retry" in logged
    assert secret not in logged


def test_retry_after_parsing() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0 ") == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_make_intelligence_specs(tmp_path) -> None:
    assert make_intelligence("https://gw.example/v1", model="m").name == "openai"
    assert make_intelligence("http://127.0.0.1:9/v1").name == "openai"
    for bad in ("http://gw.example/v1", "ftp://x", "", None, "playback:",
                f"playback:{tmp_path}/missing.json"):
        with pytest.raises(ConfigError):
            make_intelligence(bad)
