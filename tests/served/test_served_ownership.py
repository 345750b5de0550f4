"""Peers kept apart: a served run belongs to the principal that spawned it.

The real console script serves its self-MCP over HTTPS (a test CA from
trustme); two official-SDK clients are two principals — two mTLS client
certificates with different subjects, or two named bearers from the config
file (`serve_bearers`, each a `{{secret:…}}`). Peer A spawns an async run
(its child is slow, so it is still running); peer B reading, subscribing,
sending to and cancelling A's handle gets exactly what it gets for a handle
that never existed; `agent://status` shows B nothing of A's; A still owns and
cancels its run.
"""

from __future__ import annotations

import contextlib
import json
import ssl

import peers
import pytest
from agentd_proc import Agentd
from waiting import until

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")
httpx2 = peers.import_peer("httpx2")
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), peers.LEGACY_SUBSCRIBE]

TOKENS = {"alice": "tok-alice-8c1f3e", "bob": "tok-bob-27d9a4"}


class Pki:
    def __init__(self, tmp) -> None:
        trustme = peers.import_peer("trustme")
        ca = trustme.CA()
        self.ca = tmp / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca))
        server = ca.issue_cert("127.0.0.1")
        self.cert, self.key = tmp / "server.pem", tmp / "server.key"
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        server.private_key_pem.write_to_path(str(self.key))
        self.clients = {}
        for name in ("peer-a", "peer-b"):
            c = ca.issue_cert(f"{name}.agentd.test", common_name=name)
            cert, key = tmp / f"{name}.pem", tmp / f"{name}.key"
            c.cert_chain_pems[0].write_to_path(str(cert))
            c.private_key_pem.write_to_path(str(key))
            self.clients[name] = (cert, key)

    def context(self, client: str | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if client is not None:
            cert, key = self.clients[client]
            ctx.load_cert_chain(str(cert), str(key))
        return ctx


def _book(tmp):
    path = tmp / "worker.playback.json"
    path.write_text(json.dumps({"playback": 1, "scripts": [
        # the served run spawns a nested run of its own (served.1.1), then works on
        {"name": "slow", "match": "[slow]", "turns": [
            {"tool_calls": [{"name": "agentd__subagent_spawn",
                             "arguments": {"instruction": "[grand] dig", "async": True}}]},
            {"delay": 120, "content": "late"}]},
        {"name": "grand", "match": "[grand]", "turns": [{"delay": 120, "content": "deep"}]},
        {"name": "worker", "match": "code-review worker", "turns": [{"content": "idle"}]},
    ]}))
    return path


@contextlib.asynccontextmanager
async def peer(url: str, ctx: ssl.SSLContext, bearer: str | None = None):
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    async with httpx2.AsyncClient(verify=ctx, headers=headers, timeout=60) as http, \
            streamable_http_client(url, http_client=http) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


async def _unknown_answers(b, handle: str) -> dict:
    """Everything peer B can learn of `handle`, as comparable values."""
    out = {}
    for tool, args in (("subagent.status", {}), ("subagent.send", {"message": "hi"}),
                       ("subagent.cancel", {})):
        r = await b.call_tool(tool, {"handle": handle, **args})
        out[tool] = (r.is_error, r.content[0].text.replace(handle, "<h>"))
    uri = f"agent://subagent/{handle}"
    with pytest.raises(MCPError) as e:
        await b.read_resource(uri)
    out["read"] = e.value.error.code
    with pytest.raises(MCPError) as e:  # refused: nothing would ever fire
        await b.subscribe_resource(uri)
    assert e.value.error.data == {"uri": uri}
    out["subscribe"] = e.value.error.code
    return out


async def _kept_apart(url: str, a_ctx, b_ctx, a_bearer=None, b_bearer=None) -> None:
    async with peer(url, a_ctx, a_bearer) as a, peer(url, b_ctx, b_bearer) as b:
        r = await a.call_tool("subagent.spawn", {"instruction": "[slow] review", "async": True})
        handle = r.structured_content["handle"]
        assert handle == "served.1" and r.structured_content["status"] == "running"
        mine = await a.call_tool("subagent.status", {"handle": handle})
        assert not mine.is_error and mine.structured_content["status"] == "running"

        nested = f"{handle}.1"
        async def nested_status():  # once the served run has spawned its own child
            r = await a.call_tool("subagent.status", {"handle": nested})
            return None if r.is_error else r
        r = await until(nested_status, what=f"{nested} spawned")
        assert r.structured_content["status"] == "running"

        theirs = await _unknown_answers(b, handle)
        never = await _unknown_answers(b, "served.77")
        assert theirs == never
        assert await _unknown_answers(b, nested) == await _unknown_answers(b, "served.77.1")
        assert theirs["subagent.status"] == (True, "unknown handle: <h>")
        assert theirs["read"] == -32002 and theirs["subscribe"] == -32602
        status = (await b.read_resource("agent://status")).contents[0].text
        assert handle not in status

        # B's cancel did nothing: A's run is still running, and A can end it
        mine = await a.call_tool("subagent.status", {"handle": handle})
        assert mine.structured_content["status"] == "running"
        r = await a.call_tool("subagent.cancel", {"handle": handle})
        assert not r.is_error and r.structured_content["status"] == "cancelled"


def _worker(agentd_bin, tmp, pki, port, *extra, env=None) -> Agentd:
    return Agentd([agentd_bin, "--instruction", "Be a reusable code-review worker",
                   "--intelligence", f"playback:{_book(tmp)}", "--mode", "reactive",
                   "--subscribe", "file:///nowhere", "--serve-mcp", f"https://127.0.0.1:{port}",
                   "--serve-cert", str(pki.cert), "--serve-key", str(pki.key), *extra],
                  tmp, "worker", env=env)


async def test_two_mtls_peers_with_different_subjects(agentd_bin, tmp_path) -> None:
    pki = Pki(tmp_path)
    port = peers.free_port()
    worker = _worker(agentd_bin, tmp_path, pki, port, "--serve-client-ca", str(pki.ca))
    try:
        worker.wait_event("mcp.serve.listening")
        await _kept_apart(f"https://127.0.0.1:{port}/mcp", pki.context("peer-a"),
                          pki.context("peer-b"))
    finally:
        assert worker.stop() == 130


async def test_two_named_bearers(agentd_bin, tmp_path) -> None:
    pki = Pki(tmp_path)
    port = peers.free_port()
    cfg = tmp_path / "worker.toml"
    cfg.write_text('[serve_bearers]\nalice = "{{secret:ALICE_TOKEN}}"\n'
                   'bob = "{{secret:BOB_TOKEN}}"\n')
    env = {"AGENTD_SECRET_ALICE_TOKEN": TOKENS["alice"], "AGENTD_SECRET_BOB_TOKEN": TOKENS["bob"]}
    worker = _worker(agentd_bin, tmp_path, pki, port, "--config", str(cfg), env=env)
    try:
        worker.wait_event("mcp.serve.listening")
        ctx = pki.context(None)
        await _kept_apart(f"https://127.0.0.1:{port}/", ctx, ctx, TOKENS["alice"], TOKENS["bob"])
        # a token that is neither is refused before MCP
        async with httpx2.AsyncClient(verify=ctx, timeout=30) as http:
            resp = await http.post(f"https://127.0.0.1:{port}/mcp", json={},
                                   headers={"Authorization": "Bearer nope"})
            assert resp.status_code == 401
    finally:
        assert worker.stop() == 130
    text = worker.err.read_text()
    assert all(tok not in text for tok in TOKENS.values())


async def test_the_roots_own_loop_acts_only_on_its_own_subtree(agentd_bin, tmp_path) -> None:
    """A task-mode root serving its self-MCP: a peer spawns served.1; the root's
    model then tries to cancel, status and read it and is told it is unknown."""
    book = tmp_path / "root.playback.json"
    book.write_text(json.dumps({"playback": 1, "scripts": [
        {"name": "quick", "match": "[quick]", "turns": [{"content": "peer's result"}]},
        {"name": "root", "match": "[root]", "turns": [
            {"delay": 8, "tool_calls": [{"name": "agentd__subagent_cancel",
                                         "arguments": {"handle": "served.1"}}]},
            {"expect": "unknown handle: served.1",
             "tool_calls": [{"name": "agentd__subagent_status",
                             "arguments": {"handle": "served.1"}}]},
            {"expect": "unknown handle: served.1",
             "tool_calls": [{"name": "agentd__read_resource",
                             "arguments": {"uri": "agent://subagent/served.1"}}]},
            {"expect": "not found", "content": "left it alone"},
        ]},
    ]}))
    port = peers.free_port()
    root = Agentd([agentd_bin, "--instruction", "[root] look around", "--intelligence",
                   f"playback:{book}", "--serve-mcp", f"http://127.0.0.1:{port}"],
                  tmp_path, "root")
    try:
        root.wait_event("mcp.serve.listening")
        async with streamable_http_client(f"http://127.0.0.1:{port}/") as streams, \
                ClientSession(streams[0], streams[1]) as peer_session:
            await peer_session.initialize()
            r = await peer_session.call_tool("subagent.spawn",
                                             {"instruction": "[quick] x", "async": True})
            assert r.structured_content["handle"] == "served.1"
            spawned_at = root.events("mcp.serve.call")[-1]["ts"]
            code = root.proc.wait(timeout=120)
    finally:
        if root.proc.poll() is None:
            root.stop()
    assert code == 0, root.err.read_text()[-3000:]
    assert root.result()["result"] == "left it alone"
    calls = [e for e in root.events("tool.call") if e["tool"] == "agentd__subagent_cancel"]
    assert calls and calls[0]["ts"] > spawned_at  # served.1 existed when the root tried
    # nothing cancelled the peer's run: it completed on its own
    exits = [e for e in root.events("subagent.exit") if e.get("handle") == "served.1"]
    assert [e["status"] for e in exits] == ["completed"]
