"""Composition (spec §3) across MCP revisions: both patterns, drive and
subscribe + read, over a 2026-07-28 link and over a 2025-11-25 link.

Every agent is a real ``agentd`` process with playback intelligence: a worker
serving its self-MCP on loopback (``--mode reactive --subscribe
file:///nowhere``, the spec's example) and a parent that declares it as an
ordinary MCP server.  Nothing is configured per revision; each side picks it.

* new parent -> new worker: the parent's ``server/discover`` finds
  2026-07-28, so it drives statelessly and the async run's completion
  arrives on a ``subscriptions/listen`` stream;
* new parent -> a 2025-11-25 worker: the worker is reached through
  :class:`RevisionGate`, a loopback HTTP gateway that makes it look like a
  server predating 2026-07-28 (it refuses a request carrying
  ``MCP-Protocol-Version: 2026-07-28`` the way the SDK's 2025-11-25 transport
  does, HTTP 400 "Missing session ID", and forwards everything else
  byte for byte, SSE included).  The parent falls back to ``initialize`` and
  the completion comes through ``resources/subscribe``;
* a 2025-11-25 parent -> new worker: the official SDK client in
  ``mode="legacy"`` (a parent that predates the revision) drives the same
  worker process and subscribes with ``resources/subscribe``.

The gate is not a peer double: the worker behind it is the real one, and the
one answer it makes itself is a real 2025-11-25 server's answer to the probe.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from pathlib import Path

import aiohttp
import peers
from agentd_proc import Agentd
from aiohttp import web
from waiting import until

SYNC_MARK = "LGTM-SYNC-2026"
ASYNC_MARK = "LGTM-ASYNC-2026"
_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


def book() -> dict:
    parent_turns = [
        {"tool_calls": [{"name": "reviewer__subagent_spawn",
                         "arguments": {"instruction": "[review-sync] review a.py",
                                       "output_contract": "JSON {verdict}"}}]},
        {"expect": SYNC_MARK,
         "tool_calls": [{"name": "reviewer__subagent_spawn",
                         "arguments": {"instruction": "[review-async] review b.py",
                                       "output_contract": "JSON {verdict}", "async": True}}]},
        {"expect": "served.2",
         "tool_calls": [{"name": "agentd__await_resource",
                         "arguments": {"uri": "agent://subagent/served.2", "timeout": 120}}]},
        {"expect": [ASYNC_MARK, "updated"],
         "content": json.dumps({"sync": SYNC_MARK, "async": ASYNC_MARK})},
    ]
    return {"playback": 1, "scripts": [
        {"name": "review-sync", "match": "[review-sync]",
         "turns": [{"content": json.dumps({"verdict": SYNC_MARK})}]},
        {"name": "review-async", "match": "[review-async]",  # still running when awaited
         "turns": [{"delay": 1.0, "content": json.dumps({"verdict": ASYNC_MARK})}]},
        {"name": "worker", "match": "code-review worker", "turns": [{"content": "idle"}]},
        {"name": "parent", "match": "[parent]", "turns": parent_turns},
    ]}


class RevisionGate:
    """A loopback gateway in front of a worker that hides 2026-07-28 (see module doc)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.port = peers.free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.refused = 0
        self.methods: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "POST":
            try:
                self.methods.append(json.loads(body).get("method", "<response>"))
            except ValueError:
                pass
            if request.headers.get("MCP-Protocol-Version") == "2026-07-28":
                self.refused += 1
                return web.Response(status=400, text="Bad Request: Missing session ID")
        assert self._http is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        up = await self._http.request(request.method, self.upstream, data=body or None,
                                      headers=headers)
        out = web.StreamResponse(status=up.status, headers={
            k: v for k, v in up.headers.items() if k.lower() not in _HOP})
        await out.prepare(request)
        try:
            async for chunk in up.content.iter_any():
                await out.write(chunk)
        except (aiohttp.ClientError, ConnectionResetError):
            pass
        finally:
            up.release()
        return out

    async def _start(self) -> None:
        self._http = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/mcp", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._http is not None:
            await self._http.close()

    def __enter__(self) -> RevisionGate:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def start_worker(agentd_bin: str, tmp: Path) -> tuple[Agentd, int]:
    playback = tmp / "playback.json"
    playback.write_text(json.dumps(book()))
    port = peers.free_port()
    worker = Agentd([agentd_bin, "--instruction", "Be a reusable code-review worker",
                     "--intelligence", f"playback:{playback}",
                     "--mode", "reactive", "--subscribe", "file:///nowhere",
                     "--serve-mcp", f"http://127.0.0.1:{port}"], tmp, "worker")
    worker.wait_event("reactive.ready")
    return worker, port


def run_parent(agentd_bin: str, tmp: Path, url: str) -> Agentd:
    config = tmp / "parent.toml"
    config.write_text(f'[[mcp_servers]]\nname = "reviewer"\nurl = "{url}"\n')
    parent = Agentd([agentd_bin, "--instruction", "[parent] orchestrate the nightly review",
                     "--intelligence", f"playback:{tmp / 'playback.json'}",
                     "--output-contract", "JSON {sync, async}",
                     "--config", str(config), "--ping-interval", "60"], tmp, "parent")
    code = parent.proc.wait(timeout=180)
    assert code == 0, "\n".join(parent.err.read_text().splitlines()[-40:])
    return parent


def check_both_patterns(parent: Agentd, worker: Agentd) -> None:
    res = parent.result()
    assert res["status"] == "completed"
    assert res["result"] == {"sync": SYNC_MARK, "async": ASYNC_MARK}  # drive; subscribe+read
    awaited = parent.events("reactive.await")
    assert [(e["uri"], e["updated"]) for e in awaited] == [("agent://subagent/served.2", True)]
    term = worker.events("selfmcp.terminal")
    assert any(e["handle"] == "served.2" and e["notified"] == 1 for e in term)


def test_new_parent_drives_and_subscribes_new_worker_at_2026(agentd_bin, tmp_path) -> None:
    worker, port = start_worker(agentd_bin, tmp_path)
    try:
        parent = run_parent(agentd_bin, tmp_path, f"http://127.0.0.1:{port}/mcp")
        check_both_patterns(parent, worker)
    finally:
        assert worker.stop(signal.SIGTERM) == 130
    (shake,) = parent.events("mcp.handshake")
    assert (shake["protocol_version"], shake["negotiated_by"]) == ("2026-07-28",
                                                                   "server/discover")
    assert not parent.events("mcp.discover.fallback")
    opened = parent.events("mcp.listen.open")
    assert any(e["uris"] == 1 for e in opened)  # agent://subagent/served.2 on a listen stream
    assert not parent.events("mcp.listen.lost")


def test_new_parent_drives_and_subscribes_a_2025_worker(agentd_bin, tmp_path) -> None:
    worker, port = start_worker(agentd_bin, tmp_path)
    try:
        with RevisionGate(f"http://127.0.0.1:{port}/mcp") as gate:
            parent = run_parent(agentd_bin, tmp_path, gate.url)
            check_both_patterns(parent, worker)
            methods = list(gate.methods)
    finally:
        assert worker.stop(signal.SIGTERM) == 130
    (shake,) = parent.events("mcp.handshake")
    assert (shake["protocol_version"], shake["negotiated_by"]) == ("2025-11-25", "initialize")
    assert [e["server"] for e in parent.events("mcp.discover.fallback")] == ["reviewer"]
    assert gate.refused == 1  # one probe, then the 2025-11-25 session
    assert "resources/subscribe" in methods and "subscriptions/listen" not in methods
    assert not parent.events("mcp.listen.open")


@peers.LEGACY_SUBSCRIBE  # resources/subscribe: it is 2025
async def test_a_2025_parent_drives_and_subscribes_new_worker(agentd_bin, tmp_path) -> None:
    peers.import_peer("mcp")
    from mcp import Client

    worker, port = await asyncio.to_thread(start_worker, agentd_bin, tmp_path)
    updated: list[str] = []
    try:
        async def on_message(msg) -> None:
            root = getattr(msg, "root", msg)
            if getattr(root, "method", "") == "notifications/resources/updated":
                updated.append(str(root.params.uri))

        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy",
                          message_handler=on_message) as c:
            assert c.protocol_version == "2025-11-25"
            r = await c.call_tool("subagent.spawn", {"instruction": "[review-sync] review a.py",
                                                     "output_contract": "JSON {verdict}"})
            assert r.structured_content["status"] == "completed"
            assert SYNC_MARK in json.dumps(r.structured_content["result"])
            r = await c.call_tool("subagent.spawn", {"instruction": "[review-async] review b.py",
                                                     "output_contract": "JSON {verdict}",
                                                     "async": True})
            handle = r.structured_content["handle"]
            uri = f"agent://subagent/{handle}"
            await c.subscribe_resource(uri)
            await until(lambda: uri in updated, limit=120, what=f"updated {uri}")
            body = json.loads((await c.read_resource(uri)).contents[0].text)
            assert body["done"] is True and ASYNC_MARK in json.dumps(body["result"])
    finally:
        assert await asyncio.to_thread(worker.stop, signal.SIGTERM) == 130
    assert updated.count(f"agent://subagent/{handle}") == 1
