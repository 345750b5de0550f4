"""A hostile or broken SSE peer never exhausts or hangs agentd (issue 28, the
byte layer's rows): the real `agentd` console script against the peers of
`tests/support/hostile_sse_server.py` on loopback.

* an MCP server answering `tools/call` with one endless SSE event: the stream
  is dropped at `--sse-event-bytes` (`mcp.fault` names the limit), the call is
  a fault the model is told of, the run completes; agentd's peak RSS grew by no
  more than the limit + 32 MiB;
* an MCP server that sends an absurd `retry:` (20 digits, 400 digits) and cuts
  the stream: the resumption GET with `Last-Event-ID` arrives (an event the
  test waits on; without the clamp it would be put off for ages) and the call
  gets its answer;
* a gateway streaming one endless event to a `stream: true` completion: exit 5
  (`intelligence.limit` names the limit), bounded RSS;
* a gateway whose non-streamed answer never ends: exit 5 the same way
  (`--intelligence-max-bytes`);
* the transport alone: the GET stream's flood, a chunked JSON answer, and the
  knobs' validation.

Waits are hang guards, never speed assertions (the figures live in
benchmarks/bench_hostile.py).
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from agentd_proc import start_agentd
from gateway import Gateway, Reply
from hostile_sse_server import SESSION, HostileGateway, HostileMCP

from agentd.config.build import build
from agentd.config.model import StreamBounds
from agentd.errors import ConfigError
from agentd.mcp.client.answered import Answered
from agentd.mcp.client.rules.faults import HTTPStatusError, TransportError, classify
from agentd.mcp.client.transport import StreamableHTTPTransport

LIMIT = 8 * 1024 * 1024  # a small event bound keeps the test cheap
SLACK_KIB = 32 * 1024


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr


def _growth_bounded(peer) -> None:
    assert peer.baseline_kib and peer.peak_kib, "the peer measured nothing"
    growth = peer.peak_kib - peer.baseline_kib
    assert growth <= LIMIT // 1024 + SLACK_KIB, (
        f"RSS grew {growth} KiB while flooded (limit {LIMIT // 1024} KiB + {SLACK_KIB})")


async def test_an_endless_event_on_a_tool_call_is_dropped_at_the_bound(agentd_bin) -> None:
    script = [Reply.tools(("hostile__flood", {})), Reply.text("gave up on the flood")]
    async with HostileMCP() as mcp, Gateway(script) as gw:
        agent = await start_agentd(agentd_bin, [
            "--instruction", "call the flood tool", "--intelligence", gw.url,
            "--mcp", f"hostile={mcp.url}", "--sse-event-bytes", str(LIMIT),
            "--deadline", "120"])
        mcp.pid = agent.proc.pid
        await asyncio.wait_for(mcp.dropped.wait(), 120)  # hang guard
        done = await agent.done()
    assert done.rc == 0, done.stderr
    assert done.result["status"] == "completed"
    assert done.result["result"] == "gave up on the flood"
    _no_traceback(done.stderr)
    faults = done.events("mcp.fault")
    assert faults and faults[0]["server"] == "hostile", done.stderr
    assert "sse_event_bytes" in faults[0]["fault"] and str(LIMIT) in faults[0]["fault"]
    assert mcp.flood_sent < 4 * LIMIT  # dropped near the bound, not read on and on
    # the model was told the call failed (a fault, never the flood as tool output)
    told = gw.bodies[1]["messages"][-1]["content"]
    assert "sse_event_bytes" in told and "x" * 1000 not in told
    _growth_bounded(mcp)


@pytest.mark.parametrize("retry", [b"100000000000000000000", b"9" * 400],
                         ids=["1e20-ms", "400-digits"])
async def test_an_absurd_retry_is_clamped_and_the_stream_resumed(agentd_bin, retry) -> None:
    script = [Reply.tools(("hostile__cut", {})), Reply.text("got it back")]
    async with HostileMCP(retry=retry) as mcp, Gateway(script) as gw:
        agent = await start_agentd(agentd_bin, [
            "--instruction", "call the cut tool", "--intelligence", gw.url,
            "--mcp", f"hostile={mcp.url}", "--sse-retry-max-ms", "200"])
        await asyncio.wait_for(mcp.resumed.wait(), 60)  # the event: the clamp made it happen
        done = await agent.done()
    assert mcp.last_event_id == "e1"
    assert done.rc == 0, done.stderr
    assert done.result["result"] == "got it back"
    _no_traceback(done.stderr)
    assert "resumed" in gw.bodies[1]["messages"][-1]["content"]  # the resumed answer


async def test_an_endless_streamed_completion_is_exit_5(agentd_bin) -> None:
    async with HostileGateway() as gw:
        agent = await start_agentd(agentd_bin, [
            "--instruction", "say hi", "--intelligence", gw.url, "--stream",
            "--sse-event-bytes", str(LIMIT)])
        gw.pid = agent.proc.pid
        await asyncio.wait_for(gw.dropped.wait(), 120)  # hang guard
        done = await agent.done()
    assert done.rc == 5, done.stderr
    assert done.result["status"] == "failed"
    _no_traceback(done.stderr)
    limits = done.events("intelligence.limit")
    assert limits and limits[0]["limit"] == "sse_event_bytes" and limits[0]["bytes"] == LIMIT
    assert limits[0]["gateway"].startswith(gw.url)
    assert gw.requests == 1  # the gateway's fault: not retried
    _growth_bounded(gw)


async def test_an_endless_completion_body_is_exit_5(agentd_bin) -> None:
    """Not streamed: a chunked JSON answer that never ends is read up to the bound."""
    async with HostileGateway() as gw:
        agent = await start_agentd(agentd_bin, [
            "--instruction", "say hi", "--intelligence", gw.url,
            "--intelligence-max-bytes", str(LIMIT)])
        gw.pid = agent.proc.pid
        await asyncio.wait_for(gw.dropped.wait(), 120)  # hang guard
        done = await agent.done()
    assert done.rc == 5, done.stderr
    assert done.result["status"] == "failed"
    _no_traceback(done.stderr)
    limits = done.events("intelligence.limit")
    assert limits and limits[0]["limit"] == "intelligence_max_bytes"
    assert limits[0]["bytes"] == LIMIT and gw.requests == 1
    _growth_bounded(gw)


# --- the transport alone, against the same hostile server on loopback ---------------


async def _transport(mcp: HostileMCP, bounds: StreamBounds) -> StreamableHTTPTransport:
    got: list = []
    t = StreamableHTTPTransport(mcp.url, on_message=got.append, bounds=bounds)
    await t.open()
    t.session_id = SESSION
    return t


async def test_an_endless_event_on_the_get_stream_ends_it_with_the_limit() -> None:
    """The standalone GET stream: listen() raises TransportError (its limit named) at the bound
    (the client then logs mcp.disconnected and reconnects under its backoff)."""
    async with HostileMCP(get_flood=True) as mcp:
        t = await _transport(mcp, StreamBounds(event_bytes=1 << 20))
        try:
            with pytest.raises(TransportError) as info:
                await asyncio.wait_for(t.listen(), 60)  # hang guard
        finally:
            await t.close()
    assert info.value.limit == "sse_event_bytes" and info.value.size > 1 << 20
    assert "sse_event_bytes" in str(info.value)
    d = classify(info.value, idempotent=True)
    assert (d.retryable, d.resend, d.reconnect) == (False, False, False)
    assert mcp.flood_sent < 8 << 20


async def test_a_chunked_json_answer_is_bounded() -> None:
    """No Content-Length to refuse up front: the body is read up to the bound
    (``--mcp-max-bytes``) only."""
    async with HostileMCP() as mcp:
        t = await _transport(mcp, StreamBounds(answer_bytes=LIMIT))
        answer = Answered()
        body = orjson.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                             "params": {"name": "bigjson", "arguments": {}}})
        try:
            with pytest.raises(TransportError) as info:
                await asyncio.wait_for(t.post(body, answer), 120)  # hang guard
        finally:
            await t.close()
    assert info.value.limit == "mcp_max_bytes" and "mcp_max_bytes" in str(info.value)
    assert LIMIT < info.value.size <= LIMIT + (1 << 20)
    assert not answer.is_set()
    assert mcp.flood_sent < 4 * LIMIT


async def test_a_stateless_error_answer_that_never_ends_is_bounded() -> None:
    """A stateless server's HTTP 400 with a chunked JSON body that never ends: read
    up to the bound only, then the call fails with the status."""
    async with HostileMCP() as mcp:
        t = await _transport(mcp, StreamBounds(answer_bytes=1 << 20))
        answer = Answered()
        body = orjson.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                             "params": {"name": "bigerror", "arguments": {}}})
        try:
            with pytest.raises(HTTPStatusError) as info:  # a 2026-07-28 request's rules
                await asyncio.wait_for(t.post(body, answer, resumable=False, error_bodies=True),
                                       120)  # hang guard
        finally:
            await t.close()
    assert info.value.status == 400
    assert not answer.is_set()
    assert mcp.flood_sent < 8 << 20


@pytest.mark.parametrize(("values", "fragment"), [
    ({"sse_event_bytes": 0}, "--sse-event-bytes must be at least 1"),
    ({"intelligence_max_bytes": 0}, "--intelligence-max-bytes must be at least 1"),
    ({"mcp_max_bytes": 0}, "--mcp-max-bytes must be at least 1"),
    ({"sse_retry_min_ms": 500, "sse_retry_max_ms": 100}, "retry_min=500 <= retry_max=100"),
    ({"sse_retry_min_ms": -1}, "0 <= retry_min=-1"),
    ({"sse_event_bytes": 1 << 70}, "each at most"),  # never an OverflowError in C
])
def test_bad_bounds_are_a_usage_error(values, fragment) -> None:
    with pytest.raises(ConfigError, match=fragment):
        build({"instruction": "x", **values})


def test_the_bounds_reach_the_parser() -> None:
    c = build({"instruction": "x", "sse_event_bytes": 1000, "sse_retry_min_ms": 5,
               "sse_retry_max_ms": 50, "mcp_max_bytes": 2000})
    assert c.stream_bounds.answer_bytes == 2000
    p = c.stream_bounds.parser()
    assert (p.max_event, p.retry_min, p.retry_max) == (1000, 5, 50)
    p.feed(b"retry: 100000000000000000000\n")
    assert p.retry == 50
    assert c.stream_bounds.clamp_ms(1000) == 50
