"""The one fault policy (agentd/mcp/client/rules/faults.py, docs/faults.md), applied once.

Against ``FaultServer`` (tests/support/fault_server.py: a small aiohttp MCP
endpoint on loopback) whose ``tools/call`` handlers here misbehave on purpose
-- they reset the connection after reading the request, or answer 503 with a
``Retry-After`` -- and count what they were sent:

* a non-idempotent ``tools/call`` cut by a reset is sent exactly once (it may
  have run), through the root's toolbox and through a subagent's brokered
  call alike, and the model gets the documented notice;
* a ``tools/call`` of a tool its server declares ``idempotentHint: true`` or
  ``readOnlyHint: true`` is re-sent under the same fault, and under a 500, as an
  idempotent method is (``idempotent_tool``, the one rule, which
  ``Toolbox.idempotent`` also answers by name for a resumed journal);
* a 503's ``Retry-After: N`` is waited once, N seconds (the policy's injected
  sleep records it: no real wait);
* a fault that persists is sent at most ``RetryPolicy.max_attempts`` times in
  all -- the total a model-visible call costs, nothing above the client
  re-sends.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agentd_proc import agentd_env, run_agentd
from aiohttp import web
from fault_server import TOOL, FaultServer
from logcapture import events
from tree_helpers import precompile

from agentd.a2a.peers import A2APeers, WithPeers
from agentd.config.model import ServerSpec
from agentd.errors import RPCError, ToolFault
from agentd.mcp import RetryPolicy, Toolbox
from agentd.mcp.client.rules.faults import (
    ABORT_CAUSES,
    HTTPStatusError,
    RequiredServerLost,
    SessionExpired,
    TransportError,
    classify,
    idempotent_tool,
)

NOTICE = "failed with a protocol or transport fault"
Handler = Callable[[dict, web.Request], Awaitable[Any]]


class Sleeps:
    """The policy's sleep, recorded instead of waited."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def policy(sleeps: Sleeps, **kw: Any) -> RetryPolicy:
    kw.setdefault("reconnect_base", 0.02)
    kw.setdefault("reconnect_cap", 0.2)
    return RetryPolicy(sleep=sleeps, **kw)


async def reset(msg: dict, request: web.Request) -> web.StreamResponse:
    """Misbehaves: reads the request, then resets the connection (no answer)."""
    assert request.transport is not None
    request.transport.abort()
    return web.Response(status=200)


def status(code: int, **headers: str) -> Handler:
    async def answer(msg: dict, request: web.Request) -> web.StreamResponse:
        return web.Response(status=code, text="busy", headers=headers)
    return answer


def then_ok(*first: Handler) -> Handler:
    """Each of ``first`` once, in turn, then the normal answer."""
    queue = list(first)

    async def answer(msg: dict, request: web.Request) -> Any:
        if queue:
            return await queue.pop(0)(msg, request)
        return {"content": [{"type": "text", "text": "ok"}]}
    return answer


def calls(server: FaultServer, tool: str | None = None) -> int:
    return sum(1 for m, msg, _ in server.seen if m == "tools/call"
               and (tool is None or msg["params"]["name"] == tool))


def listing(**annotated: dict) -> Handler:
    """``tools/list`` answering the plain tool ``t`` and one tool per keyword,
    each with those annotations."""
    async def answer(msg: dict, request: web.Request) -> Any:
        return {"tools": [TOOL, *({**TOOL, "name": name, "annotations": a}
                                  for name, a in annotated.items())]}
    return answer


def toolbox(server: FaultServer, sleeps: Sleeps, *, required: bool = True) -> Toolbox:
    return Toolbox([ServerSpec(name="f", url=server.url, required=required)],
                   ping_interval=None, policy=policy(sleeps))


# ------------------------------------------------------------------ the table


@pytest.mark.parametrize(("exc", "idempotent", "resend", "cause"), [
    (TransportError("refused", sent=False), False, True, "unreachable"),
    (TransportError("reset", sent=True), False, False, ""),
    (TransportError("reset", sent=True), True, True, ""),
    (TransportError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed",
                    sent=False), True, False, "refused"),
    (TransportError("past", sent=False, limit="sse_event_bytes", size=9), True, False, ""),
    (SessionExpired("gone"), False, True, ""),
    (HTTPStatusError(503, retry_after=4.0), False, True, ""),
    (HTTPStatusError(500), False, False, ""),
    (HTTPStatusError(500), True, True, ""),
    (HTTPStatusError(401), True, False, "refused"),
    (HTTPStatusError(404), True, False, ""),
    (RPCError(-32603, "boom", side="remote"), False, False, ""),
    (RPCError(-32602, "bad",
              side="remote"), False, False, "refused"),  # a tools/call of a listed tool
    (TimeoutError(), True, False, "timeout"),
    (ToolFault("f", "server unavailable (reconnecting)", retryable=True), True, False,
     "unreachable"),
    (ToolFault("f", "server gone: stale", retryable=False, cause="stale"), True, False, "stale"),
    (ToolFault("f", "client closed", retryable=False, cause="closed"), True, False, "closed"),
])
def test_one_classify_decides_resend_and_outcome(exc, idempotent, resend, cause) -> None:
    d = classify(exc, idempotent=idempotent, method="tools/call")
    assert (d.resend, d.cause) == (resend, cause), d
    assert d.abort == (cause in ABORT_CAUSES)


def test_the_retry_after_travels_in_the_decision_and_is_the_one_delay() -> None:
    sleeps = Sleeps()
    p = policy(sleeps, base=1.0, cap=1.0)
    assert p.delay(classify(HTTPStatusError(429, retry_after=7.0), idempotent=False), 1) == 7.0
    backoff = p.delay(classify(HTTPStatusError(503), idempotent=False), 1)
    assert 0.5 <= backoff <= 1.0  # full jitter of the capped exponential


@pytest.mark.parametrize(("annotations", "idempotent"), [
    ({"idempotentHint": True}, True),
    ({"readOnlyHint": True}, True),
    ({"readOnlyHint": True, "idempotentHint": False}, True),  # read-only: no effect at all
    ({"readOnlyHint": False, "idempotentHint": True, "destructiveHint": True}, True),
    ({}, False),  # the spec's defaults
    ({"idempotentHint": False, "readOnlyHint": False}, False),
    ({"destructiveHint": False, "openWorldHint": False, "title": "safe"}, False),
    ({"idempotentHint": "true", "readOnlyHint": 1}, False),  # only a literal true counts
])
def test_a_tool_is_idempotent_when_its_server_declares_it_so(annotations, idempotent) -> None:
    assert idempotent_tool(annotations) is idempotent


def test_invalid_params_are_the_models_to_fix_except_on_a_listed_tool() -> None:
    d = classify(RPCError(-32602, "bad", side="remote"), idempotent=True, method="resources/read")
    assert not d.abort and not d.resend and not d.retryable


# ------------------------------------------------------------------ the root's toolbox


async def test_a_reset_tools_call_is_sent_once_and_the_server_kept(fault) -> None:
    server = await fault()
    server.handlers["tools/call"] = then_ok(reset)
    sleeps = Sleeps()
    async with toolbox(server, sleeps) as tb:
        with pytest.raises(ToolFault) as info:
            await tb.call("f__t", {})
        assert calls(server) == 1  # it may have run: never re-sent
        assert info.value.retryable and info.value.cause not in ABORT_CAUSES
        assert "f" in tb.clients and not tb.lost.done()  # a notice, not an abort
        assert (await tb.call("f__t", {})).text == "ok"  # after the reconnect
    assert calls(server) == 2


@pytest.mark.parametrize("hint", ["idempotentHint", "readOnlyHint"])
async def test_a_reset_call_of_a_tool_declared_idempotent_is_sent_again(fault, logs,
                                                                        hint) -> None:
    """The counterpart of the test above: the same reset, on a tool its server
    declares idempotent (or read-only), is re-sent once the connection is back
    -- the same request under a fresh id -- and answered; the plain tool beside
    it on the same server is still sent once."""
    server = await fault()
    server.handlers["tools/list"] = listing(same={hint: True})
    server.handlers["tools/call"] = then_ok(reset)
    sleeps = Sleeps()
    async with toolbox(server, sleeps) as tb:
        assert (await tb.call("f__same", {"n": 1})).text == "ok"
        sent = [msg for m, msg, _ in server.seen if m == "tools/call"]
        assert [m["params"]["name"] for m in sent] == ["same", "same"]
        assert [m["params"]["arguments"] for m in sent] == [{"n": 1}, {"n": 1}]
        assert sent[0]["id"] != sent[1]["id"]
        assert sleeps.delays == []  # a reconnect is waited for, not slept on
        server.handlers["tools/call"] = then_ok(reset)
        with pytest.raises(ToolFault):
            await tb.call("f__t", {})
        assert calls(server, "t") == 1
    assert [(e["method"], e["attempt"]) for e in events(logs, "mcp.retry")] == [
        ("tools/call", 1)]


async def test_a_500_answering_an_idempotent_tool_is_sent_again(fault) -> None:
    """Every row that re-sends an idempotent method re-sends an idempotent
    tool's call: a 500 (may have run) is re-sent after one backoff; the plain
    tool's is not."""
    server = await fault()
    server.handlers["tools/list"] = listing(look={"readOnlyHint": True})
    server.handlers["tools/call"] = then_ok(status(500))
    sleeps = Sleeps()
    async with toolbox(server, sleeps) as tb:
        assert (await tb.call("f__look", {})).text == "ok"
        assert calls(server, "look") == 2 and len(sleeps.delays) == 1
        server.handlers["tools/call"] = then_ok(status(500))
        with pytest.raises(ToolFault) as info:
            await tb.call("f__t", {})
        assert info.value.code == 500 and calls(server, "t") == 1


async def test_the_toolbox_answers_by_name_whether_a_call_may_be_sent_twice(fault) -> None:
    """``Toolbox.idempotent``: the rule over each tool as its server listed it,
    by the name the model calls; False for a name no server lists.  The run's
    toolbox with A2A peers answers the same (a delegation never is)."""
    server = await fault()
    server.handlers["tools/list"] = listing(same={"idempotentHint": True},
                                            look={"readOnlyHint": True},
                                            write={"idempotentHint": False,
                                                   "destructiveHint": True})
    async with toolbox(server, Sleeps()) as tb, \
            A2APeers((), secrets_dir="/nonexistent", updates=tb.updates) as peers:
        assert sorted(tb.tools) == ["f__look", "f__same", "f__t", "f__write"]
        box = WithPeers(tb, peers)
        for name, idempotent in [("f__same", True), ("f__look", True), ("f__t", False),
                                 ("f__write", False), ("f__nope", False), ("same", False),
                                 ("agentd__a2a_delegate", False)]:
            assert tb.idempotent(name) is idempotent, name
            assert box.idempotent(name) is idempotent, name
        await tb.drop("f", "gone for the test")
        assert not tb.idempotent("f__same")  # its server left the catalogue


async def test_a_503s_retry_after_is_waited_once(fault) -> None:
    server = await fault()
    server.handlers["tools/call"] = then_ok(status(503, **{"Retry-After": "7"}))
    sleeps = Sleeps()
    async with toolbox(server, sleeps) as tb:
        assert (await tb.call("f__t", {})).text == "ok"
    assert calls(server) == 2
    assert sleeps.delays == [7.0]


async def test_a_fault_that_persists_is_sent_at_most_max_attempts_in_all(fault) -> None:
    server = await fault(caps={"tools": {}, "resources": {}})
    server.handlers["tools/call"] = status(503)
    server.handlers["resources/read"] = status(500)
    sleeps = Sleeps()
    async with toolbox(server, sleeps, required=False) as tb:
        attempts = tb.clients["f"].policy.max_attempts
        with pytest.raises(ToolFault) as info:
            await tb.call("f__t", {})
        assert calls(server) == attempts
        assert len(sleeps.delays) == attempts - 1  # one backoff before each re-send
        assert info.value.retryable and info.value.code == 503
        with pytest.raises(ToolFault):  # idempotent: re-sent, the same bound
            await tb.read_resource("r://x", server="f")
    assert server.methods().count("resources/read") == attempts


async def test_an_abort_cause_ends_the_run_without_a_resend(fault) -> None:
    server = await fault()
    server.handlers["tools/call"] = status(401)
    sleeps = Sleeps()
    async with toolbox(server, sleeps) as tb:
        with pytest.raises(RequiredServerLost) as info:
            await tb.call("f__t", {})
        assert tb.lost.done() and tb.lost.result() is info.value
    assert calls(server) == 1 and sleeps.delays == []
    assert "401" in info.value.fault and not info.value.handshake


async def test_a_server_that_stays_unreachable_is_an_abort(fault) -> None:
    """The server goes away: a read (idempotent, so re-sent whether its
    connection was refused or lost) waits for the reconnect at most
    ``reconnect_wait``, then meets an abort cause (``unreachable``)."""
    server = await fault(caps={"tools": {}, "resources": {}})
    sleeps = Sleeps()
    tb = Toolbox([ServerSpec(name="f", url=server.url)], ping_interval=None,
                 policy=policy(sleeps, reconnect_wait=0.5))
    async with tb:
        await server.stop()  # the port refuses from now on
        with pytest.raises(RequiredServerLost) as info:
            await tb.read_resource("r://x", server="f")
        assert tb.lost.done()
    assert "resources/read" not in server.methods()
    assert sleeps.delays == []  # a reconnect is waited for, not slept on
    assert "server gone past the retry budget" in info.value.fault


# ------------------------------------------------------------------ through the console script


def _playback(tmp_path, scripts: list[dict]) -> str:
    path = tmp_path / "faults.playback.json"
    path.write_text(json.dumps({"playback": 1, "scripts": scripts}))
    return str(path)


async def test_the_model_gets_the_notice_for_a_reset_call(fault, agentd_bin, tmp_path
                                                          ) -> None:
    server = await fault()
    server.handlers["tools/call"] = reset
    play = _playback(tmp_path, [{"match": "", "turns": [
        {"tool_calls": [{"name": "f__t", "arguments": {}}]},
        {"expect": [NOTICE, "this is not output from the tool"], "content": "noticed"}]}])
    done = await run_agentd(agentd_bin, [
        "--instruction", "call t", "--intelligence", f"playback:{play}",
        "--mcp", f"f={server.url}", "--ping-interval", "60"], env=agentd_env())
    assert done.rc == 0, done.stderr[-3000:]
    assert done.result["status"] == "completed" and done.result["result"] == "noticed"
    assert calls(server) == 1
    assert [e["cause"] for e in done.events("tool.fault")] == [""]


@pytest.mark.timeout(180)
async def test_a_subagents_brokered_call_goes_through_the_same_policy(
        fault, agentd_bin, tmp_path) -> None:
    """The child's calls are made by the root's client: a reset call is sent
    once (the child's model gets the notice), a 503 is re-sent once after its
    Retry-After, all logged by the root (mcp.retry)."""
    precompile()
    server = await fault()
    server.handlers["tools/call"] = then_ok(reset, status(503, **{"Retry-After": "0"}))
    play = _playback(tmp_path, [
        {"name": "root", "match": "[root]", "turns": [
            {"tool_calls": [{"name": "agentd__subagent_spawn",
                             "arguments": {"instruction": "[child] call t twice"}}]},
            {"expect": "child saw ok", "content": "done"}]},
        {"name": "child", "match": "[child]", "turns": [
            {"tool_calls": [{"name": "f__t", "arguments": {}}]},
            {"expect": NOTICE, "tool_calls": [{"name": "f__t", "arguments": {}}]},
            {"expect": "ok", "content": "child saw ok"}]},
    ])
    done = await run_agentd(agentd_bin, [
        "--instruction", "[root] delegate", "--intelligence", f"playback:{play}",
        "--mcp", f"f={server.url}", "--ping-interval", "60"], env=agentd_env(), limit=150)
    assert done.rc == 0, done.stderr[-3000:]
    assert done.result["result"] == "done"
    assert calls(server) == 3  # reset: once; 503: once more, then the answer
    assert [e["reason"] for e in done.events("mcp.retry")] == ["HTTP 503"]


@pytest.mark.timeout(180)
async def test_an_abort_met_by_a_subagents_call_ends_the_run(
        fault, agentd_bin, tmp_path) -> None:
    """A 401 answering a subagent's call of a required server: not re-sent, and
    the root's run ends (exit 1) naming the server, as for the root's own call."""
    precompile()
    server = await fault()
    server.handlers["tools/call"] = status(401)
    play = _playback(tmp_path, [
        {"name": "root", "match": "[root]", "turns": [
            {"tool_calls": [{"name": "agentd__subagent_spawn",
                             "arguments": {"instruction": "[child] call t"}}]},
            {"content": "must not be reached"}]},
        {"name": "child", "match": "[child]", "turns": [
            {"tool_calls": [{"name": "f__t", "arguments": {}}]},
            {"content": "child done"}]},
    ])
    done = await run_agentd(agentd_bin, [
        "--instruction", "[root] delegate", "--intelligence", f"playback:{play}",
        "--mcp", f"f={server.url}", "--ping-interval", "60"], env=agentd_env(), limit=150)
    assert done.rc == 1, done.stderr[-3000:]
    assert done.result["status"] == "failed" and done.result["result"]["server"] == "f"
    assert "401" in done.result["result"]["fault"]
    assert calls(server) == 1
    assert done.events("mcp.required_lost")
