"""A pool of three real workers on loopback: any worker answers any handle.

Three console-script workers (`--pool-id`, `--pool-peer`, `AGENTD_POOL_KEY`)
each serving their self-MCP with two named bearers (two principals); the
official MCP Python SDK talks to each worker directly.  A run spawned on one
worker is read, polled, sent to and cancelled through every other worker (the
relay), never reachable by the other principal, and a forged handle is
unknown everywhere.  An owner SIGKILLed and restarted answers its former
incarnation's handle as a terminal "worker lost" run through its peers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import peers
import pytest
from agentd_proc import run_agentd
from pool_harness import IDS, POOL_KEY, TOKENS, Pool, client, httpx2, pool_of_three

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), peers.LEGACY_SUBSCRIBE,
              pytest.mark.timeout(300)]

async def _answers(session, handle: str) -> dict:
    """Everything a caller learns of `handle`, with the handle's text masked."""
    out = {}
    for tool, args in (("subagent.status", {}), ("subagent.send", {"message": "hi"}),
                       ("subagent.cancel", {})):
        r = await session.call_tool(tool, {"handle": handle, **args})
        out[tool] = (r.is_error, r.content[0].text.replace(handle, "<h>"))
    uri = f"agent://subagent/{handle}"
    with pytest.raises(MCPError) as e:
        await session.read_resource(uri)
    out["read"] = e.value.error.code
    with pytest.raises(MCPError) as e:
        await session.subscribe_resource(uri)
    out["subscribe"] = e.value.error.code
    return out


def _forge(handle: str) -> str:
    token = handle.split(".")[2]
    flipped = ("b" if token[5] == "a" else "a")
    return f"served.w1.{token[:5]}{flipped}{token[6:]}"


async def test_every_worker_answers_every_handle(agentd_bin, tmp_path) -> None:
    async with pool_of_three(agentd_bin, tmp_path) as pool:
        async with client(pool.url("w1"), "alice") as a1:
            r = await a1.call_tool("subagent.spawn", {"instruction": "[slow] x", "async": True})
            handle = r.structured_content["handle"]
            assert handle.startswith("served.w1.") and len(handle.split(".")) == 3
            r = await a1.call_tool("subagent.spawn", {"instruction": "[session] s",
                                                      "warm": True})
            warm = r.structured_content["handle"]
        for wid in IDS:  # every worker answers w1's handles, for their principal
            async with client(pool.url(wid), "alice") as a:
                r = await a.call_tool("subagent.status", {"handle": handle})
                assert not r.is_error, r.content[0].text
                assert r.structured_content["handle"] == handle
                assert r.structured_content["status"] == "running"
                body = json.loads((await a.read_resource(
                    f"agent://subagent/{handle}")).contents[0].text)
                assert body["handle"] == handle and body["done"] is False
        async with client(pool.url("w3"), "alice") as a3:  # send to a warm session via w3
            r = await a3.call_tool("subagent.send", {"handle": warm, "message": "again"})
            assert not r.is_error, r.content[0].text
            assert r.structured_content["handle"] == warm
            assert r.structured_content["result"] == "second answer"
        # the other principal, anywhere, learns exactly what a forged handle tells it
        forged = _forge(handle)
        for wid in IDS:
            async with client(pool.url(wid), "bob") as b:
                theirs = await _answers(b, handle)
                assert theirs == await _answers(b, forged)
                assert theirs["subagent.status"] == (True, "unknown handle: <h>")
                assert theirs["read"] == -32002 and theirs["subscribe"] == -32602
            async with client(pool.url(wid), "alice") as a:
                r = await a.call_tool("subagent.status", {"handle": forged})
                assert r.is_error and r.content[0].text == f"unknown handle: {forged}"
        # a forged handle is refused before any relay: w1 never saw one for it
        relayed = pool.workers["w1"].events("pool.relayed")
        assert relayed and all(e["kind"] == "body" for e in relayed)
        # the link itself: unsigned, or signed with another key -> 401, nothing run
        from agentd.pool import handles as ph

        async with httpx2.AsyncClient(timeout=30) as http:
            relay = f"http://127.0.0.1:{pool.ports['w1']}/pool/relay"
            body = json.dumps({"op": "cancel", "handle": handle}).encode()
            assert (await http.post(relay, content=body)).status_code == 401
            forged_sig = ph.sign_request(ph.PoolKey(b"not-the-pool-key-0000"), "w2",
                                         time.time(), "nonce-forged-1",
                                         "POST", "/pool/relay", body, "alice",
                                         receiver="w1")
            assert (await http.post(relay, content=body, headers=forged_sig)).status_code == 401
        # each worker shows its share: agent://status and /metrics
        async with client(pool.url("w2"), "alice") as a2:
            status = json.loads((await a2.read_resource("agent://status")).contents[0].text)
        assert status["pool"]["id"] == "w2" and status["pool"]["served_runs"] == 0
        assert set(status["pool"]["peers"]) == {"w1", "w3"}
        async with httpx2.AsyncClient(timeout=30, headers={
                "Authorization": f"Bearer {TOKENS['alice']}"}) as http:
            text = (await http.get(f"http://127.0.0.1:{pool.ports['w1']}/metrics")).text
            assert 'agentd_pool_relayed_total{direction="in",op="status"}' in text
            assert 'agentd_pool_peers{status="alive"}' in text
            text = (await http.get(f"http://127.0.0.1:{pool.ports['w2']}/metrics")).text
            assert 'agentd_pool_relayed_total{direction="out",op="status"}' in text
        # alice cancels through w2; w3 then reads it cancelled
        async with client(pool.url("w2"), "alice") as a2:
            r = await a2.call_tool("subagent.cancel", {"handle": handle})
            assert not r.is_error and r.structured_content["status"] == "cancelled"
        async with client(pool.url("w3"), "alice") as a3:
            r = await a3.call_tool("subagent.status", {"handle": handle})
            assert r.structured_content["status"] == "cancelled"
            assert r.structured_content["done"] is True


async def test_a_killed_owners_handles_read_lost_on_every_worker(agentd_bin, tmp_path) -> None:
    # --pool-dead-after 4: the bound from the kill to "dead" is 4 + 2 + 1 s, not 12
    async with pool_of_three(agentd_bin, tmp_path, ("--pool-dead-after", "4")) as pool:
        for wid in ("w2", "w3"):  # both peers have seen w1 alive
            pool.workers[wid].wait_event("pool.peer", lambda r: r.get("peer") == "w1"
                                         and r.get("status") == "alive")
        async with client(pool.url("w1"), "alice") as a1:
            r = await a1.call_tool("subagent.spawn", {"instruction": "[slow] x", "async": True})
            handle = r.structured_content["handle"]
        w1 = pool.workers["w1"]
        lost = {"handle": handle, "status": "failed", "done": True, "partial": False,
                "result": "worker lost: pool member w1 that ran this subagent is gone"}
        updates: asyncio.Queue[str] = asyncio.Queue()

        async def on_message(message) -> None:
            if isinstance(message, mcp.types.ResourceUpdatedNotification):
                updates.put_nowait(str(message.params.uri))

        async with httpx2.AsyncClient(headers={
                "Authorization": f"Bearer {TOKENS['alice']}"}, timeout=60) as http, \
                streamable_http_client(pool.url("w3"), http_client=http) as streams, \
                ClientSession(streams[0], streams[1], message_handler=on_message) as s3:
            await s3.initialize()
            await s3.subscribe_resource(f"agent://subagent/{handle}")  # w1's, through w3
            w1.proc.send_signal(signal.SIGKILL)
            w1.proc.wait()
            dead = pool.workers["w3"].wait_event("pool.peer", lambda r: r.get("peer") == "w1"
                                                 and r.get("status") == "dead")
            assert dead[0]["dead_after"] == 4.0  # the flag's, not the default 9
            async with asyncio.timeout(60):  # the subscriber hears of the loss
                assert await updates.get() == f"agent://subagent/{handle}"
            body = json.loads((await s3.read_resource(
                f"agent://subagent/{handle}")).contents[0].text)
            assert body == lost
        async with client(pool.url("w2"), "alice") as a2:
            r = await a2.call_tool("subagent.status", {"handle": handle})
            # before w2 calls w1 dead: said unreachable, never "unknown"
            assert (r.is_error and r.content[0].text == "pool: worker w1 is unreachable") \
                or r.structured_content == lost
        for wid in ("w2", "w3"):
            pool.workers[wid].wait_event("pool.peer", lambda r: r.get("peer") == "w1"
                                         and r.get("status") == "dead")
            async with client(pool.url(wid), "alice") as a:
                r = await a.call_tool("subagent.status", {"handle": handle})
                assert not r.is_error and r.structured_content == lost
                body = json.loads((await a.read_resource(
                    f"agent://subagent/{handle}")).contents[0].text)
                assert body == lost
            async with client(pool.url(wid), "bob") as b:  # still not bob's
                r = await b.call_tool("subagent.status", {"handle": handle})
                assert r.is_error and r.content[0].text == f"unknown handle: {handle}"
        pool.start(agentd_bin, "w1", run=1,  # the pod comes back under the same id
                   extra=("--pool-dead-after", "4"))
        for wid in IDS:  # its former incarnation's handle stays lost, on w1 itself too
            async with client(pool.url(wid), "alice") as a:
                r = await a.call_tool("subagent.status", {"handle": handle})
                assert not r.is_error and r.structured_content == lost


@pytest.mark.parametrize(("args", "env", "words"), [
    (["--pool-id", "w1"], {}, "pool mode needs --pool-key"),
    (["--pool-peer", "w2=http://127.0.0.1:9"], {}, "pool mode needs --pool-key"),
    (["--pool-id", "w1"], {"AGENTD_POOL_KEY": "short"}, "--pool-key: at least 16 bytes"),
    (["--pool-id", "W_1"], {"AGENTD_POOL_KEY": POOL_KEY}, "expected a DNS label"),
    (["--pool-peer", "nourl"], {"AGENTD_POOL_KEY": POOL_KEY}, "expected ID=<serve-mcp URL>"),
    (["--pool-peer", "w2=http://10.0.0.9:1"], {"AGENTD_POOL_KEY": POOL_KEY},
     "must be https:// or a loopback http://"),
], ids=["id-no-key", "peer-no-key", "short-key", "bad-id", "bad-peer", "plain-http-peer"])
async def test_pool_usage_errors_exit_2(agentd_bin, tmp_path, args, env, words) -> None:
    done = await run_agentd(agentd_bin, ["--instruction", "x", "--intelligence", "playback:none",
                                         "--serve-mcp", "http://127.0.0.1:1", *args],
                            env={**os.environ, **env})
    assert done.rc == 2, done.stderr
    assert words in done.stderr
    assert POOL_KEY not in done.stderr


async def test_pool_flags_need_serve_mcp(agentd_bin) -> None:
    done = await run_agentd(agentd_bin, ["--instruction", "x", "--pool-id", "w1"])
    assert done.rc == 2 and "need --serve-mcp" in done.stderr


def test_pool_from_the_config_file(tmp_path, monkeypatch) -> None:
    """The Kubernetes manifest's shape: pool_key as a secret reference, pool_peers
    listing every member (this worker too, which is left out of its own peers)."""
    from agentd.cli.flags import config_from_flags
    from agentd.errors import ConfigError

    monkeypatch.setenv("AGENTD_SECRET_POOL_KEY", POOL_KEY)
    path = tmp_path / "pool.toml"
    path.write_text('pool_key = "{{secret:POOL_KEY}}"\npool_peers = '
                    '["w1=http://127.0.0.1:7001", "w2=http://127.0.0.1:7002"]\n')
    flags = {"config_file": str(path), "instruction": "x", "pool_id": "w1",
             "serve_mcp": "http://127.0.0.1:7001"}
    pool = config_from_flags(flags).pool
    assert pool is not None and pool.id == "w1" and pool.key == POOL_KEY
    assert [(p.id, p.url) for p in pool.peers] == [("w2", "http://127.0.0.1:7002")]
    assert POOL_KEY not in repr(pool.peers)
    path.write_text(f'pool_key = "{POOL_KEY}"\n')  # the key itself: refused
    with pytest.raises(ConfigError, match="pool_key must be a"):
        config_from_flags(flags)
    path.write_text('pool_peers = "w2=http://127.0.0.1:7002"\n')
    with pytest.raises(ConfigError, match="pool_peers must be an array"):
        config_from_flags(flags)
    # without any pool setting nothing changes: no pool
    assert config_from_flags({"instruction": "x"}).pool is None


async def test_a_worker_at_its_caps_places_the_spawn_on_a_peer(agentd_bin, tmp_path) -> None:
    pool = Pool(tmp_path)
    try:
        pool.start(agentd_bin, "w1", extra=("--max-subagents", "1"))
        for wid in ("w2", "w3"):
            pool.start(agentd_bin, wid)
        for wid in ("w2", "w3"):  # w1 knows both peers have room
            pool.workers["w1"].wait_event("pool.peer", lambda r, w=wid: r.get("peer") == w
                                          and r.get("status") == "alive")
        async with client(pool.url("w1"), "alice") as a1:
            r = await a1.call_tool("subagent.spawn", {"instruction": "[slow] x", "async": True})
            first = r.structured_content["handle"]
            assert first.startswith("served.w1.")
            r = await a1.call_tool("subagent.spawn", {"instruction": "[slow] y", "async": True})
            assert not r.is_error, r.content[0].text
            placed = r.structured_content["handle"]
            owner = placed.split(".")[1]
            assert owner in ("w2", "w3") and r.structured_content["status"] == "running"
            # a sync spawn placed on a peer returns its terminal body
            r = await a1.call_tool("subagent.spawn", {"instruction": "[quick] z"})
            assert not r.is_error and r.structured_content["result"] == "done"
            assert r.structured_content["handle"].split(".")[1] in ("w2", "w3")
            r = await a1.call_tool("subagent.status", {"handle": placed})
            assert r.structured_content["status"] == "running"
        async with client(pool.url(owner), "alice") as a:  # it is the principal's there
            r = await a.call_tool("subagent.cancel", {"handle": placed})
            assert r.structured_content["status"] == "cancelled"
        async with client(pool.url(owner), "bob") as b:
            r = await b.call_tool("subagent.status", {"handle": placed})
            assert r.is_error
        assert pool.workers["w1"].events("pool.placed")
    finally:
        pool.stop()


async def test_subscribe_and_listen_on_a_peers_handle(agentd_bin, tmp_path) -> None:
    """A 2025-11-25 session on w3 subscribes, and a 2026-07-28 listen on w2 names,
    a run w1 owns; cancelling it through w1 reaches both as their `updated`."""
    import asyncio

    from mcp import Client, types
    from mcp.client.subscriptions import ResourceUpdated

    async with pool_of_three(agentd_bin, tmp_path) as pool:
        async with client(pool.url("w1"), "alice") as a1:
            r = await a1.call_tool("subagent.spawn", {"instruction": "[slow] x", "async": True})
            handle = r.structured_content["handle"]
            uri = f"agent://subagent/{handle}"
            updates: asyncio.Queue[str] = asyncio.Queue()

            async def on_message(message) -> None:
                if isinstance(message, types.ResourceUpdatedNotification):
                    updates.put_nowait(str(message.params.uri))

            async with httpx2.AsyncClient(headers={
                    "Authorization": f"Bearer {TOKENS['alice']}"}, timeout=60) as http, \
                    streamable_http_client(pool.url("w3"), http_client=http) as streams, \
                    ClientSession(streams[0], streams[1], message_handler=on_message) as s3, \
                    httpx2.AsyncClient(headers={
                        "Authorization": f"Bearer {TOKENS['alice']}"}, timeout=60) as http2, \
                    Client(streamable_http_client(pool.url("w2"), http_client=http2),
                           mode="auto", cache=None) as c2:
                await s3.initialize()
                await s3.subscribe_resource(uri)
                async with c2.listen(resource_subscriptions=[uri]) as sub:
                    assert sub.honored.resource_subscriptions == [uri]
                    r = await a1.call_tool("subagent.cancel", {"handle": handle})
                    assert r.structured_content["status"] == "cancelled"
                    async with asyncio.timeout(60):
                        assert await anext(aiter(sub)) == ResourceUpdated(uri=uri)
                async with asyncio.timeout(60):
                    assert await updates.get() == uri
        async with client(pool.url("w2"), "bob") as b:  # not bob's: refused everywhere
            with pytest.raises(MCPError) as e:
                await b.subscribe_resource(uri)
            assert e.value.error.code == -32602
