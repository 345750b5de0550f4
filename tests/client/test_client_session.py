"""The sans-IO client session: handshake bytes, negotiation, gating, server requests."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.mcp.client.rules.faults import (
    HTTPStatusError,
    RetryPolicy,
    RPCError,
    SessionExpired,
    TransportError,
    classify,
)
from agentd.mcp.client.rules.session import (
    ClientSession,
    Failed,
    HandshakeError,
    Notified,
    Reply,
    Resolved,
)
from agentd.mcp.client.toolbox import MAX_TOOL_NAME, qualify


def init_result(version="2025-11-25", caps=None, instructions=None) -> bytes:
    r = {"protocolVersion": version, "capabilities": caps if caps is not None else {},
         "serverInfo": {"name": "s", "version": "1"}}
    if instructions:
        r["instructions"] = instructions
    return orjson.dumps(r)


def ready(caps=None, version="2025-11-25") -> ClientSession:
    s = ClientSession(client_version="9.9.9")
    rid, _ = s.start_initialize()
    (ev,) = s.receive(orjson.dumps({"jsonrpc": "2.0", "id": rid,
                                    "result": orjson.loads(init_result(version, caps))}))
    s.finish_initialize(ev.result)
    return s


def test_initialize_is_exactly_spec_1_3():
    s = ClientSession(client_version="1.2.3")
    rid, data = s.start_initialize()
    assert orjson.loads(data) == {
        "jsonrpc": "2.0", "id": rid, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "agentd", "version": "1.2.3"}}}
    note = s.finish_initialize(init_result(instructions="be nice"))
    assert orjson.loads(note) == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert s.instructions == "be nice"
    assert s.protocol_version == "2025-11-25"
    assert s.structured_output


@pytest.mark.parametrize("version", ["2025-06-18", "2025-03-26", "2024-11-05"])
def test_downgrade_accepted(version):
    s = ready(version=version)
    assert s.protocol_version == version
    assert s.structured_output == (version >= "2025-06-18")


@pytest.mark.parametrize("version", ["2026-07-28", "1999-01-01", ""])
def test_unknown_version_refused(version):
    s = ClientSession(client_version="1")
    s.start_initialize()
    with pytest.raises(HandshakeError):
        s.finish_initialize(init_result(version))


def test_malformed_initialize_result_refused():
    s = ClientSession(client_version="1")
    s.start_initialize()
    with pytest.raises(HandshakeError):
        s.finish_initialize(b'{"protocolVersion": "2025-11-25"}')


def test_initialize_is_never_cancelled():
    s = ClientSession(client_version="1")
    rid, _ = s.start_initialize()
    assert s.cancel(rid, "timeout") is None


def test_capabilities_gate_requests():
    s = ready({"tools": {}})
    s.request("tools/list")
    with pytest.raises(HandshakeError, match="needs the server capability"):
        s.request("resources/list")
    with pytest.raises(HandshakeError, match="needs the server capability"):
        s.request("resources/subscribe", {"uri": "x://y"})
    s2 = ready({"resources": {}})
    s2.request("resources/read", {"uri": "x://y"})
    with pytest.raises(HandshakeError, match="needs the server capability"):
        s2.request("resources/subscribe", {"uri": "x://y"})
    with pytest.raises(HandshakeError, match="needs the server capability"):
        s2.call_tool(b'"t"', b"{}", b"{}")
    with pytest.raises(AttributeError):
        s2.capabilities.tools = True  # frozen


def test_call_tool_bytes_match_the_generic_encoder():
    s = ready({"tools": {}})
    rid, data = s.call_tool(b'"get_weather"', b'{"location":"NYC"}',
                            b'{"io.modelcontextprotocol/run-id":"r"}')
    assert orjson.loads(data) == {
        "jsonrpc": "2.0", "id": rid, "method": "tools/call",
        "params": {"name": "get_weather", "arguments": {"location": "NYC"},
                   "_meta": {"io.modelcontextprotocol/run-id": "r"}}}
    note = s.cancel(rid, "deadline")
    assert orjson.loads(note) == {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                  "params": {"requestId": rid, "reason": "deadline"}}
    assert s.cancel(rid, "again") is None


def test_server_requests_answered():
    s = ready({"tools": {}})
    (ping,) = s.receive(b'{"jsonrpc":"2.0","id":"p1","method":"ping"}')
    assert isinstance(ping, Reply)
    assert orjson.loads(ping.data) == {"jsonrpc": "2.0", "id": "p1", "result": {}}
    (roots,) = s.receive(b'{"jsonrpc":"2.0","id":7,"method":"roots/list"}')
    assert orjson.loads(roots.data) == {"jsonrpc": "2.0", "id": 7, "result": {"roots": []}}
    for method in ("sampling/createMessage", "elicitation/create", "tasks/list", "x/y"):
        (r,) = s.receive(orjson.dumps({"jsonrpc": "2.0", "id": 9, "method": method,
                                       "params": {}}))
        assert orjson.loads(r.data)["error"]["code"] == -32601


def test_responses_resolve_and_strays_are_dropped():
    s = ready({"tools": {}})
    rid, _ = s.request("tools/list")
    assert s.receive(b'{"jsonrpc":"2.0","id":999,"result":{}}') == []
    (ev,) = s.receive(orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": {"tools": []}}))
    assert isinstance(ev, Resolved) and ev.method == "tools/list"
    rid2, _ = s.request("tools/list")
    (err,) = s.receive(orjson.dumps({"jsonrpc": "2.0", "id": rid2,
                                     "error": {"code": -32603, "message": "boom"}}))
    assert isinstance(err, Failed) and err.error.code == -32603


def test_batches_are_accepted():
    s = ready({"tools": {}})
    a, _ = s.request("tools/list")
    b, _ = s.request("tools/list")
    evs = s.receive(orjson.dumps([{"jsonrpc": "2.0", "id": a, "result": {"tools": []}},
                                  {"jsonrpc": "2.0", "id": b, "result": {"tools": []}},
                                  {"jsonrpc": "2.0", "id": 3, "method": "ping"}]))
    assert [type(e) for e in evs] == [Resolved, Resolved, Reply]


def test_notifications_routed_only_when_advertised():
    quiet = ready({"tools": {}, "resources": {}})
    for m in ("notifications/tools/list_changed", "notifications/resources/list_changed",
              "notifications/resources/updated"):
        assert quiet.receive(orjson.dumps({"jsonrpc": "2.0", "method": m,
                                           "params": {"uri": "a://b"}})) == []
    loud = ready({"tools": {"listChanged": True},
                  "resources": {"subscribe": True, "listChanged": True}})
    for m in ("notifications/tools/list_changed", "notifications/resources/list_changed",
              "notifications/resources/updated"):
        (ev,) = loud.receive(orjson.dumps({"jsonrpc": "2.0", "method": m,
                                           "params": {"uri": "a://b"}}))
        assert isinstance(ev, Notified) and ev.method == m
    assert ClientSession.updated_uri(ev.params) == "a://b"


@given(st.binary(max_size=200))
def test_garbage_never_raises(data):
    s = ready({"tools": {}})
    s.receive(data)


def test_retry_policy_classification():
    assert classify(TransportError("refused", sent=False), idempotent=False).resend
    assert not classify(TransportError("reset", sent=True), idempotent=False).resend
    assert classify(TransportError("reset", sent=True), idempotent=True).resend
    d = classify(SessionExpired("404"), idempotent=False)
    assert d.resend and d.reconnect
    assert classify(HTTPStatusError(503), idempotent=False).resend
    assert not classify(HTTPStatusError(500), idempotent=False).resend
    assert not classify(HTTPStatusError(401), idempotent=True).retryable
    for code in (-32700, -32600, -32601, -32602, -32002):
        assert not classify(RPCError(code, "x", side="remote"), idempotent=True).retryable
    assert classify(RPCError(-32603, "x", side="remote"), idempotent=True).resend
    assert not classify(RPCError(-32603, "x", side="remote"), idempotent=False).resend
    assert classify(RPCError(-32603, "x", side="remote"), idempotent=False).retryable
    p = RetryPolicy()
    assert all(0 < p.backoff(n) <= p.cap for n in range(1, 40))
    assert all(0 < p.reconnect_backoff(n) <= p.reconnect_cap for n in range(0, 100))


@given(st.lists(st.tuples(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80)),
                max_size=30))
def test_qualified_names_are_safe_unique_and_short(pairs):
    taken: set[str] = set()
    for server, tool in pairs:
        q = qualify(server, tool, taken)
        assert q not in taken
        assert len(q) <= MAX_TOOL_NAME
        assert all(c.isascii() and (c.isalnum() or c in "_-") for c in q)
        taken.add(q)


def test_qualify_shape():
    assert qualify("fs", "read file") == "fs__read_file"
    assert qualify("my.server", "a/b") == "my_server__a_b"
    long = qualify("s", "x" * 100)
    assert len(long) == 64
    assert qualify("s", "x" * 100, {long}) != long
