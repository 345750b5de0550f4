"""No brokered answer too big for a child's control wire can end the process (issue 37).

A worker (`agentd --serve-mcp`, the real console script) runs two async
subagents spawned over its self-MCP by the official SDK's client. One of them
is answered with 20 MiB -- a model answer from the test gateway
(tests/support/gateway.py), a tool result, or a resource read from a hostile MCP server
(tests/support/oversize_server.py) -- all under agentd's 64 MiB bounds of the gateway
and MCP reads, all over the 16 MiB control frame. The other is alive meanwhile:
its model call is held by a gate until the first has ended. The worker lives
on, the big run ends `failed` naming the bound (its result and the
`subagent.io_oversize` log line), and the other run then completes.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import peers
import pytest
from agentd_proc import Agentd
from gateway import Gateway, Reply
from waiting import until

from agentd.child.control import answer_limit
from agentd_native import MAX_FRAME

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

pytestmark = pytest.mark.timeout(180)

BIG = 20 * 1024 * 1024  # over the frame, under --intelligence-max-bytes / --mcp-max-bytes
LIMIT = answer_limit(MAX_FRAME)


def _instruction(body: dict[str, Any]) -> str:
    return next((m["content"] for m in body["messages"] if m["role"] == "user"), "")


class Router:
    """The gateway's answers by instruction: `[small]` waits for `gate` and answers;
    `[big-answer]` is answered with BIG bytes of text; `[big-tool]` / `[big-read]`
    call the oversize server's `blob` / read `blob://huge` once; `[big-result]` is
    answered with a JSON array that fits the wire as text but, distilled for a
    JSON output contract, is a result of over BIG bytes; anything else (the
    worker's own reactive loop) idles."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.seen: list[str] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        text = _instruction(body)
        self.seen.append(text)
        answered = any(m["role"] == "tool" for m in body["messages"])
        if "[small]" in text:
            return Reply(content="small done", gate=self.gate)
        if "[big-answer]" in text:
            return Reply.text("x" * BIG)
        if "[big-tool]" in text and not answered:
            return Reply.tools(("huge__blob", {}))
        if "[big-read]" in text and not answered:
            return Reply.tools(("agentd__read_resource", {"uri": "blob://huge"}))
        if "[big-result]" in text:  # 4 bytes a number: the JSON result takes 13 each
            return Reply.text("[" + ",".join(["1e9"] * (BIG // 13 + 1)) + "]")
        return Reply.text("idle")


async def _status(session: ClientSession, handle: str) -> dict[str, Any]:
    r = await session.call_tool("subagent.status", {"handle": handle})
    assert r.structured_content is not None, r
    return r.structured_content


async def _ended(session: ClientSession, handle: str) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        state = await _status(session, handle)
        return state if state["status"] != "running" else None
    return await until(done, limit=120)


async def _spawn(session: ClientSession, instruction: str, **extra: Any) -> str:
    r = await session.call_tool("subagent.spawn",
                                {"instruction": instruction, "async": True, **extra})
    assert not r.is_error and r.structured_content is not None, r
    return r.structured_content["handle"]


async def _survives(agentd_bin: str, tmp_path, big: str, what: str,
                    mcp_url: str | None = None, **spawn: Any) -> None:
    router = Router()
    port = peers.free_port()
    async with Gateway([router] * 64) as gw:
        ag = Agentd([agentd_bin, "--instruction", "Be a worker", "--intelligence", gw.url,
                     "--model", "test", "--mode", "reactive", "--subscribe", "file:///nowhere",
                     "--serve-mcp", f"http://127.0.0.1:{port}",
                     *(("--mcp", f"huge={mcp_url}") if mcp_url else ())], tmp_path)
        try:
            await until(lambda: ag.events("mcp.serve.listening") or ag.proc.poll() is not None)
            assert ag.proc.poll() is None, ag.err.read_text()[-3000:]
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams, \
                    ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                small = await _spawn(session, "[small] answer when asked")
                await until(lambda: any("[small]" in t for t in router.seen))  # in flight
                huge = await _spawn(session, f"{big} take it all", **spawn)
                state = await _ended(session, huge)
                assert ag.proc.poll() is None, ag.err.read_text()[-3000:]  # the worker lives
                assert state["status"] == "failed", state
                error = state["result"]["error"]
                assert what in error and f"{LIMIT} bytes" in error and "control wire" in error
                assert (await _status(session, small))["status"] == "running"  # untouched
                router.gate.set()
                done = await _ended(session, small)
                assert done["status"] == "completed" and done["result"] == "small done", done
                assert ag.proc.poll() is None
            if not spawn:  # the root refused the answer (a result: the child did)
                [line] = [e for e in ag.events("subagent.io_oversize")
                          if e["handle"] == huge]
                assert line["limit"] == LIMIT and line["bytes"] > BIG
            # logged once the child's process is gone, which may come after its
            # status read terminal (the kill ladder)
            [end] = await until(lambda: [e for e in ag.events("subagent.exit")
                                         if e["handle"] == huge], what="huge's subagent.exit")
            assert end["status"] == "failed" and f"{LIMIT} bytes" in end["reason"]
            assert not ag.events("run.failed")
        finally:
            code = ag.stop(signal.SIGTERM)
        assert code == 130, ag.err.read_text()[-3000:]


async def test_a_model_answer_over_the_frame_fails_its_run_only(agentd_bin, tmp_path):
    await _survives(agentd_bin, tmp_path, "[big-answer]", "the model's answer")


@pytest.fixture(scope="module")
def oversize_server():
    peers.require_modules("mcp", "uvicorn", "starlette")
    with peers.python_peer("oversize_server.py", str(BIG)) as peer:
        yield peer


async def test_a_tool_result_over_the_frame_fails_its_run_only(
        agentd_bin, tmp_path, oversize_server):
    await _survives(agentd_bin, tmp_path, "[big-tool]", "the result of tool 'huge__blob'",
                    oversize_server.url)


async def test_a_resource_read_over_the_frame_fails_its_run_only(
        agentd_bin, tmp_path, oversize_server):
    await _survives(agentd_bin, tmp_path, "[big-read]", "the read of resource 'blob://huge'",
                    oversize_server.url)


async def test_a_result_over_the_bound_fails_its_run_only(agentd_bin, tmp_path):
    """The child holds its own result to the bound: its parent wraps it again."""
    await _survives(agentd_bin, tmp_path, "[big-result]", "the result of",
                    output_contract="json")
