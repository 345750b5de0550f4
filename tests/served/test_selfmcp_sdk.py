"""The self-MCP (spec §2) driven by the official MCP Python SDK client over Streamable HTTP;
its subagent tools checked against the loop's self-tools (one table, the same words)."""

from __future__ import annotations

import ast
import asyncio
import json
import os
from pathlib import Path

import jsonschema_rs
import pytest

try:  # the official MCP Python SDK: a real peer (test dependency)
    from mcp import Client
    from mcp.shared.exceptions import MCPError
except ImportError:  # pragma: no cover
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("the official MCP Python SDK (mcp) is not installed", allow_module_level=True)

import agentd.agent.spawn_tools as spawn_tools_module
from agentd import __version__
from agentd.agent import spawn_tools
from agentd.agent.loop import Budgets, LoopState, run_task
from agentd.agent.selftools import SelfTools
from agentd.agent.subagents import Unavailable
from agentd.intelligence.playback import Playback
from agentd.mcp.client.toolbox import Toolbox
from agentd.mcp.server.http.server import serve
from agentd.served.selfmcp import TOOL_SCHEMAS, SelfMCP

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SPAWN_SCHEMA = {
    "type": "object",
    "properties": {
        "instruction": {"type": "string"},
        "output_contract": {"type": "string"},
        "tool_scope": {"type": "array", "items": {"type": "string"}},
        "async": {"type": "boolean", "default": False},
        "warm": {"type": "boolean", "default": False},
    },
    "required": ["instruction"],
}


@pytest.fixture
async def served():
    runner = await serve(SelfMCP(run_id="run-42", mode="task"), port=0)
    yield runner
    await runner.stop()


async def test_handshake_tools_and_errors(served):
    async with Client(served.url, mode="legacy") as c:
        assert c.protocol_version == "2025-11-25"
        caps = c.session.initialize_result.capabilities.model_dump(exclude_none=True)
        assert caps == {"tools": {}, "resources": {"subscribe": True}}
        assert c.server_info.name == "agentd" and c.server_info.version == __version__

        tools = (await c.list_tools()).tools
        assert [x.name for x in tools] == ["status", "subagent.spawn", "subagent.send",
                                           "subagent.status", "subagent.cancel"]
        by_name = {x.name: x for x in tools}
        assert by_name["subagent.spawn"].input_schema == SPAWN_SCHEMA
        for x in tools:
            assert x.input_schema == TOOL_SCHEMAS[x.name] and x.description
            assert jsonschema_rs.meta.is_valid(x.input_schema)
            jsonschema_rs.Draft202012Validator(x.input_schema)

        r = await c.call_tool("status", {})
        assert not r.is_error
        body = r.structured_content
        assert body["run_id"] == "run-42" and body["mode"] == "task"
        assert body["version"] == __version__ and body["pid"] == os.getpid()
        assert isinstance(body["uptime_ms"], int)

        r = await c.call_tool("subagent.spawn", {"instruction": "do it"})
        assert r.is_error and r.content[0].text == \
            "spawn refused: subagents are not available in this build"
        r = await c.call_tool("subagent.status", {"handle": "served.1"})
        assert r.is_error and "unknown handle" in r.content[0].text

        res = await c.list_resources()
        assert [str(x.uri) for x in res.resources] == ["agent://status"]
        read = await c.read_resource("agent://status")
        item = read.contents[0]
        assert item.mime_type == "application/json"
        import json
        status = json.loads(item.text)
        assert status["run_id"] == "run-42" and "spawns" in status

        with pytest.raises(MCPError) as e:
            await c.read_resource("agent://subagent/served.7")
        assert e.value.error.code == -32002
        assert e.value.error.data == {"uri": "agent://subagent/served.7"}
        with pytest.raises(MCPError) as e:
            await c.call_tool("shell.exec", {})
        assert e.value.error.code == -32601
        with pytest.raises(MCPError) as e:
            await c.call_tool("subagent.spawn", {"instruction": 42})
        assert e.value.error.code == -32602
        with pytest.raises(MCPError) as e:
            await c.call_tool("subagent.send", {"handle": "served.1"})
        assert e.value.error.code == -32602

        with pytest.raises(MCPError) as e:  # no such run (Unavailable): nothing would fire
            await c.subscribe_resource("agent://subagent/served.1")
        assert e.value.error.code == -32602
        assert e.value.error.data == {"uri": "agent://subagent/served.1"}
        assert (await c.unsubscribe_resource("agent://subagent/served.1")) is not None
        await c.send_ping()


async def test_auto_mode_probe_is_answered(served):
    """The SDK's default mode probes server/discover first: answered, so it stays at
    2026-07-28 (the stateless revision: tests/served/test_selfmcp_2026_sdk.py)."""
    async with Client(served.url) as c:
        assert c.protocol_version == "2026-07-28"
        assert (await c.call_tool("status", {})).structured_content["run_id"] == "run-42"


async def test_many_sdk_clients_at_once(served):
    async def one(i):
        async with Client(served.url, mode="legacy") as c:
            return (await c.call_tool("status", {})).structured_content["pid"]

    pids = await asyncio.gather(*(one(i) for i in range(8)))
    assert set(pids) == {os.getpid()}


# -- one table for the subagent tools (agentd.agent.spawn_tools) -----------------
# The self-MCP a peer calls and the self-tools the agent's own loop calls answer
# the same bad call with the same words. The loop side runs the real loop
# (`run_task`) with a playback script; the words are read from the tool results
# the model was shown. Both run over the `Unavailable` backend: every spawn that
# gets past the arguments is refused by it, and every handle is unknown.

# (tool, arguments, the words both surfaces answer with)
BAD_CALLS = [
    ("subagent.spawn", {"instruction": "x", "async": True, "warm": True},
     "subagent.spawn: choose at most one spawn mode (got async and warm)"),
    ("subagent.spawn", {"instruction": "   "}, "subagent.spawn: the instruction is empty"),
    ("subagent.spawn", {"instruction": "x"}, Unavailable.REASON),
    ("subagent.status", {"handle": "served.9"}, "unknown handle: served.9"),
    ("subagent.send", {"handle": "served.9", "message": "hi"}, "unknown handle: served.9"),
    ("subagent.cancel", {"handle": "served.9"}, "unknown handle: served.9"),
]


def qualified(name: str) -> str:
    return "agentd__" + name.replace(".", "_")


async def served_answers(url: str, calls) -> tuple[list[tuple[bool, str]], dict]:
    async with Client(url, mode="legacy") as c:
        listed = {t.name: t.input_schema for t in (await c.list_tools()).tools}
        out = []
        for name, args in calls:
            r = await c.call_tool(name, args)
            out.append((r.is_error, r.content[0].text))
        return out, listed


def _unfenced(content: str) -> str:
    """A tool result as the loop showed it, without the untrusted-data fence."""
    lines = content.splitlines()
    assert lines[0].startswith("[UNTRUSTED tool-result") and lines[-1] == "[END UNTRUSTED]"
    return "\n".join(lines[1:-1])


async def loop_answers(tmp_path: Path, calls) -> tuple[list[tuple[bool, str]], SelfTools]:
    """Play the calls through the real loop, one per model turn."""
    turns = [{"tool_calls": [{"name": qualified(n), "arguments": a}]} for n, a in calls]
    book = tmp_path / "book.json"
    book.write_text(json.dumps({"playback": 1, "scripts": [
        {"name": "root", "match": "[bad calls]", "turns": [*turns, {"content": "done"}]}]}))
    tools = SelfTools(backend=Unavailable(), caller="0")
    state = LoopState()
    async with Toolbox([], run_id="t") as tb:
        outcome = await run_task(Playback(str(book)), tb, tools, instruction="[bad calls]",
                                 output_contract=None, budgets=Budgets(), state=state)
    assert outcome.status == "completed"
    results = [m.content for m in state.messages if m.role == "tool"]
    assert len(results) == len(calls)
    return [('status="error"' in r.splitlines()[0], _unfenced(r)) for r in results], tools


async def test_the_same_bad_call_gets_the_same_words_on_both_surfaces(served, tmp_path
                                                                      ) -> None:
    calls = [(n, a) for n, a, _ in BAD_CALLS]
    answers, _ = await served_answers(served.url, calls)
    looped, _ = await loop_answers(tmp_path, calls)
    expected = [(True, words) for _, _, words in BAD_CALLS]
    assert answers == expected
    assert looped == expected


async def test_detach_is_the_loops_alone(served, tmp_path) -> None:
    """Spec §2.2: detach is an in-loop disposition, not offered on the served
    socket. The peer is told so in words; the loop's spawn takes it (and the
    backend here refuses it like any spawn)."""
    call = [("subagent.spawn", {"instruction": "x", "detach": True})]
    answers, listed = await served_answers(served.url, call)
    assert answers == [(True, "subagent.spawn: the detach mode is not offered here "
                             "(offered: sync, async, warm)")]
    looped, tools = await loop_answers(tmp_path, call)
    assert looped == [(True, Unavailable.REASON)]
    # each surface offers the table's schema for its modes; the served one is the spec's
    assert "detach" not in listed["subagent.spawn"]["properties"]
    served_table = spawn_tools.tools(spawn_tools.SERVED_MODES)
    loop_table = spawn_tools.tools(spawn_tools.LOOP_MODES)
    assert {n: s for n, s in listed.items() if n != "status"} == \
        {n: t.input_schema for n, t in served_table.items()}
    offered = {e.qualified: e.input_schema for e in tools.entries()}
    assert {n: offered[qualified(n)] for n in loop_table} == \
        {n: t.input_schema for n, t in loop_table.items()}


def test_the_table_imports_only_the_tree_contract() -> None:
    """It sits below both the agent and the self-MCP: only `agent/subagents` from agentd."""
    tree = ast.parse(Path(spawn_tools_module.__file__).read_text())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in mods if m and m.startswith("agentd")} == {"agentd.agent.subagents"}
