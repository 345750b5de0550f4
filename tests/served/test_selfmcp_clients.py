"""Third-party clients drive the self-MCP of a real `agentd --serve-mcp`: no hang, no {}.

One worker process serves its self-MCP on loopback http; a playback
intelligence makes every served subagent (a real re-exec'd child) finish at
once.  Each client, at each revision it speaks, does what a harness does —
initialize (or discover), tools/list, `subagent.spawn {async}`, subscribe
`agent://subagent/<handle>`, wait for `notifications/resources/updated`,
`resources/read` — and the late subscribe (after `subagent.status` says the
run is done), whose update must still arrive (docs/server.md, the subscribe
rule).  Subscribing to what is not a handle of this principal is -32602 with
`data.uri` at 2025-11-25 and left out of the acknowledgement at 2026-07-28.

Clients: the official Python SDK 2.3 (`mcp.Client`, legacy), FastMCP 4
(`fastmcp.Client`, legacy and auto), the TypeScript SDK 1.x and 2.x (the
scripts in tests/ts_peers/, on Node 22), and the MCP Inspector CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import peers
import pytest
from agentd_proc import Agentd
from waiting import until

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")
from mcp import Client  # noqa: E402
from mcp.client.subscriptions import ResourceUpdated  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
              pytest.mark.timeout(300)]

TS_PEERS = Path(__file__).resolve().parents[1] / "ts_peers"
REFUSED = ("agent://subagent/served.999", "agent://status", "file:///etc/passwd")
BOOK = {"playback": 1, "scripts": [
    {"name": "quick", "match": "quick job", "turns": [{"content": "{\"quick\": true}"}]},
    {"name": "worker", "match": "interop worker", "turns": [{"content": "idle"}]},
]}
DONE = {"status": "completed", "done": True, "partial": False, "result": "{\"quick\": true}"}


@pytest.fixture(scope="module")
def worker(agentd_bin, tmp_path_factory):
    """The real console script, reactive (it stays up), serving its self-MCP."""
    tmp = tmp_path_factory.mktemp("selfmcp-clients")
    book = tmp / "book.json"
    book.write_text(json.dumps(BOOK))
    port = peers.free_port()
    proc = Agentd([agentd_bin, "--instruction", "Be an interop worker",
                   "--intelligence", f"playback:{book}", "--mode", "reactive",
                   "--subscribe", "file:///nowhere",
                   "--serve-mcp", f"http://127.0.0.1:{port}"], tmp, "worker")
    try:
        proc.wait_event("mcp.serve.listening")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        assert proc.stop() == 130


class Updates:
    """`notifications/resources/updated` URIs as a message handler sees them."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self.changed = asyncio.Event()

    async def __call__(self, msg) -> None:
        if getattr(msg, "method", None) == "notifications/resources/updated":
            self.uris.append(str(msg.params.uri))
            self.changed.set()

    async def wait_for(self, uri: str) -> None:
        async with asyncio.timeout(60):
            while uri not in self.uris:
                self.changed.clear()
                await self.changed.wait()


async def spawn_and_subscribe(call_tool, read_resource, subscribe, updates: Updates, *,
                              late: bool) -> dict:
    """spawn {async} -> (late: until done) -> subscribe -> updated -> read; the body."""
    r = await call_tool("subagent.spawn", {"instruction": "quick job", "async": True})
    handle = r.structured_content["handle"]
    assert r.structured_content == {"handle": handle, "status": "running", "done": False}
    uri = f"agent://subagent/{handle}"
    if late:
        async def done() -> bool:
            st = await call_tool("subagent.status", {"handle": handle})
            return st.structured_content["done"]
        await until(done, limit=60, what="the run is done")
    before = updates.uris.count(uri)
    await subscribe(uri)
    await updates.wait_for(uri)
    assert updates.uris.count(uri) == before + 1
    body = json.loads((await read_resource(uri)).contents[0].text)
    assert body == {"handle": handle, **DONE}
    return body


# ------------------------------------------------------------- Python clients

@pytest.mark.parametrize("late", [False, True], ids=["live", "late"])
async def test_official_sdk_legacy(worker, late):
    updates = Updates()
    async with Client(worker, mode="legacy", message_handler=updates) as c:
        assert c.protocol_version == "2025-11-25"
        assert [t.name for t in (await c.list_tools()).tools] == [
            "status", "subagent.spawn", "subagent.send", "subagent.status", "subagent.cancel"]
        await spawn_and_subscribe(c.call_tool, c.read_resource, c.subscribe_resource, updates,
                                  late=late)
        seen = list(updates.uris)
        for uri in REFUSED:
            with pytest.raises(MCPError) as e:
                await c.subscribe_resource(uri)
            assert e.value.error.code == -32602 and e.value.error.data == {"uri": uri}
        assert updates.uris == seen


async def test_official_sdk_auto_late_listen(worker):
    """At 2026-07-28 a listen for a run that already ended is honoured and gets its
    update after the acknowledgement; refused URIs are left out of the ack."""
    async with Client(worker) as c:
        assert c.protocol_version == "2026-07-28"
        r = await c.call_tool("subagent.spawn", {"instruction": "quick job", "async": True})
        handle = r.structured_content["handle"]
        uri = f"agent://subagent/{handle}"

        async def done() -> bool:
            st = await c.call_tool("subagent.status", {"handle": handle})
            return st.structured_content["done"]
        await until(done, limit=60, what="the run is done")
        events = []
        async with c.listen(resource_subscriptions=[uri, *REFUSED[::2]]) as sub:
            assert sub.honored.resource_subscriptions == [uri]
            async with asyncio.timeout(60):
                async for event in sub:  # the stream ends once its one update is out
                    events.append(event)
        assert events == [ResourceUpdated(uri=uri)]
        body = json.loads((await c.read_resource(uri)).contents[0].text)
        assert body == {"handle": handle, **DONE}


@pytest.mark.parametrize("late", [False, True], ids=["live", "late"])
async def test_fastmcp_legacy(worker, late):
    fastmcp = peers.import_peer("fastmcp")
    updates = Updates()
    async with fastmcp.Client(worker, mode="legacy", message_handler=updates) as c:
        assert c.protocol_version == "2025-11-25"
        assert {t.name for t in await c.list_tools()} >= {"subagent.spawn", "status"}

        async def call(name, args):
            return await c.call_tool(name, args)

        async def read(uri):
            return await c.session.read_resource(uri)

        await spawn_and_subscribe(call, read, c.session.subscribe_resource, updates, late=late)
        for uri in REFUSED:
            with pytest.raises(MCPError) as e:
                await c.session.subscribe_resource(uri)
            assert e.value.error.code == -32602 and e.value.error.data == {"uri": uri}


async def test_fastmcp_auto_speaks_2026(worker):
    """FastMCP's default mode negotiates 2026-07-28 (server/discover); spawn, status
    and read work there (FastMCP 4 has no subscriptions/listen surface of its own)."""
    fastmcp = peers.import_peer("fastmcp")
    async with fastmcp.Client(worker) as c:
        assert c.protocol_version == "2026-07-28"
        r = await c.call_tool("subagent.spawn", {"instruction": "quick job", "async": True})
        handle = r.structured_content["handle"]

        async def done() -> bool:
            st = await c.call_tool("subagent.status", {"handle": handle})
            return st.structured_content["done"]
        await until(done, limit=60, what="the run is done")
        contents = await c.read_resource(f"agent://subagent/{handle}")
        assert json.loads(contents[0].text) == {"handle": handle, **DONE}


# ------------------------------------------------------- TypeScript clients

async def node_client(script: str, *args: str) -> dict:
    bin_dir = peers.ensure_npm_peers("node")
    proc = await asyncio.create_subprocess_exec(
        str(bin_dir / "node"), str(TS_PEERS / script), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=peers.npm_env())
    try:
        async with asyncio.timeout(180):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{script} {args} hung") from None
    assert proc.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def check_ts_legacy(out: dict, refused: tuple[str, ...] = REFUSED) -> None:
    assert out["protocolVersion"] == "2025-11-25"
    assert out["tools"] == ["status", "subagent.spawn", "subagent.send", "subagent.status",
                            "subagent.cancel"]
    uri = f"agent://subagent/{out['spawn']['handle']}"
    assert out["subscribe"] == {} and out["updated"] == [uri]
    assert out["body"] == {"handle": out["spawn"]["handle"], **DONE}
    assert out["refused"] == {u: {"code": -32602, "data": {"uri": u}} for u in refused}
    assert out["updatedAtEnd"] == [uri]  # a refused subscribe never fires


@pytest.mark.parametrize("late", [False, True], ids=["live", "late"])
async def test_ts_sdk_v1(worker, late):
    out = await node_client("client_v1.mjs", worker, *(["--late"] if late else []))
    check_ts_legacy(out)
    assert out.get("doneBeforeSubscribe", False) is late


@pytest.mark.parametrize("late", [False, True], ids=["live", "late"])
async def test_ts_sdk_v2_legacy(worker, late):
    out = await node_client("client_v2.mjs", worker, "--mode", "legacy",
                            *(["--late"] if late else []))
    check_ts_legacy(out, ("agent://subagent/served.999", "file:///etc/passwd",
                          "agent://status"))
    assert out.get("doneBeforeSubscribe", False) is late


@pytest.mark.parametrize("late", [False, True], ids=["live", "late"])
async def test_ts_sdk_v2_auto_listen(worker, late):
    out = await node_client("client_v2.mjs", worker, "--mode", "auto",
                            *(["--late"] if late else []))
    assert out["protocolVersion"] == "2026-07-28"
    uri = f"agent://subagent/{out['spawn']['handle']}"
    # honoured (an ended run too), its one update, then the stream ends by itself
    assert out["honored"] == {"resourceSubscriptions": [uri]}
    assert out["updated"] == [uri] and out["closed"] == "graceful"
    assert out["body"] == {"handle": out["spawn"]["handle"], **DONE}
    # refused URIs are left out of the acknowledgement; nothing fires for them
    assert out["refusedHonored"] == {} and out["refusedClosed"] == "graceful"
    assert out["updatedAtEnd"] == [uri]
    assert out.get("doneBeforeSubscribe", False) is late


# ------------------------------------------------------------ the Inspector

async def inspector(tmp: Path, url: str, era: str, *args: str) -> dict:
    bin_dir = peers.ensure_npm_peers("inspector")
    env = peers.npm_env({"HOME": str(tmp), "MCP_CATALOG_PATH": str(tmp / "mcp.json")})
    proc = await asyncio.create_subprocess_exec(
        str(bin_dir / "inspector"), "--cli", url, "--protocol-era", era, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        async with asyncio.timeout(120):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"inspector {args} hung") from None
    assert proc.returncode == 0, (out + err).decode()[-3000:]
    return json.loads(out)


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_inspector_cli(worker, tmp_path, era):
    tools = await inspector(tmp_path, worker, era, "--method", "tools/list")
    assert [t["name"] for t in tools["tools"]] == [
        "status", "subagent.spawn", "subagent.send", "subagent.status", "subagent.cancel"]
    status = await inspector(tmp_path, worker, era, "--method", "tools/call",
                             "--tool-name", "status")
    assert status["structuredContent"]["mode"] == "reactive"
    assert status["structuredContent"]["pid"] != os.getpid()
    res = await inspector(tmp_path, worker, era, "--method", "resources/read",
                          "--uri", "agent://status")
    (item,) = res["contents"]
    assert item["uri"] == "agent://status" and item["mimeType"] == "application/json"
    body = json.loads(item["text"])
    assert body["mode"] == "reactive" and body["pid"] == status["structuredContent"]["pid"]
    assert set(body["spawns"]) >= {"spawned", "running", "completed"}
    if era == "modern":
        assert res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "agentd"
