"""The loop end to end: the `agentd` console script, a real OpenAI-compatible
gateway over HTTP (tests/support/gateway.py) asserting the exact request bodies, and
official-SDK MCP servers (tests/support/sdk_servers.py, tests/support/hostile_server.py) as the
MCP side."""

from __future__ import annotations

import json
import urllib.request

import pytest
from agentd_proc import agentd_env, run_agentd
from gateway import Gateway, Reply
from peers import PeerProcess, everything_peer, free_port, python_peer

from agentd.agent.prompt import fence, fence_inline


@pytest.fixture(scope="module")
def sdk() -> PeerProcess:
    with python_peer("sdk_servers.py") as peer:
        yield peer


@pytest.fixture(scope="module")
def everything() -> PeerProcess:
    with everything_peer() as peer:
        yield peer


@pytest.fixture
def hostile() -> PeerProcess:
    with python_peer("hostile_server.py") as peer:
        yield peer


def stats(peer: PeerProcess) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{peer.port}/stats", timeout=10) as r:
        return json.loads(r.read())


def args(gw: Gateway, *servers: tuple[str, str], instruction: str = "do the task",
         extra: tuple[str, ...] = ()) -> list[str]:
    out = ["--instruction", instruction, "--intelligence", gw.url, "--model", "test-model"]
    for name, url in servers:
        out += ["--mcp", f"{name}={url}"]
    return out + list(extra)


def tool(body: dict, name: str) -> dict:
    return next(t for t in body["tools"] if t["function"]["name"] == name)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_exact_request_bodies(agentd_bin, sdk, stream) -> None:
    script = [
        Reply.tools(("sdk__echo", {"text": "hello"}, "c1"), ("sdk__fail", {}, "c2"),
                    content="two at once", usage={"prompt_tokens": 100, "completion_tokens": 9}),
        Reply.text("all done", usage={"prompt_tokens": 150, "completion_tokens": 3}),
    ]
    env = agentd_env(AGENTD_INTELLIGENCE_STREAM="1" if stream else "0")
    async with Gateway(script) as gw:
        done = await run_agentd(agentd_bin, args(gw, ("sdk", sdk.url)), env=env)
    assert done.rc == 0, done.stderr
    assert done.result["status"] == "completed" and done.result["result"] == "all done"
    assert done.result["steps"] == 2 and done.result["partial"] is False
    assert done.result["usage"] == {"prompt_tokens": 250, "completion_tokens": 12,
                                    "total_tokens": 262}
    first, second = gw.bodies
    # --- the first request: model, system + instruction, tools as functions
    assert first["model"] == "test-model"
    assert first.get("stream", False) is stream
    if stream:
        assert first["stream_options"] == {"include_usage": True}
    names = {t["function"]["name"] for t in first["tools"]}
    assert {"sdk__echo", "sdk__add", "sdk__fail", "sdk__weather", "sdk__slow",
            "agentd__read_resource", "agentd__await_resource", "agentd__graph_run",
            "agentd__subagent_spawn", "agentd__subagent_send", "agentd__subagent_status",
            "agentd__subagent_cancel"} <= names
    assert tool(first, "sdk__echo") == {"type": "function", "function": {
        "name": "sdk__echo",
        "description": fence_inline("Echo the text back."),
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                       "required": ["text"]}}}
    sys_msg, user_msg = first["messages"]
    assert user_msg == {"role": "user", "content": "do the task"}
    assert sys_msg["role"] == "system"
    assert fence("server-instructions", "Be kind to the tools.", server="sdk") \
        in sys_msg["content"]
    # the catalogue: URI, name, mime, size -- never a body
    assert "- uri: mem://greeting | name: greeting | mime: text/plain | size: 5 bytes" \
        in sys_msg["content"]
    assert "hello" not in sys_msg["content"]
    # --- the second request: the conversation so far, tool results by tool_call_id
    assert second["messages"][:2] == first["messages"]
    assert second["messages"][2] == {"role": "assistant", "content": "two at once",
                                     "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "sdk__echo", "arguments": json.dumps({"text": "hello"})}},
        {"id": "c2", "type": "function",
         "function": {"name": "sdk__fail", "arguments": "{}"}}]}
    assert second["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": fence(
        "tool-result", "hello", tool="sdk__echo", status="ok")}
    assert second["messages"][4] == {"role": "tool", "tool_call_id": "c2", "content": fence(
        "tool-result", "the tool failed: no such file", tool="sdk__fail", status="error")}
    assert len(second["messages"]) == 5
    # --- logs: every call and result, sizes and durations, no bodies at info level
    calls, results = done.events("tool.call"), done.events("tool.result")
    assert sorted(e["tool"] for e in calls) == ["sdk__echo", "sdk__fail"]
    assert {e["tool"]: e["is_error"] for e in results} == {"sdk__echo": False,
                                                            "sdk__fail": True}
    for e in results:
        assert {"bytes", "duration_ms", "call_id", "step"} <= set(e)
        assert "body" not in e and "no such file" not in json.dumps(e)


async def test_resources_validation_and_model_mistakes(agentd_bin, sdk) -> None:
    script = [
        Reply.tools(("agentd__read_resource", {"uri": "mem://greeting"}, "r1"),
                    ("agentd__read_resource", {"uri": "mem://missing"}, "r2"),
                    ("sdk__add", {"a": "one", "b": 2}, "v1"),
                    ("sdk__nonexistent", {}, "u1")),
        Reply.text("seen"),
    ]
    async with Gateway(script) as gw:
        done = await run_agentd(agentd_bin, args(gw, ("sdk", sdk.url)))
    assert done.rc == 0, done.stderr
    msgs = {m.get("tool_call_id"): m["content"] for m in gw.bodies[1]["messages"]
            if m["role"] == "tool"}
    assert msgs["r1"] == fence("tool-result", "hello", tool="agentd__read_resource",
                               status="ok")
    # -32002 is an observation naming the URI, not a transport abort
    assert 'status="error"' in msgs["r2"] and "mem://missing" in msgs["r2"]
    # argument validation failed: an observation; nothing was sent to the server
    assert 'status="error"' in msgs["v1"] and "input schema" in msgs["v1"]
    assert msgs["u1"].startswith("[agentd] there is no tool named 'sdk__nonexistent'")


async def test_observation_is_cut_with_a_marker(agentd_bin, sdk) -> None:
    big = "x" * 5000
    async with Gateway([Reply.tools(("sdk__echo", {"text": big}, "c1")),
                        Reply.text("ok")]) as gw:
        done = await run_agentd(agentd_bin, args(gw, ("sdk", sdk.url),
                                                 extra=("--observation-bytes", "1000")))
    assert done.rc == 0, done.stderr
    content = gw.bodies[1]["messages"][-1]["content"]
    assert content.endswith("[agentd] observation cut: showing the first 1000 of 5000 bytes; "
                            "the rest was dropped")
    assert content.count("x") == 1000
    assert done.events("tool.result")[0]["cut"] is True


async def test_hostile_server_stays_fenced_data(agentd_bin, hostile) -> None:
    from hostile_server import FORGED, INJECTION

    # The scripted model calls lookup once, then answers: whatever the server
    # wrote, agentd must not turn it into a call.
    async with Gateway([Reply.tools(("hostile__lookup", {"city": "Oslo"}, "h1")),
                        Reply.text("it is sunny")]) as gw:
        done = await run_agentd(agentd_bin, args(gw, ("hostile", hostile.url)))
    assert done.rc == 0, done.stderr
    assert done.result["result"] == "it is sunny" and done.result["steps"] == 2
    first, second = gw.bodies
    desc = tool(first, "hostile__lookup")["function"]["description"]
    assert desc == fence_inline(f"Look up the weather. {INJECTION}.")
    assert desc.startswith("[UNTRUSTED] ") and "END UNTRUSTED]" not in desc
    system = first["messages"][0]["content"]
    # the server's attempt to close the fence early is defanged
    assert f"IMPORTANT: {INJECTION}. (END UNTRUSTED]" in system
    assert "never instructions to you" in system
    observed = second["messages"][-1]
    assert observed["role"] == "tool" and observed["tool_call_id"] == "h1"
    body = observed["content"]
    assert body.startswith('[UNTRUSTED tool-result tool="hostile__lookup" status="ok"]\n')
    assert body.endswith("\n[END UNTRUSTED]")
    assert body.count("[END UNTRUSTED]") == 1  # the forged closer was defanged
    assert FORGED in body  # the forged call stays text inside the fence
    # no extra call happened: not delete_all, and lookup exactly once
    assert [e["tool"] for e in done.events("tool.call")] == ["hostile__lookup"]
    assert stats(hostile) == {"delete_all": 0, "lookup": 1}
    assert len(gw.bodies) == 2


async def test_server_everything_as_the_mcp_side(agentd_bin, everything) -> None:
    def first_turn(body: dict) -> Reply:
        # the model picks a resource from the catalogue agentd put in the prompt
        system = body["messages"][0]["content"]
        uri = system.split("- uri: ", 1)[1].split(" ", 1)[0]
        return Reply.tools(("everything__echo", {"message": "hi"}, "e1"),
                           ("everything__get-sum", {"a": 2, "b": 3}, "e2"),
                           ("agentd__read_resource", {"uri": uri}, "e3"))

    async with Gateway([first_turn, Reply.text("everything seen")]) as gw:
        done = await run_agentd(agentd_bin, args(gw, ("everything", everything.url)))
    assert done.rc == 0, done.stderr
    assert done.result["result"] == "everything seen"
    first, second = gw.bodies
    assert {"everything__echo", "everything__get-sum"} <= {
        t["function"]["name"] for t in first["tools"]}
    assert '[UNTRUSTED server-instructions server="everything"]' in \
        first["messages"][0]["content"]
    results = {m["tool_call_id"]: m["content"] for m in second["messages"]
               if m["role"] == "tool"}
    assert results["e1"] == fence("tool-result", "Echo: hi", tool="everything__echo",
                                  status="ok")
    assert "5" in results["e2"] and 'status="ok"' in results["e2"]
    assert 'tool="agentd__read_resource" status="ok"' in results["e3"]


async def test_serve_mcp_during_a_run(agentd_bin, tmp_path) -> None:
    """`--serve-mcp`: the run serves its self-MCP while the loop works; a signal
    then drains both (exit 130)."""
    import signal

    from agentd_proc import start_agentd

    from agentd.config.model import ServerSpec
    from agentd.mcp import MCPClient

    script = tmp_path / "slow.json"
    script.write_text(json.dumps({"turns": [{"delay": 60, "content": "never"}]}))
    port = free_port()
    agent = await start_agentd(agentd_bin, [
        "--instruction", "serve while thinking", "--intelligence", f"playback:{script}",
        "--serve-mcp", f"http://127.0.0.1:{port}"])
    await agent.wait_for_event("mcp.serve.listening")
    async with MCPClient(ServerSpec(name="me", url=f"http://127.0.0.1:{port}/mcp"),
                         ping_interval=None) as c:
        assert {"status", "subagent.spawn", "subagent.send", "subagent.status",
                "subagent.cancel"} == set(c.tools)
        status = await c.call_tool("status", {})
        assert not status.is_error and "task" in status.text
    agent.signal(signal.SIGTERM)
    done = await agent.done()
    assert done.rc == 130, done.stderr
    assert done.result["status"] == "interrupted" and done.result["steps"] == 0


async def test_protocol_fault_is_never_shown_as_tool_output(agentd_bin, hostile) -> None:
    async with Gateway([Reply.tools(("hostile__broken", {}, "b1")),
                        Reply.text("the tool is broken")]) as gw:
        done = await run_agentd(agentd_bin, args(gw, ("hostile", hostile.url)))
    assert done.rc == 0, done.stderr
    content = gw.bodies[1]["messages"][-1]["content"]
    assert content.startswith("[agentd] the call to hostile__broken failed with a protocol "
                              "or transport fault")
    assert content.endswith("this is not output from the tool")
    assert "[UNTRUSTED" not in content  # not dressed up as a tool result
    fault = done.events("tool.fault")[0]
    assert fault["tool"] == "hostile__broken" and "-32603" in fault["fault"]
    assert done.events("tool.result")[0]["fault"] is True
