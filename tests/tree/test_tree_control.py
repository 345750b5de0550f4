"""The control wire's sans-IO session: frames <-> typed JSON-RPC messages."""

from __future__ import annotations

import pytest
from msgspec import UNSET

from agentd.agent.subagents import HandleState
from agentd.child.control import (
    IO_FAULT,
    IO_SCOPE,
    ChildConfig,
    ControlSession,
    Incoming,
    IoCall,
    MessageParams,
    Reply,
    RunOutcome,
    SpawnParams,
    fault_error,
    fault_of,
)
from agentd.errors import ToolFault, TreeError
from agentd_native import encode_frame


def pair():
    return ControlSession("parent"), ControlSession("child")


def test_request_response_roundtrip_typed():
    parent, child = pair()
    rid, frame = parent.request("child/configure", ChildConfig(handle="0.1", depth=2))
    [ev] = child.feed(frame)
    assert isinstance(ev, Incoming) and ev.method == "child/configure" and ev.id == rid
    assert ev.params.handle == "0.1" and ev.params.depth == 2
    rid2, frame = parent.request("child/run", MessageParams("go"))
    # any chunking works
    events = []
    for i in range(len(frame)):
        events += child.feed(frame[i:i + 1])
    assert events == [Incoming("child/run", MessageParams("go"), rid2)]
    [reply] = parent.feed(child.response(rid2, RunOutcome(status="completed", result={"a": 1})))
    assert isinstance(reply, Reply) and reply.method == "child/run"
    assert reply.result == RunOutcome(status="completed", result={"a": 1})
    assert parent.pending == 1  # configure still unanswered


def test_child_requests_and_errors():
    parent, child = pair()
    rid, frame = child.request("tree/spawn", SpawnParams(instruction="x", mode="async"))
    [ev] = parent.feed(frame)
    assert ev.params == SpawnParams(instruction="x", mode="async")
    [reply] = child.feed(parent.error(rid, -32010, "spawn refused: max_depth=4 reached"))
    assert reply.error.code == -32010 and reply.error.message.startswith("spawn refused:")
    rid, frame = child.request("tree/status", {"handle": "0.1.1"})
    parent.feed(frame)
    [reply] = child.feed(parent.response(rid, HandleState(handle="0.1.1", status="running")))
    assert reply.result.status == "running"


def test_unknown_method_is_answered_not_fatal():
    parent, child = pair()
    _rid, frame = parent.request("child/frobnicate", {})
    assert child.feed(frame) == []
    [answer] = child.outbox
    [reply] = parent.feed(answer)
    assert reply.error.code == -32601
    # a parent-only method sent to the parent by... the parent's own peer is fine too
    assert parent.feed(child.notification("child/progress", {"steps": 1, "tokens": 9}))[0] \
        .params.tokens == 9


@pytest.mark.parametrize(("frame", "text"), [
    (encode_frame(b"not json"), "malformed frame"),
    (encode_frame(b"[1, 2]"), "malformed frame"),
    (encode_frame(b'{"jsonrpc":"2.0","id":77,"result":{}}'), "a response to no request"),
    (encode_frame(b'{"jsonrpc":"2.0","id":1,"method":"tree/spawn","params":{"mode":"x"}}'),
     "malformed frame: tree/spawn"),
    ((1 << 31).to_bytes(4, "big") + b"{", "oversized frame: 2147483648 bytes"),
])
def test_protocol_errors(frame, text):
    parent = ControlSession("parent")
    with pytest.raises(TreeError, match=text):
        parent.feed(frame)


def test_max_frame_is_configurable():
    parent = ControlSession("parent", max_frame=64)
    with pytest.raises(TreeError, match="exceeds the maximum of 64"):
        parent.feed(encode_frame(b"x" * 65))
    with pytest.raises(ValueError):
        ControlSession("peer")


def test_forgotten_request_answer_is_dropped():
    parent, child = pair()
    rid, _frame = parent.request("child/shutdown", {})
    parent.forget(rid)
    assert parent.feed(child.response(rid, {})) == []


async def test_channel_pipelines_requests_over_real_pipes():
    """Requests sent back to back are answered by id, in any order; a cancelled one's
    late answer is dropped (the supervisor sends child/run right behind child/configure)."""
    import asyncio
    import os

    from agentd.child.channel import Channel

    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    seen: list[Incoming] = []
    reached = {3: asyncio.Event(), 4: asyncio.Event()}  # so many requests seen

    def arrived(ev: Incoming) -> None:
        seen.append(ev)
        if len(seen) in reached:
            reached[len(seen)].set()

    parent = Channel(ControlSession("parent"), up_r, down_w, lambda ev: None)
    child = Channel(ControlSession("child"), down_r, up_w, arrived)
    await parent.start()
    await child.start()
    try:
        configured = parent.request("child/configure", ChildConfig(handle="0.1", depth=1))
        ran = parent.request("child/run", MessageParams("go"))
        shut = parent.request("child/shutdown")
        await asyncio.wait_for(reached[3].wait(), 10)
        assert [ev.method for ev in seen] == ["child/configure", "child/run", "child/shutdown"]
        shut.cancel()
        child.respond(seen[1].id, RunOutcome(status="completed", result="done"))
        child.respond(seen[0].id, {"pid": 7, "protocol": 1})
        child.respond(seen[2].id, {})  # too late: dropped, not an error
        assert (await ran).result == "done"
        assert (await configured) == {"pid": 7, "protocol": 1}
        # one more exchange: its answer follows the late one on the pipe, so once it is
        # in, the parent has read (and dropped) the late one
        probe = parent.request("child/shutdown")
        await asyncio.wait_for(reached[4].wait(), 10)
        child.respond(seen[3].id, {})
        assert (await probe) == {}
        assert parent.failure is None and not parent.closed.is_set()
        assert parent.session.pending == 0
    finally:
        parent.close()
        child.close()


@pytest.mark.parametrize("fault", [
    ToolFault("srv", "HTTP 503 Service Unavailable", retryable=True, code=503,
              method="tools/call"),
    ToolFault("srv", "timed out after 30s", retryable=True, method="tools/call",
              cause="timeout"),
    ToolFault("srv", "Invalid params", retryable=False, code=-32602, method="tools/call"),
])
def test_a_brokered_fault_crosses_the_wire_intact(fault):
    """The parent's ToolFault rides in the io/request error's data: the child
    raises the same fault (server, words, retryability, code, method, cause),
    and the error's code and message on the wire stay what they were."""
    parent, child = pair()
    rid, frame = child.request("io/request", IoCall("srv__echo", {"text": "x"}))
    [ev] = parent.feed(frame)
    err = fault_error(fault)
    [reply] = child.feed(parent.error(ev.id, err.code, err.message, err.data))
    assert isinstance(reply, Reply) and reply.id == rid and reply.error is not None
    assert (reply.error.code, reply.error.message) == (IO_FAULT, str(fault))
    again = fault_of(reply.error.code, reply.error.message, reply.error.data)
    assert (again.server, again.message, again.retryable, again.code, again.method,
            again.cause) == (fault.server, fault.message, fault.retryable, fault.code,
                             fault.method, fault.cause)
    assert str(again) == str(fault)


@pytest.mark.parametrize("code,data", [
    (IO_SCOPE, UNSET),  # a refusal: no fault to carry
    (IO_FAULT, UNSET),  # a fault of the broker's own (a replay that diverged)
    (IO_FAULT, {"server": 7}),  # a malformed data: the words still arrive
    (IO_FAULT, "not an object"),
])
def test_a_refusal_or_a_bad_fault_body_is_the_brokers_own_fault(code, data):
    parent, child = pair()
    _rid, frame = child.request("io/request", IoCall("srv__echo"))
    [ev] = parent.feed(frame)
    [reply] = child.feed(parent.error(ev.id, code, "tool 'srv__echo' is out of scope", data))
    fault = fault_of(reply.error.code, reply.error.message, reply.error.data)
    assert (fault.server, fault.message, fault.retryable, fault.code) == (
        "broker", "tool 'srv__echo' is out of scope", False, code)
