"""Every exit code of design.md, each produced by a real run of the `agentd` console
script: 0 completed, 2 usage, 3 budget (steps and tokens), 4 deadline (in-flight
call cancelled), 5 intelligence, 6 required MCP server, 130 interrupted (SIGINT
and SIGTERM, drained)."""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request

import pytest
from agentd_proc import agentd_env, run_agentd, start_agentd
from gateway import Gateway, Reply
from peers import PeerProcess, free_port, python_peer
from waiting import until


@pytest.fixture(scope="module")
def sdk() -> PeerProcess:
    with python_peer("sdk_servers.py") as peer:
        yield peer


def stats(peer: PeerProcess) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{peer.port}/stats", timeout=10) as r:
        return json.loads(r.read())


async def until_stat(peer: PeerProcess, key: str, before: int) -> int:
    """Readiness wait: the server's counter `key` moved past `before`."""
    async def moved() -> int:
        n = (await asyncio.to_thread(stats, peer))[key]
        return n if n > before else 0
    return await until(moved, limit=15, what=f"the server's {key} past {before}")


async def until_cancelled(peer: PeerProcess, before: int) -> int:
    """The server saw notifications/cancelled for its slow call."""
    return await until_stat(peer, "cancelled", before)


def playback(tmp_path, data: dict) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(data))
    return f"playback:{path}"


def base(intelligence: str, *extra: str) -> list[str]:
    return ["--instruction", "exit code test", "--intelligence", intelligence, *extra]


async def test_exit_0_completed(agentd_bin, sdk, tmp_path) -> None:
    pb = playback(tmp_path, {"turns": [
        {"tool_calls": [{"name": "sdk__add", "arguments": {"a": 2, "b": 3}}]},
        {"expect": "5", "content": "the sum is 5"}]})
    done = await run_agentd(agentd_bin, base(pb, "--mcp", f"sdk={sdk.url}"))
    assert done.rc == 0, done.stderr
    assert done.result == {"run_id": done.result["run_id"], "status": "completed",
                           "partial": False, "result": "the sum is 5", "steps": 2,
                           "usage": {"prompt_tokens": 0, "completion_tokens": 0,
                                     "total_tokens": 0}}


@pytest.mark.parametrize("argv", [
    ["--intelligence", "playback:/nonexistent.json"],  # no --instruction
    ["--instruction", "x", "--intelligence", "playback:/x.json", "--mcp", "=http://127.0.0.1:1/"],
    ["--instruction", "x", "--intelligence", "playback:/x.json",
     "--mcp", "a=http://example.com/mcp"],  # non-loopback http
    ["--instruction", "x", "--intelligence", "ftp://gw/v1"],
    ["--instruction", "x", "--intelligence", "playback:/nonexistent/script.json"],
], ids=["no-instruction", "empty-name", "plain-http", "bad-intelligence", "no-playback"])
async def test_exit_2_usage(agentd_bin, argv) -> None:
    done = await run_agentd(agentd_bin, argv)
    assert done.rc == 2, done.stderr
    assert done.stdout == ""  # before any side effect: no result object


async def test_exit_3_max_steps_partial(agentd_bin, sdk, tmp_path) -> None:
    pb = playback(tmp_path, {"repeat_last": True, "turns": [
        {"content": "still working", "tool_calls": [
            {"name": "sdk__echo", "arguments": {"text": "again"}}]}]})
    done = await run_agentd(agentd_bin, base(pb, "--mcp", f"sdk={sdk.url}",
                                             "--max-steps", "3"))
    assert done.rc == 3, done.stderr
    r = done.result
    assert (r["status"], r["partial"], r["steps"], r["result"]) == (
        "budget_exhausted", True, 3, "still working")
    assert len(done.events("tool.call")) == 3


async def test_exit_3_token_ceiling(agentd_bin, sdk) -> None:
    script = [Reply.tools(("sdk__echo", {"text": "a"}),
                          usage={"prompt_tokens": 600, "completion_tokens": 10}),
              Reply.text("never asked")]
    async with Gateway(script) as gw:
        done = await run_agentd(agentd_bin, base(gw.url, "--mcp", f"sdk={sdk.url}",
                                                 "--token-ceiling", "500"))
    assert done.rc == 3, done.stderr
    assert done.result["status"] == "budget_exhausted" and done.result["partial"] is True
    assert done.result["usage"]["total_tokens"] == 610
    assert len(gw.bodies) == 1  # the ceiling stopped the next model call


async def test_exit_4_deadline_cancels_in_flight_call(agentd_bin, sdk, tmp_path) -> None:
    before = stats(sdk)["cancelled"]
    pb = playback(tmp_path, {"turns": [
        {"tool_calls": [{"name": "sdk__slow", "arguments": {"seconds": 60}}]},
        {"content": "never"}]})
    done = await run_agentd(agentd_bin, base(pb, "--mcp", f"sdk={sdk.url}",
                                             "--deadline", "2"))
    assert done.rc == 4, done.stderr
    assert done.result["status"] == "deadline" and done.result["partial"] is True
    assert done.events("tool.call") and not done.events("tool.result")
    # the in-flight tools/call was abandoned with notifications/cancelled
    assert await until_cancelled(sdk, before) > before


async def test_exit_5_intelligence_unreachable(agentd_bin, sdk) -> None:
    env = agentd_env(AGENTD_INTELLIGENCE_ATTEMPTS="2", AGENTD_INTELLIGENCE_BACKOFF="0.01")
    done = await run_agentd(agentd_bin, base(f"http://127.0.0.1:{free_port()}/v1",
                                             "--mcp", f"sdk={sdk.url}"), env=env)
    assert done.rc == 5, done.stderr
    assert done.result["status"] == "failed" and "after 2 attempts" in done.result["result"]["error"]
    assert done.events("intelligence.unavailable")


async def test_exit_5_gateway_keeps_failing(agentd_bin) -> None:
    env = agentd_env(AGENTD_INTELLIGENCE_ATTEMPTS="3", AGENTD_INTELLIGENCE_BACKOFF="0.01")
    async with Gateway([Reply.error(502)] * 3) as gw:
        done = await run_agentd(agentd_bin, base(gw.url), env=env)
    assert done.rc == 5, done.stderr
    assert len(gw.bodies) == 3


async def test_exit_6_required_server_before_intelligence(agentd_bin) -> None:
    async with Gateway([Reply.text("never")]) as gw:
        done = await run_agentd(agentd_bin, base(
            gw.url, "--mcp", f"dead=http://127.0.0.1:{free_port()}/mcp",
            "--init-timeout", "3"))
    assert done.rc == 6, done.stderr
    assert gw.bodies == []  # the intelligence was never called
    assert done.result["status"] == "failed" and done.result["steps"] == 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_exit_130_signal_drains(agentd_bin, sdk, tmp_path, sig) -> None:
    before = stats(sdk)
    pb = playback(tmp_path, {"turns": [
        {"content": "calling slow", "tool_calls": [
            {"name": "sdk__slow", "arguments": {"seconds": 60}}]},
        {"content": "never"}]})
    agent = await start_agentd(agentd_bin, base(pb, "--mcp", f"sdk={sdk.url}",
                                                "--drain-timeout", "10"))
    await agent.wait_for_event("tool.call", tool="sdk__slow")
    await until_stat(sdk, "calls", before["calls"])  # the call is in flight on the server
    agent.signal(sig)
    done = await agent.done()
    assert done.rc == 130, done.stderr
    r = done.result
    assert (r["status"], r["partial"], r["steps"], r["result"]) == (
        "interrupted", True, 1, "calling slow")
    assert done.events("run.signal")[0]["signal"] == sig.name
    assert await until_cancelled(sdk, before["cancelled"]) > before["cancelled"]
