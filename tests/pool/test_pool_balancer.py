"""Three pool workers behind HAProxy (Debian's package) in round-robin HTTP mode,
no stickiness: the official MCP Python SDK 2.3 ``Client`` in auto mode (MCP
2026-07-28, stateless) spawns, polls, reads, sends to a warm session, listens
and cancels through the one balancer URL; its requests land on every worker,
so most of them reach handles another worker owns (the relay).

HAProxy is installed by the fixture when missing (``apt-get install -y
haproxy``); when it cannot be had the test skips locally and fails under
CI=true (tests/support/peers.py ``unavailable``).
"""

from __future__ import annotations

import asyncio
import json

import peers
import pytest
from conformance_runs import SCENARIOS, run_scenario
from pool_harness import TOKENS, Pool, balancer, sdk_client

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")
httpx2 = peers.import_peer("httpx2")
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), peers.LEGACY_SUBSCRIBE,
              pytest.mark.timeout(600)]


async def test_sdk_auto_mode_through_a_round_robin_balancer(agentd_bin, tmp_path) -> None:
    pool = Pool(tmp_path)
    try:
        for wid in pool.ports:
            pool.start(agentd_bin, wid)
        with balancer(tmp_path, pool.ports) as url:
            async with sdk_client(url, "alice") as c:
                assert c.protocol_version == "2026-07-28"
                spawned: dict[str, str] = {}  # owner -> a handle it minted
                for _ in range(9):  # round robin: runs land on every worker
                    r = await c.call_tool("subagent.spawn", {"instruction": "[slow] x",
                                                             "async": True})
                    assert not r.is_error, r.content[0].text
                    handle = r.structured_content["handle"]
                    spawned.setdefault(handle.split(".")[1], handle)
                    if len(spawned) == len(pool.ports):
                        break
                assert set(spawned) == set(pool.ports), spawned
                handles = list(spawned.values())
                for _ in range(2):  # every handle, through whichever worker answers
                    for h in handles:
                        r = await c.call_tool("subagent.status", {"handle": h})
                        assert not r.is_error, r.content[0].text
                        assert r.structured_content["status"] == "running"
                        body = json.loads((await c.read_resource(
                            f"agent://subagent/{h}")).contents[0].text)
                        assert body["handle"] == h and body["done"] is False
                r = await c.call_tool("subagent.spawn", {"instruction": "[session] s",
                                                         "warm": True})
                warm = r.structured_content["handle"]
                r = await c.call_tool("subagent.send", {"handle": warm, "message": "again"})
                assert not r.is_error and r.structured_content["result"] == "second answer"
                for h in handles:
                    r = await c.call_tool("subagent.cancel", {"handle": h})
                    assert not r.is_error and r.structured_content["status"] == "cancelled"
                for h in handles:
                    r = await c.call_tool("subagent.status", {"handle": h})
                    assert r.structured_content["status"] == "cancelled"
            async with sdk_client(url, "bob") as b:  # the other principal, through any worker
                for h in handles * 2:
                    r = await b.call_tool("subagent.status", {"handle": h})
                    assert r.is_error and r.content[0].text == f"unknown handle: {h}"
        # the balancer spread the calls, and handles were relayed to their owners
        for wid, worker in pool.workers.items():
            assert worker.events("mcp.serve.call"), wid
            assert worker.events("pool.relayed"), wid
    finally:
        pool.stop()


async def test_handle_header_routing_sends_each_call_to_its_owner(agentd_bin, tmp_path) -> None:
    """With x-mcp-header "Handle" declared in pool mode, the SDK sends
    Mcp-Param-Handle; a balancer routing on it (and on Mcp-Name for reads)
    reaches the owner directly, so nothing is relayed."""
    pool = Pool(tmp_path)
    try:
        for wid in pool.ports:
            pool.start(agentd_bin, wid)
        with balancer(tmp_path, pool.ports, route=True) as url:
            async with sdk_client(url, "alice") as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                for name in ("subagent.status", "subagent.send", "subagent.cancel"):
                    prop = tools[name].input_schema["properties"]["handle"]
                    assert prop["x-mcp-header"] == "Handle"
                handles = set()
                for _ in range(6):
                    r = await c.call_tool("subagent.spawn", {"instruction": "[slow] x",
                                                             "async": True})
                    handles.add(r.structured_content["handle"])
                assert len({h.split(".")[1] for h in handles}) > 1
                for h in sorted(handles):
                    r = await c.call_tool("subagent.status", {"handle": h})
                    assert r.structured_content["status"] == "running"
                    body = json.loads((await c.read_resource(
                        f"agent://subagent/{h}")).contents[0].text)
                    assert body["handle"] == h
                    r = await c.call_tool("subagent.cancel", {"handle": h})
                    assert r.structured_content["status"] == "cancelled"
        assert all(not w.events("pool.relayed") for w in pool.workers.values())
    finally:
        pool.stop()


async def test_sdk_legacy_sessions_through_a_round_robin_balancer(agentd_bin, tmp_path) -> None:
    """2025-11-25 sessions without stickiness: every request of a session (POSTs,
    the GET stream) reaches the worker holding it, whichever worker HAProxy
    picked; the subscribed run's `updated` arrives over the relayed stream."""
    from mcp import ClientSession, types

    pool = Pool(tmp_path)
    try:
        for wid in pool.ports:
            pool.start(agentd_bin, wid)
        with balancer(tmp_path, pool.ports) as url:
            updates: asyncio.Queue[str] = asyncio.Queue()

            async def on_message(message) -> None:
                if isinstance(message, types.ResourceUpdatedNotification):
                    updates.put_nowait(str(message.params.uri))

            async with httpx2.AsyncClient(headers={
                    "Authorization": f"Bearer {TOKENS['alice']}"}, timeout=120) as http, \
                    streamable_http_client(url, http_client=http) as streams, \
                    ClientSession(streams[0], streams[1], message_handler=on_message) as s:
                await s.initialize()
                r = await s.call_tool("subagent.spawn", {"instruction": "[slow] x",
                                                         "async": True})
                handle = r.structured_content["handle"]
                uri = f"agent://subagent/{handle}"
                await s.subscribe_resource(uri)
                for _ in range(4):
                    r = await s.call_tool("subagent.status", {"handle": handle})
                    assert r.structured_content["status"] == "running"
                r = await s.call_tool("subagent.spawn", {"instruction": "[session] s",
                                                         "warm": True})
                warm = r.structured_content["handle"]
                r = await s.call_tool("subagent.send", {"handle": warm, "message": "again"})
                assert r.structured_content["result"] == "second answer"
                r = await s.call_tool("subagent.cancel", {"handle": handle})
                assert r.structured_content["status"] == "cancelled"
                async with asyncio.timeout(60):
                    assert await updates.get() == uri
                body = json.loads((await s.read_resource(uri)).contents[0].text)
                assert body["status"] == "cancelled"
        assert all(not w.events("pool.relay_failed") for w in pool.workers.values())
        # the session lived on the worker its handles name; the others proxied to it
        owner = handle.split(".")[1]
        proxied = 0
        async with httpx2.AsyncClient(headers={
                "Authorization": f"Bearer {TOKENS['alice']}"}, timeout=30) as http:
            for wid, port in pool.ports.items():
                text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
                line = [ln for ln in text.splitlines() if ln.startswith(
                    'agentd_pool_relayed_total{direction="out",op="session"}')]
                if wid == owner:
                    assert not line
                elif line:
                    proxied += int(float(line[0].split()[-1]))
        assert proxied > 0
    finally:
        pool.stop()


@pytest.fixture(scope="module")
def open_pool_url(agentd_bin, tmp_path_factory):
    """Three workers without bearers (the suite sends none) behind the balancer."""
    peers.ensure_npm_peers("conformance", "node")
    tmp = tmp_path_factory.mktemp("pool-conformance")
    pool = Pool(tmp, bearers=False)
    try:
        for wid in pool.ports:
            pool.start(agentd_bin, wid)
        with balancer(tmp, pool.ports) as url:
            yield url
    finally:
        pool.stop()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance_server_scenarios_through_the_balancer(open_pool_url, scenario,
                                                           tmp_path) -> None:
    run_scenario(open_pool_url, scenario, tmp_path)


_DIAGNOSTIC = "Not testable: server does not list the diagnostic tool"
_LIST_CHANGED = "List-changed-capable servers notify listen streams"
# The suite's 2026-07-28 server scenarios that apply to the self-MCP (the
# others need the suite's fixture tools, prompts or completions, which the
# self-MCP does not offer: docs/server.md), with the checks inside them that
# need such a fixture.
SCENARIOS_2026 = {
    "server-stateless": {
        "sep-2575-server-rejects-undeclared-capability": _DIAGNOSTIC,
        "sep-2575-missing-capability-http-400": _DIAGNOSTIC,
        "sep-2575-http-server-no-independent-requests-on-stream": _DIAGNOSTIC,
        "sep-2575-server-no-log-without-loglevel": _DIAGNOSTIC,
        "sep-2575-server-sends-prompts-list-changed-on-subscription": _LIST_CHANGED,
        "sep-2575-server-sends-tools-list-changed-on-subscription": _LIST_CHANGED,
    },
    "caching": {"sep-2549-prompts-list-caching-hints":
                "prompts/list returned JSON-RPC error -32601"},
    "tools-list": {},
    "resources-list": {},
    "server-sse-multiple-streams": {},
    "dns-rebinding-protection": {},
    "http-header-validation": {},
    "http-custom-header-server-validation": {},
    "sep-2164-resource-not-found": {},
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS_2026))
def test_conformance_2026_server_scenarios_through_the_balancer(open_pool_url, scenario,
                                                                tmp_path) -> None:
    """The suite's pre-release (tests/peers_2026) at ``--spec-version 2026-07-28``."""
    run_scenario(open_pool_url, scenario, tmp_path, conformance=str(
        peers.ensure_conformance_2026()), spec_version="2026-07-28",
        not_testable=SCENARIOS_2026[scenario])


def test_conformance_session_lifecycle_through_the_balancer(open_pool_url, tmp_path) -> None:
    """2025-11-25 sessions (initialize, use, DELETE) across three round-robin
    workers: each request of the session may land on a worker that relays it
    to the session's owner."""
    run_scenario(open_pool_url, "server-session-lifecycle", tmp_path, conformance=str(
        peers.ensure_conformance_2026()), spec_version="2025-11-25")
