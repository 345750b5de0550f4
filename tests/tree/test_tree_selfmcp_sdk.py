"""The official MCP Python SDK drives agentd's self-MCP over a real Supervisor.

sync, async (+ subscribe, `updated`, read), warm + send, status, cancel of a
3-level subtree (no process of it left in /proc), each cap's refusal text and
a scope widening refused — all as a peer sees them, over Streamable HTTP, from
`serving.serve(config, ...)`: the entry `agentd --serve-mcp` uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import peers
import pytest
from peers import free_port
from tree_helpers import exists, make_config, precompile
from waiting import until

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")

from mcp import ClientSession, types  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from agentd.app import serving  # noqa: E402
from agentd.app.compose import open_supervisor  # noqa: E402
from agentd.config.serve import parse_serve  # noqa: E402

pytestmark = [pytest.mark.timeout(240), peers.LEGACY_SUBSCRIBE]

TREE_SCRIPTS = [
    {"name": "level-1", "match": "level-one",
     "turns": [{"tool_calls": [{"name": "agentd__subagent_spawn",
                                "arguments": {"instruction": "level-two", "warm": True}}]},
               {"content": "{\"level\": 1}"}]},
    {"name": "level-2", "match": "level-two",
     "turns": [{"tool_calls": [{"name": "agentd__subagent_spawn",
                                "arguments": {"instruction": "level-three", "warm": True}}]},
               {"content": "{\"level\": 2}"}]},
]


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


def add_tree_scripts(path: str) -> None:
    """Put the 3-level tree's scripts in front of the shared ones."""
    with open(path) as fh:
        data = json.load(fh)
    data["scripts"] = TREE_SCRIPTS + data["scripts"]
    with open(path, "w") as fh:
        json.dump(data, fh)


@contextlib.asynccontextmanager
async def served(tmp_path, *, scope=None, **over):
    """The tree served the way `agentd --serve-mcp` serves it (`serving.serve`)."""
    port = free_port()
    cfg = make_config(tmp_path, serve=parse_serve(f"http://127.0.0.1:{port}", None, None,
                                                  None, None), **over)
    add_tree_scripts(cfg.intelligence.removeprefix("playback:"))
    async with open_supervisor(cfg, scope=scope) as sup, \
            serving.serve(cfg, run_id="r", backend=sup) as runner:
        updates: asyncio.Queue[str] = asyncio.Queue()

        async def on_message(message) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                updates.put_nowait(str(message.params.uri))

        async with streamable_http_client(runner.url) as streams, \
                ClientSession(streams[0], streams[1], message_handler=on_message) as client:
            await client.initialize()
            yield sup, client, updates


def text(result) -> str:
    return result.content[0].text


async def test_sdk_sync_async_subscribe_warm_status(tmp_path):
    async with served(tmp_path) as (_sup, client, updates):
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"subagent.spawn", "subagent.send", "subagent.status",
                "subagent.cancel", "status"} <= names

        r = await client.call_tool("subagent.spawn", {"instruction": "hello"})
        assert not r.is_error
        assert r.structured_content == {"handle": "served.1", "status": "completed",
                                        "done": True, "partial": False,
                                        "result": '{"ok": true}'}
        assert text(r) == '{"ok": true}'  # the text content is the result itself

        r = await client.call_tool("subagent.spawn", {"instruction": "later", "async": True})
        ack = r.structured_content
        assert ack == {"handle": "served.2", "status": "running", "done": False}
        uri = "agent://subagent/served.2"
        await client.subscribe_resource(uri)
        got = await asyncio.wait_for(updates.get(), 120)
        assert got == uri
        body = json.loads((await client.read_resource(uri)).contents[0].text)
        assert body == {"handle": "served.2", "status": "completed", "done": True,
                        "partial": False, "result": '{"ok": true}'}

        r = await client.call_tool("subagent.spawn", {"instruction": "session", "warm": True})
        handle = r.structured_content["handle"]
        r = await client.call_tool("subagent.send", {"handle": handle, "message": "again"})
        assert not r.is_error and r.structured_content["result"] == '{"ok": true}'
        assert r.structured_content["done"] is False
        r = await client.call_tool("subagent.status", {"handle": handle})
        assert r.structured_content["status"] == "running"
        r = await client.call_tool("subagent.status", {"handle": "served.2"})
        assert r.structured_content["status"] == "completed"

        status = json.loads((await client.read_resource("agent://status")).contents[0].text)
        assert status["spawns"]["spawned"] == 3 and status["spawns"]["completed"] == 2


async def test_sdk_cancel_three_level_subtree(tmp_path):
    async with served(tmp_path) as (sup, client, _updates):
        r = await client.call_tool("subagent.spawn", {"instruction": "level-one", "warm": True})
        top = r.structured_content["handle"]
        handles = [top, f"{top}.1", f"{top}.1.1"]
        assert await until(lambda: all(sup.process(h) for h in handles), limit=120)
        assert await until(lambda: sup.status("served", handles[-1]).result is not None, limit=120)
        pids = [sup.process(h).pid for h in handles]
        assert all(exists(p) for p in pids)
        r = await client.call_tool("subagent.cancel", {"handle": top})
        assert not r.is_error and r.structured_content["status"] == "cancelled"
        assert [p for p in pids if exists(p)] == []
        assert all(sup.status("served", h).status == "cancelled" for h in handles)


@pytest.mark.parametrize(("over", "first", "refusal"), [
    ({"max_depth": 1}, None, "spawn refused: max_depth=1 reached at handle served"),
    ({"max_children": 1}, "warm", "spawn refused: max_children=1 reached at handle served"),
    ({"max_children": 4, "max_subagents": 1}, "warm",
     "spawn refused: max_subagents=1 reached at handle served"),
    ({"token_ceiling": 15}, "costly", "spawn refused: token_ceiling=15 reached at handle served"),
])
async def test_sdk_each_cap_refusal(tmp_path, over, first, refusal):
    async with served(tmp_path, spawn="forkserver", **over) as (_sup, client, _u):
        if first == "warm":
            r = await client.call_tool("subagent.spawn", {"instruction": "x", "warm": True})
            assert not r.is_error
        elif first == "costly":
            r = await client.call_tool("subagent.spawn", {"instruction": "costly"})
            assert r.structured_content["status"] == "completed"
        r = await client.call_tool("subagent.spawn", {"instruction": "one more"})
        assert r.is_error and text(r) == refusal


async def test_sdk_scope_widening_refused(tmp_path):
    async with served(tmp_path, spawn="forkserver", scope=["fs"]) as (_sup, client, _u):
        r = await client.call_tool("subagent.spawn",
                                   {"instruction": "x", "tool_scope": ["fs", "web"]})
        assert r.is_error
        assert text(r) == ("spawn refused: tool_scope widens the caller's scope at handle "
                           "served (not in scope: web)")
        r = await client.call_tool("subagent.spawn", {"instruction": "x", "tool_scope": ["fs"]})
        assert not r.is_error and r.structured_content["status"] == "completed"
