"""Hostile peers' bytes never escape agentd's own errors (issue 28, the decode
rows): each test runs the real `agentd` against a peer that misbehaves on
purpose (tests/support/decode_peers.py, tests/support/gateway.py) and asserts the clean end —
one JSON object on stdout, the documented exit code, no traceback, a log line
naming the peer."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from agentd_proc import run_agentd
from gateway import Gateway, Reply
from peers import python_peer
from serve_harness import assert_all_json, canary, errors, post, start, stop


def _clean(done) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert not [e for e in done.logs if e.get("event") == "run.failed"], done.stderr


async def test_structured_content_nested_5000_levels_is_the_servers_fault(agentd_bin):
    with python_peer("decode_peers.py", "deep") as peer:
        async with Gateway([Reply.tools(("deep__deep", {})), Reply.text("done")]) as gw:
            done = await run_agentd(agentd_bin, [
                "--instruction", "call deep", "--intelligence", gw.url, "--model", "m",
                "--mcp", f"deep={peer.url}"])
    _clean(done)
    assert done.rc == 0, done.stderr
    assert done.result["status"] == "completed"
    faults = done.events("tool.fault")
    assert faults and "deep" in faults[0]["tool"] and "nested too deeply" in faults[0]["fault"]
    garbage = done.events("mcp.garbage")  # the server's refused bytes, named and visible
    assert garbage and garbage[0]["server"] == "deep", done.stderr
    # the model was told it was a fault of the server, not tool output
    told = gw.bodies[1]["messages"][-1]["content"]
    assert "protocol or transport fault" in told and "nested too deeply" in told


async def test_an_initialize_answer_nested_5000_levels_fails_the_handshake_at_once(agentd_bin):
    """The required server's handshake fails with the reason (exit 6), without
    waiting out the handshake timeout for an answer that already came."""
    with python_peer("decode_peers.py", "deep-init") as peer:
        async with Gateway([Reply.text("done")]) as gw:
            done = await run_agentd(agentd_bin, [
                "--instruction", "x", "--intelligence", gw.url, "--model", "m",
                "--init-timeout", "600", "--mcp", f"deep={peer.url}"], limit=300)
    _clean(done)
    assert done.rc == 6, done.stderr
    text = json.dumps(done.result)
    assert "deep" in text and "nested too deeply" in text, text
    assert done.events("mcp.garbage")[0]["server"] == "deep"


OVERFLOWING_DATE = "Fri, 31 Dec 99999999999 23:59:59 GMT"


def _run(gw: Gateway, peer) -> list[str]:
    return ["--instruction", "call deep", "--intelligence", gw.url, "--model", "m",
            "--mcp", f"deep={peer.url}"]


def _raw_tool_call(arguments: str) -> Reply:
    """A chat completion whose one tool call carries ``arguments`` verbatim (the
    JSON text of the arguments string, so any bytes the test wants reach agentd)."""
    return Reply(raw=(
        '{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1",'
        '"type":"function","function":{"name":"deep__deep","arguments":' + arguments +
        '}}]},"finish_reason":"tool_calls"}]}').encode())


async def test_gateway_429_with_an_overflowing_retry_after_date_is_retried(agentd_bin):
    """The date's year overflows the platform's time: the header is ignored (the
    backoff applies), the run goes on."""
    with python_peer("decode_peers.py", "deep") as peer:
        async with Gateway([Reply.error(429, retry_after=OVERFLOWING_DATE),
                            Reply.text("done")]) as gw:
            done = await run_agentd(agentd_bin, _run(gw, peer))
    _clean(done)
    assert done.rc == 0 and done.result["status"] == "completed", done.stderr
    retries = done.events("intelligence.retry")
    # the gateway's own error text rides along (bounded: docs/cli.md)
    assert len(retries) == 1 and retries[0]["reason"].startswith("HTTP 429 ")
    assert "scripted 429" in retries[0]["reason"]
    assert len(gw.bodies) == 2


async def test_tool_call_arguments_beyond_the_wire_bounds_go_back_to_the_model(agentd_bin):
    """Arguments nested 300 deep (a string, and an object the gateway sent as
    JSON) and one holding 2**70: nothing is sent to the server; the model is
    told what was wrong, the run goes on."""
    deep = "[" * 300 + "]" * 300
    with python_peer("decode_peers.py", "deep") as peer:
        async with Gateway([
            _raw_tool_call(json.dumps(f'{{"a": {deep}}}')),  # a string, 300 deep
            _raw_tool_call(f'{{"a": {deep}}}'),              # an object, 300 deep
            _raw_tool_call(f'{{"n": {2 ** 70}}}'),           # an object, a 71-bit integer
            Reply.text("done"),
        ]) as gw:
            done = await run_agentd(agentd_bin, _run(gw, peer))
    _clean(done)
    assert done.rc == 0 and done.result["status"] == "completed", done.stderr
    results = done.events("tool.result")
    assert len(results) == 3 and all(r["is_error"] for r in results), results
    told = [b["messages"][-1]["content"] for b in gw.bodies[1:]]
    assert "nested too deeply" in told[0] and "nested too deeply" in told[1], told
    assert "out of range" in told[2], told


class _OversizedHeadGateway:
    """A gateway that misbehaves on purpose: it answers every request with a
    response head whose one header line is 20,000 bytes (past the HTTP
    client's 8190-byte line bound), counting the requests it got."""

    def __init__(self) -> None:
        self.requests = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            writer.write(b"HTTP/1.1 200 OK\r\nX-Huge: " + b"a" * 20_000 +
                         b"\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()


async def test_a_gateway_answer_head_past_the_line_bound_is_the_gateways_fault(agentd_bin):
    """The HTTP client refuses the head; the provider retries it as the gateway's
    fault and ends with exit 5 naming it, never an aiohttp error out of it."""
    gw = _OversizedHeadGateway()
    async with gw as url:
        done = await run_agentd(agentd_bin, [
            "--instruction", "x", "--intelligence", url, "--model", "m",
            "--intelligence-attempts", "2"])
    assert "Traceback" not in done.stderr, done.stderr
    assert done.rc == 5, done.stderr
    assert done.result["status"] == "failed"
    assert "8190" in json.dumps(done.result), done.result
    retries = done.events("intelligence.retry")
    assert len(retries) == 1 and "8190" in retries[0]["reason"], retries
    assert gw.requests == 2


# ------------------------------------------------------------ the served side
MODERN_HDRS = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}


def _meta_request(depth: int, *, modern: bool) -> bytes:
    keys = (b'"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
            b'"io.modelcontextprotocol/clientCapabilities":{},') if modern else b""
    return (b'{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{' + keys +
            b'"deep":' + b"[" * depth + b"]" * depth + b"}}}")


async def test_served_deep_meta_deep_arguments_and_bad_utf8_are_client_errors(
        agentd_bin, tmp_path):
    """A listening self-MCP answers every hostile request with 400 / -32700 /
    -32600 / -32602, never 500 or -32603, logs nothing at error level, and
    serves the next good request."""
    agent, url = await start(agentd_bin, tmp_path)
    async with aiohttp.ClientSession() as http:
        sid = await canary(http, url)
        # params._meta nested around the codec's nesting guard, both revisions:
        # served when within the bound, refused as the client's error beyond it
        for depth in (900, 960, 975, 982, 990, 1000, 5000):
            for modern in (False, True):
                status, _, body = await post(
                    http, url, _meta_request(depth, modern=modern), None if modern else sid,
                    headers=MODERN_HDRS if modern else None)
                if status == 200 and "result" in body:
                    assert depth < 1000, depth
                    continue
                assert status in (200, 400), (depth, modern, status, body)
                assert body["error"]["code"] in (-32700, -32600, -32602), (depth, body)
                assert "nested too deeply" in body["error"]["message"], body
        # the subagent tools' arguments nested 256 and 300 levels: invalid params
        for tool in ("subagent.status", "subagent.send", "subagent.cancel"):
            for depth in (256, 300):
                raw = (b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"' +
                       tool.encode() + b'","arguments":{"handle":' + b"[" * depth +
                       b"]" * depth + b',"message":"hi"}}}')
                status, _, body = await post(http, url, raw, sid)
                assert status == 200 and body["error"]["code"] == -32602, (tool, depth, body)
                assert "nested too deeply" in body["error"]["message"]
        # invalid UTF-8 inside a 2026-07-28 request's _meta
        bad = (b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{'
               b'"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
               b'"io.modelcontextprotocol/clientCapabilities":{},"x":"\xff\xfe"}}}')
        status, _, body = await post(http, url, bad, headers=MODERN_HDRS)
        assert status == 400 and body["error"]["code"] in (-32700, -32602), body
        await canary(http, url)
    done = await stop(agent)
    assert not errors(done), errors(done)
    rejected = done.events("mcp.serve.rejected")  # info, throttled: visible, no flood
    assert rejected and all(e["level"] == "info" for e in rejected)
    assert "Traceback" not in done.stderr
    assert_all_json(done.stderr)


# ---------------------------------------------------------------------- A2A
async def test_an_agent_card_nested_5000_levels_fails_the_required_peer(agentd_bin, tmp_path):
    """The card is refused with the A2A fault's own words: exit 6, cleanly."""
    script = tmp_path / "p.json"
    script.write_text(json.dumps({"turns": [{"content": "unreached"}]}))
    with python_peer("decode_peers.py", "a2a-deep-card") as peer:
        done = await run_agentd(agentd_bin, [
            "--features", "a2a", "--a2a-peer", f"p=http://127.0.0.1:{peer.port}",
            "--instruction", "go", "--intelligence", f"playback:{script}"])
    _clean(done)
    assert done.rc == 6, done.stderr
    failed = done.events("a2a.card.failed")
    assert failed and "nested too deeply" in failed[0]["error"], failed


async def test_an_a2a_error_answer_that_is_no_envelope_is_the_peers_fault():
    """SendStreamingMessage answered with HTTP 500 and a body that is no JSON-RPC
    envelope (a string error, then one nested 5,000 levels): the delegation fails
    with the A2A fault naming the status, twice, and the peer stays usable."""
    from agentd.a2a.peers import A2APeers
    from agentd.agent.a2a_delegate import install
    from agentd.agent.selftools import SelfTools
    from agentd.config.model import ServerSpec

    with python_peer("decode_peers.py", "a2a-bad-error") as peer:
        spec = ServerSpec(name="p", url=f"http://127.0.0.1:{peer.port}")
        async with A2APeers((spec,), secrets_dir="/nonexistent") as peers:
            tools = SelfTools()
            install(tools, peers)
            for _ in range(2):
                obs = await tools.call("agentd__a2a_delegate", {"peer": "p", "message": "x"})
                assert obs.is_error and "HTTP 500" in obs.text, obs.text


# ------------------------------------------------------------ OAuth discovery
@pytest.mark.parametrize("mode", ["bad-metadata", "bad-port"])
async def test_oauth_metadata_that_is_no_url_fails_the_servers_handshake(
        agentd_bin, tmp_path, mode):
    """A 401 whose resource_metadata is ``https://[x``, or metadata naming an
    authorization server at port 99999: discovery refuses it with its own error;
    the required server fails its handshake (exit 6), cleanly."""
    with python_peer("decode_peers.py", mode) as peer:
        async with Gateway([Reply.text("done")]) as gw:
            done = await run_agentd(agentd_bin, [
                "--instruction", "x", "--intelligence", gw.url, "--model", "m",
                "--state-dir", str(tmp_path), "--mcp", f"locked={peer.url}"])
    _clean(done)
    assert done.rc == 6, done.stderr
    assert done.result["status"] == "failed"
    text = json.dumps(done.result)
    assert "locked" in text and "not a URL" in text, text
    named = [e for e in done.logs if e.get("server") == "locked" or "locked" in json.dumps(e)]
    assert named
