"""`HandleState` is the one shape of a handle's state: the bytes it makes on the
control wire (`tree/*` answers, `child/terminal`) and the self-MCP's body of it
are pinned here, as they were when the wire had its own `HandleBody` copy."""

from __future__ import annotations

import json

from agentd.agent.subagents import HandleState
from agentd.child.control import ControlSession, Reply
from agentd_native import encode_frame


def _frame(payload: bytes) -> bytes:
    return encode_frame(payload)


def _warm_between_turns() -> HandleState:
    """A running warm session: its last turn's result is kept in the root only."""
    return HandleState(handle="0.1", status="running", result={"old": 1})


def _turn() -> HandleState:
    st = HandleState(handle="0.1", status="running", result="turn two")
    st.turn = True
    return st


def test_control_wire_bytes_are_pinned() -> None:
    parent = ControlSession("parent")
    assert parent.response(7, _warm_between_turns().on_wire()) == _frame(
        b'{"id":7,"result":{"handle":"0.1","status":"running","partial":false,'
        b'"result":null},"jsonrpc":"2.0"}')
    done = HandleState(handle="0.1", status="completed", partial=True, result={"x": [1, "é"]})
    assert parent.response(7, done.on_wire()) == _frame(
        '{"id":7,"result":{"handle":"0.1","status":"completed","partial":true,'
        '"result":{"x":[1,"é"]}},"jsonrpc":"2.0"}'.encode())
    assert parent.response(7, _turn().on_wire()) == _frame(
        b'{"id":7,"result":{"handle":"0.1","status":"running","partial":false,'
        b'"result":"turn two"},"jsonrpc":"2.0"}')
    failed = HandleState(handle="0.1.2", status="failed", result={"error": "boom"})
    assert parent.notification("child/terminal", failed.on_wire()) == _frame(
        b'{"method":"child/terminal","params":{"handle":"0.1.2","status":"failed",'
        b'"partial":false,"result":{"error":"boom"}},"jsonrpc":"2.0"}')


def test_on_wire_leaves_the_roots_state_whole() -> None:
    st = _warm_between_turns()
    assert st.on_wire().result is None
    assert st.result == {"old": 1}  # what a later stop makes the final result


def test_the_child_decodes_the_same_shape_with_its_own_clock() -> None:
    parent, child = ControlSession("parent"), ControlSession("child")
    rid, frame = child.request("tree/status", {"handle": "0.1"})
    parent.feed(frame)
    sent = _turn()
    sent.started -= 1000.0  # the root's clock never crosses the wire
    [reply] = child.feed(parent.response(rid, sent.on_wire()))
    assert isinstance(reply, Reply)
    got = reply.result
    assert type(got) is HandleState
    assert got == HandleState(handle="0.1", status="running", result="turn two")
    assert got.turn is False and got.started > sent.started


def test_self_mcp_body_is_pinned() -> None:
    running = _warm_between_turns()
    body = running.body()
    assert list(body) == ["handle", "status", "done", "age_ms"]
    assert body["done"] is False and isinstance(body["age_ms"], int)
    done = HandleState(handle="0.1", status="completed", partial=True, result={"x": 1})
    assert json.dumps(done.body()) == (
        '{"handle": "0.1", "status": "completed", "done": true, "partial": true, '
        '"result": {"x": 1}}')
    assert json.dumps(_turn().body()) == (
        '{"handle": "0.1", "status": "running", "done": false, "partial": false, '
        '"result": "turn two"}')
