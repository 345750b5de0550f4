"""`agentd acp` driven by the official ACP Python SDK (`agent-client-protocol`) as a
real client of a real `agentd acp` process: initialize, sessions with an http MCP
server (tests/support/sdk_servers.py, the official MCP SDK), prompts on the playback
intelligence that call a tool and spawn a subagent (streamed updates asserted in
order), a warm history across prompts, load, two sessions at once, cancel mid-run
(the model held at tests/support/gateway.py's gate; no process left), a stdio entry
refused; and, over raw pipes, malformed and oversized frames answered with
JSON-RPC errors while the process stays up."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agentd_proc import agentd_env
from gateway import Gateway, Reply
from peers import PeerProcess, import_peer, python_peer
from tree_helpers import children_of, running
from waiting import until

acp = import_peer("acp", "the official ACP Python SDK (pip install agent-client-protocol)")
from acp import schema as A  # noqa: E402

HEADER_VALUE = "Bearer acp-test-token-7f3a9c"
KEY = "sk-harness-key-5e1d0b"


@pytest.fixture(scope="module")
def sdk() -> PeerProcess:
    with python_peer("sdk_servers.py") as peer:
        yield peer


class Recorder:
    """The client side: records every session/update, in arrival order."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("agentd asks no permission")

    def of(self, sid: str) -> list[Any]:
        return [u for s, u in self.updates if s == sid]


def kinds(updates: list[Any]) -> list[str]:
    out = []
    for u in updates:
        tag = u.session_update
        if tag == "tool_call_update":
            tag += f":{u.status}"
        elif tag == "tool_call":
            tag += f":{u.status}"
        out.append(tag)
    return out


def script(tmp_path: Path, scripts: list[dict]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"playback": 1, "scripts": scripts}))
    return f"playback:{path}"


def http_server(name: str, url: str, headers: list[tuple[str, str]] = ()) -> Any:
    return A.HttpMcpServer(name=name, url=url, type="http",
                           headers=[A.HttpHeader(name=k, value=v) for k, v in headers])


def _log_file(tmp_path: Path) -> Any:
    return (tmp_path / "stderr.log").open("wb")  # agentd's log; closed by the test's end


async def start(agentd_bin: str, tmp_path: Path, *args: str, **env: str) -> Any:
    stderr = _log_file(tmp_path)
    client = Recorder()
    cm = acp.spawn_agent_process(client, agentd_bin, "acp", *args, env=agentd_env(**env),
                                 transport_kwargs={"stderr": stderr.fileno()})
    conn, proc = await cm.__aenter__()
    return client, conn, proc, cm, stderr


ROOT_SCRIPT = {"name": "root", "match": "[root]", "turns": [
    {"content": "looking", "tool_calls": [{"name": "sdk__echo", "arguments": {"text": "hi"},
                                           "id": "c1"}]},
    {"expect": "hi", "tool_calls": [{"name": "agentd__subagent_spawn",
                                     "arguments": {"instruction": "[child] count"}, "id": "c2"}]},
    {"expect": "child says 3", "content": "all done"},
    {"content": "second answer"},
]}
CHILD_SCRIPT = {"name": "child", "match": "[child]", "turns": [{"content": "child says 3"}]}


async def test_prompt_streams_updates_in_order_then_load_replays(agentd_bin, sdk, tmp_path
                                                                 ) -> None:
    spec = script(tmp_path, [CHILD_SCRIPT, ROOT_SCRIPT])
    client, conn, proc, cm, stderr = await start(agentd_bin, tmp_path, "--intelligence", spec)
    try:
        init = await conn.initialize(protocol_version=1)
        assert init.protocol_version == 1
        assert init.agent_capabilities.load_session is True
        assert init.agent_capabilities.mcp_capabilities.http is True
        assert init.agent_info.name == "agentd"
        new = await conn.new_session(cwd=str(tmp_path), mcp_servers=[
            http_server("sdk", sdk.url, [("Authorization", HEADER_VALUE)])])
        sid = new.session_id
        answer = await conn.prompt(session_id=sid,
                                   prompt=[A.TextContentBlock(type="text", text="[root] go")])
        assert answer.stop_reason == "end_turn"
        got = client.of(sid)
        assert kinds(got) == [
            "agent_message_chunk", "tool_call:pending", "tool_call_update:in_progress",
            "tool_call_update:completed",
            "tool_call:pending", "tool_call_update:in_progress", "tool_call_update:completed",
            "agent_message_chunk"]
        assert got[0].content.text == "looking"
        assert (got[1].tool_call_id, got[1].title, got[1].raw_input) == ("c1", "sdk__echo",
                                                                         {"text": "hi"})
        assert got[3].tool_call_id == "c1" and "hi" in got[3].content[0].content.text
        assert got[3].raw_output["isError"] is False
        assert got[4].tool_call_id == "c2" and got[4].title.startswith("subagent spawn")
        assert "child says 3" in got[6].content[0].content.text
        assert got[7].content.text == "all done"
        # a second prompt continues the conversation: the script's fourth answer
        again = await conn.prompt(session_id=sid,
                                  prompt=[A.TextContentBlock(type="text", text="more")])
        assert again.stop_reason == "end_turn"
        assert client.of(sid)[-1].content.text == "second answer"
        # load replays the session: the user's prompts and every update, in order
        before = list(client.of(sid))
        client.updates.clear()
        await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
        replay = client.of(sid)
        assert replay[0].session_update == "user_message_chunk"
        assert replay[0].content.text == "[root] go"
        assert [u for u in replay if u.session_update != "user_message_chunk"] == before
    finally:
        await cm.__aexit__(None, None, None)
        stderr.close()
    assert proc.returncode == 0
    log = (tmp_path / "stderr.log").read_text()
    assert HEADER_VALUE not in log and "acp-test-token" not in log
    assert "acp.prompt.end" in log


async def test_two_sessions_at_once_are_isolated(agentd_bin, sdk, tmp_path) -> None:
    spec = script(tmp_path, [
        {"match": "[a]", "turns": [{"content": "A1"}, {"content": "A2"}]},
        {"match": "[b]", "turns": [{"content": "B1"}, {"content": "B2"}]}])
    client, conn, _proc, cm, stderr = await start(agentd_bin, tmp_path, "--intelligence", spec)
    try:
        await conn.initialize(protocol_version=1)
        a = (await conn.new_session(cwd="/", mcp_servers=[])).session_id
        b = (await conn.new_session(cwd="/", mcp_servers=[])).session_id
        assert a != b

        def say(sid: str, words: str) -> Any:
            return conn.prompt(session_id=sid, prompt=[A.TextContentBlock(type="text",
                                                                          text=words)])
        ra, rb = await asyncio.gather(say(a, "[a] one"), say(b, "[b] one"))
        assert ra.stop_reason == rb.stop_reason == "end_turn"
        ra, rb = await asyncio.gather(say(a, "two"), say(b, "two"))
        assert [u.content.text for u in client.of(a)] == ["A1", "A2"]
        assert [u.content.text for u in client.of(b)] == ["B1", "B2"]
    finally:
        await cm.__aexit__(None, None, None)
        stderr.close()


async def test_cancel_mid_run_ends_the_tree(agentd_bin, tmp_path) -> None:
    gate = asyncio.Event()  # never opened: the child's model call hangs until cancel
    async with Gateway([
        Reply.tools(("agentd__subagent_spawn", {"instruction": "[child] wait"})),
        Reply(content="never", gate=gate),
    ]) as gw:
        # the harnesses' env names the gateway and its key (no --intelligence)
        client, conn, proc, cm, stderr = await start(
            agentd_bin, tmp_path, "--model", "test-model", "--spawn", "exec",
            OPENAI_BASE_URL=gw.url, OPENAI_API_KEY=KEY)
        try:
            await conn.initialize(protocol_version=1)
            new = await conn.new_session(cwd="/", mcp_servers=[])
            assert new.config_options[0].current_value == "test-model"
            sid = new.session_id
            prompt = asyncio.ensure_future(conn.prompt(
                session_id=sid, prompt=[A.TextContentBlock(type="text", text="spawn")]))
            # the child is up and its model call is held at the gate
            await until(lambda: len(gw.bodies) >= 2)
            assert gw.headers[0]["Authorization"] == f"Bearer {KEY}"
            kids = children_of(proc.pid)
            assert kids
            await conn.cancel(session_id=sid)
            answer = await prompt
            assert answer.stop_reason == "cancelled"
            assert not [k for k in kids if running(k)]
            assert children_of(proc.pid) == []
            got = client.of(sid)
            assert kinds(got)[:2] == ["tool_call:pending", "tool_call_update:in_progress"]
            # the session goes on after a cancel, with its conversation repaired
            gw.add(Reply.text("after"))
            again = await conn.prompt(session_id=sid,
                                      prompt=[A.TextContentBlock(type="text", text="next")])
            assert again.stop_reason == "end_turn"
            tool_msgs = [m for m in gw.bodies[-1]["messages"] if m["role"] == "tool"]
            assert tool_msgs and "cancelled" in tool_msgs[-1]["content"]
        finally:
            await cm.__aexit__(None, None, None)
            stderr.close()


async def test_stdio_entries_are_refused_and_sse_ones_declared(agentd_bin, tmp_path) -> None:
    spec = script(tmp_path, [{"turns": [{"content": "ok"}]}])
    _client, conn, _proc, cm, stderr = await start(agentd_bin, tmp_path, "--intelligence", spec)
    try:
        init = await conn.initialize(protocol_version=1)
        caps = init.agent_capabilities.mcp_capabilities
        assert caps.http and caps.sse  # the legacy HTTP+SSE transport (docs/client.md)
        with pytest.raises(acp.RequestError) as stdio:
            await conn.new_session(cwd="/", mcp_servers=[A.McpServerStdio(
                name="fs", command="/bin/true", args=[], env=[])])
        assert stdio.value.code == -32602
        assert "agentd runs no local code" in str(stdio.value)
        sse = await conn.new_session(cwd="/", mcp_servers=[A.SseMcpServer(
            name="old", url="http://127.0.0.1:9/sse", type="sse", headers=[])])
        assert sse.session_id  # declared; connected (with the legacy transport) at a prompt
        with pytest.raises(acp.RequestError) as rel:
            await conn.new_session(cwd="relative", mcp_servers=[])
        assert "absolute" in str(rel.value)
        ok = await conn.new_session(cwd="/", mcp_servers=[])  # and the process goes on
        assert ok.session_id
    finally:
        await cm.__aexit__(None, None, None)
        stderr.close()


async def test_malformed_and_oversized_frames_answered(agentd_bin, tmp_path) -> None:
    """Raw pipes (the SDK sends only well-formed frames): a hostile writer's lines."""
    spec = script(tmp_path, [{"turns": [{"content": "ok"}]}])
    proc = await asyncio.create_subprocess_exec(
        agentd_bin, "acp", "--intelligence", spec, "--max-line-bytes", "1024",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=agentd_env())
    assert proc.stdin is not None and proc.stdout is not None
    lines = [b"not json", b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":1}}',
             b'{"jsonrpc":"2.0","id":2,"method":"nope"}', b"[1,2]",
             b'{"jsonrpc":"2.0","id":3,"method":"x","params":"' + b"a" * 5000 + b'"}',
             b'{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":1}}']
    proc.stdin.write(b"\n".join(lines) + b"\n")
    await proc.stdin.drain()
    answers = [json.loads(await proc.stdout.readline()) for _ in range(6)]
    by_id = {a.get("id"): a for a in answers if a.get("id") is not None}
    nulls = [a["error"]["code"] for a in answers if a.get("id") is None]
    assert sorted(nulls) == [-32700, -32600, -32600]  # not JSON, a batch, oversized
    assert by_id[1]["error"]["code"] == -32602 and "cwd" in by_id[1]["error"]["message"]
    assert by_id[2]["error"]["code"] == -32601
    assert by_id[4]["result"]["protocolVersion"] == 1  # still alive, still answering
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 60) == 0  # end of input: a clean exit
