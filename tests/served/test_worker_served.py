"""Spec §3's worker is a worker: the real console script, serving its self-MCP
over loopback HTTP with a bearer, driven by the official MCP Python SDK client,
its model a test-owned OpenAI-shaped gateway (tests/support/gateway.py).

* its own `--instruction` frames every run it serves: the gateway's system
  message carries it, the peer's instruction stays the user's message;
* its exit line and `agent://status` count the steps and tokens of the runs
  it served (the ledger's tally of the `served` subtree);
* `/metrics` counts the requests it served by method and outcome, the 401s
  its guard refused included.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal

import peers
import pytest
from agentd_proc import agentd_env, start_agentd
from gateway import Gateway, Reply

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")
httpx2 = peers.import_peer("httpx2")
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TOKEN = "rev-tok-3f9a1c"
FRAMING = "Be a reusable code-review worker"
SPAWNS = 3
USAGE = {"prompt_tokens": 100, "completion_tokens": 20}


@contextlib.asynccontextmanager
async def peer(url: str, bearer: str):
    headers = {"Authorization": f"Bearer {bearer}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            streamable_http_client(url, http_client=http) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


def served_count(text: str, method: str, outcome: str) -> float:
    line = f'agentd_served_requests_total{{method="{method}",outcome="{outcome}"}} '
    found = re.search("^" + re.escape(line) + r"(\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


async def test_worker_frames_served_runs_and_counts_them(agentd_bin) -> None:
    port = peers.free_port()
    base = f"http://127.0.0.1:{port}"
    replies = [Reply.text(f"LGTM-{n}", usage=USAGE) for n in range(SPAWNS)]
    async with Gateway(replies) as gw:
        ag = await start_agentd(agentd_bin, [
            "--instruction", FRAMING, "--intelligence", gw.url,
            "--mode", "reactive", "--subscribe", "file:///nowhere",
            "--serve-mcp", base, "--serve-bearer", TOKEN], env=agentd_env())
        try:
            await ag.wait_for_event("mcp.serve.listening")
            async with httpx2.AsyncClient(timeout=30) as http:
                refused = await http.post(f"{base}/mcp", json={})  # no bearer: 401
                assert refused.status_code == 401
            async with peer(f"{base}/mcp", TOKEN) as session:
                for n in range(SPAWNS):
                    r = await session.call_tool("subagent.spawn",
                                                {"instruction": f"[review] file{n}.py"})
                    assert not r.is_error, r.content
                    assert r.structured_content["status"] == "completed"
                read = await session.read_resource("agent://status")
                status = json.loads(read.contents[0].text)
            async with httpx2.AsyncClient(timeout=30) as http:
                got = await http.get(f"{base}/metrics",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
                assert got.status_code == 200
                metrics = got.text
        finally:
            ag.signal(signal.SIGTERM)
            done = await ag.done()
    assert done.rc == 130, done.stderr[-3000:]
    # the worker's instruction frames every served run; the peer's is the user's task
    assert len(gw.bodies) == SPAWNS
    for n, body in enumerate(sorted(gw.bodies, key=lambda b: b["messages"][1]["content"])):
        system, task = body["messages"][0], body["messages"][1]
        assert system["role"] == "system" and FRAMING in system["content"]
        assert task == {"role": "user", "content": f"[review] file{n}.py"}
    # agent://status and the exit line count what was served
    spent = {"prompt_tokens": SPAWNS * 100, "completion_tokens": SPAWNS * 20,
             "total_tokens": SPAWNS * 120}
    assert status["spawns"]["completed"] == SPAWNS
    assert status["served"] == {"steps": SPAWNS, "usage": spent}
    out = done.result
    assert out["status"] == "interrupted"
    assert out["steps"] == SPAWNS and out["usage"] == spent
    (line,) = done.events("run.served")
    assert line["steps"] == SPAWNS and line["total_tokens"] == SPAWNS * 120
    # /metrics: served requests by method and outcome, the refusal included
    assert served_count(metrics, "-", "unauthorized") == 1
    assert served_count(metrics, "initialize", "ok") == 1
    assert served_count(metrics, "tools/call", "ok") == SPAWNS
    assert served_count(metrics, "resources/read", "ok") == 1
    assert TOKEN not in done.stderr + done.stdout
