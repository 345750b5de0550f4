"""JSON-RPC 2.0 envelope layer: classification, error codes, round trips."""

from __future__ import annotations

import msgspec
import peers
import pytest
from msgspec import UNSET, Raw

from agentd.errors import RPCError
from agentd.wire import codec
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RESOURCE_NOT_FOUND,
    ErrorObject,
    ErrorResponse,
    Notification,
    Request,
    Response,
    error_object,
    error_response,
)


def _err(data: bytes | str) -> RPCError:
    with pytest.raises(RPCError) as ei:
        codec.decode(data)
    return ei.value


def test_error_code_values():
    assert (PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR) == (
        -32700,
        -32600,
        -32601,
        -32602,
        -32603,
    )
    assert RESOURCE_NOT_FOUND == -32002


# --------------------------------------------------------------------------
# classification
# --------------------------------------------------------------------------


def test_decode_request():
    m = codec.decode(b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"c"}}')
    assert type(m) is Request
    assert m.id == 1 and m.method == "tools/list"
    assert isinstance(m.params, Raw) and bytes(m.params) == b'{"cursor":"c"}'


def test_decode_request_string_and_zero_and_negative_ids():
    assert codec.decode(b'{"jsonrpc":"2.0","id":"abc","method":"ping"}').id == "abc"
    assert codec.decode(b'{"jsonrpc":"2.0","id":"","method":"ping"}').id == ""
    assert codec.decode(b'{"jsonrpc":"2.0","id":0,"method":"ping"}').id == 0
    assert codec.decode(b'{"jsonrpc":"2.0","id":-5,"method":"ping"}').id == -5
    big = 2**53 + 1
    assert codec.decode(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % big).id == big


def test_decode_request_without_params():
    m = codec.decode(b'{"jsonrpc":"2.0","id":7,"method":"ping"}')
    assert type(m) is Request and m.params is UNSET


def test_decode_notification():
    m = codec.decode(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    assert type(m) is Notification and m.params is UNSET
    m = codec.decode(
        b'{"method":"notifications/resources/updated","params":{"uri":"file:///x"},"jsonrpc":"2.0"}'
    )
    assert type(m) is Notification and bytes(m.params) == b'{"uri":"file:///x"}'


def test_decode_response():
    m = codec.decode(b'{"jsonrpc":"2.0","id":"r1","result":{}}')
    assert type(m) is Response and m.id == "r1" and bytes(m.result) == b"{}"


def test_decode_response_null_result_is_a_response():
    m = codec.decode(b'{"jsonrpc":"2.0","id":1,"result":null}')
    assert type(m) is Response and bytes(m.result) == b"null"
    with pytest.raises(RPCError):
        codec.decode_result(m.result, t.EmptyResult, m.id)


def test_decode_error_response():
    m = codec.decode(
        b'{"jsonrpc":"2.0","id":3,"error":{"code":-32002,"message":"Resource not found",'
        b'"data":{"uri":"file:///nope"}}}'
    )
    assert type(m) is ErrorResponse
    assert m.id == 3
    assert m.error == ErrorObject(-32002, "Resource not found", {"uri": "file:///nope"})


def test_decode_error_response_null_and_absent_id():
    m = codec.decode(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}')
    assert type(m) is ErrorResponse and m.id is None and m.error.data is UNSET
    # 2025-11-25 lets an error response omit the id
    m = codec.decode(b'{"jsonrpc":"2.0","error":{"code":-32600,"message":"x"}}')
    assert type(m) is ErrorResponse and m.id is None


def test_envelope_tolerates_unknown_fields():
    m = codec.decode(b'{"jsonrpc":"2.0","id":1,"method":"ping","x-trace":{"a":[1,2]},"extra":null}')
    assert type(m) is Request and m.method == "ping"
    m = codec.decode(b'{"jsonrpc":"2.0","id":1,"result":{},"note":"hi"}')
    assert type(m) is Response
    m = codec.decode(
        b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m","future":true},"z":1}'
    )
    assert type(m) is ErrorResponse and m.error.code == 1


def test_decode_accepts_str_bytearray_memoryview():
    raw = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
    for data in (raw, bytearray(raw.encode()), memoryview(raw.encode())):
        assert codec.decode(data) == Request(1, "ping")


# --------------------------------------------------------------------------
# -32700
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"garbage",
        b"{",
        b'{"jsonrpc":"2.0","id":1,"method":"ping"',
        b"",
        b"   ",
        b'{"jsonrpc":"2.0",}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping"} trailing',
        b'[{"jsonrpc":"2.0","method":"sum"},{"jsonrpc":"2.0","method"',  # truncated batch
        b"\xff\xfe",
    ],
)
def test_parse_error(data):
    e = _err(data)
    assert e.code == PARSE_ERROR
    assert e.id is None
    resp = error_response(e)
    assert resp.id is None and resp.error.code == -32700


def test_parse_error_response_encodes_null_id():
    wire = codec.encode(error_response(_err(b"nope")))
    assert msgspec.json.decode(wire)["id"] is None
    assert b'"id":null' in wire and b'"jsonrpc":"2.0"' in wire


# --------------------------------------------------------------------------
# -32600
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expect_id"),
    [
        (b'{"jsonrpc":"1.0","id":1,"method":"ping"}', 1),
        (b'{"jsonrpc":2.0,"id":1,"method":"ping"}', 1),
        (b'{"id":"a","method":"ping"}', "a"),
        (b'{"jsonrpc":null,"id":2,"result":{}}', 2),
        (b'{"jsonrpc":"2.0","id":9}', 9),  # no method, no result, no error
        (b'{"jsonrpc":"2.0"}', None),
        (b"{}", None),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":1.0,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":false,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":4,"method":42}', 4),
        (b'{"jsonrpc":"2.0","id":4,"method":null}', 4),
        (b'{"jsonrpc":"2.0","id":5,"result":{},"error":{"code":1,"message":"m"}}', 5),
        (b'{"jsonrpc":"2.0","id":6,"method":"ping","result":{}}', 6),
        (b'{"jsonrpc":"2.0","id":null,"result":{}}', None),
        (b'{"jsonrpc":"2.0","result":{}}', None),
        (b'{"jsonrpc":"2.0","id":1.5,"result":{}}', None),
        (b'{"jsonrpc":"2.0","id":true,"error":{"code":1,"message":"m"}}', None),
        (b'{"jsonrpc":"2.0","id":8,"error":{"code":"x","message":"m"}}', 8),
        (b'{"jsonrpc":"2.0","id":8,"error":{"code":true,"message":"m"}}', 8),
        (b'{"jsonrpc":"2.0","id":8,"error":{"code":1}}', 8),
        (b'{"jsonrpc":"2.0","id":8,"error":"boom"}', 8),
    ],
)
def test_invalid_request(data, expect_id):
    e = _err(data)
    assert e.code == INVALID_REQUEST, e.message
    assert e.id == expect_id
    assert type(e.id) is type(expect_id)
    assert e.message.startswith("Invalid Request")


@pytest.mark.parametrize("data", [b"1", b"-3.5", b'"str"', b"null", b"true", b"false"])
def test_non_object_is_invalid_request(data):
    e = _err(data)
    assert e.code == INVALID_REQUEST and e.id is None
    assert "JSON object" in e.message


@pytest.mark.parametrize(
    "data",
    [
        b"[]",
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
        b' \n [{"jsonrpc":"2.0","method":"notifications/initialized"},'
        b' {"jsonrpc":"2.0","id":2,"method":"ping"}]',
        b"[1,2,3]",
    ],
)
def test_batch_is_invalid_request(data):
    e = _err(data)
    assert e.code == INVALID_REQUEST and e.id is None
    assert "batch" in e.message


def test_invalid_request_messages_name_the_problem():
    assert "null" in _err(b'{"jsonrpc":"2.0","id":null,"method":"ping"}').message
    assert "boolean" in _err(b'{"jsonrpc":"2.0","id":true,"method":"ping"}').message
    assert '"jsonrpc"' in _err(b'{"jsonrpc":"1.0","id":1,"method":"ping"}').message
    assert '"method"' in _err(b'{"jsonrpc":"2.0","id":1}').message


# --------------------------------------------------------------------------
# -32601 / -32602 and RPCError
# --------------------------------------------------------------------------


def test_method_not_found_constructible_and_round_trips():
    err = RPCError(METHOD_NOT_FOUND, "Method not found: sampling/createMessage", id=12,
                   side="local")
    wire = codec.encode(error_response(err))
    back = codec.decode(wire)
    assert back == ErrorResponse(
        12, ErrorObject(-32601, "Method not found: sampling/createMessage")
    )
    assert msgspec.json.decode(wire) == {
        "jsonrpc": "2.0",
        "id": 12,
        "error": {"code": -32601, "message": "Method not found: sampling/createMessage"},
    }


def test_invalid_params_constructible_and_round_trips():
    err = RPCError(INVALID_PARAMS, "bad", data={"field": "name"}, id="x", side="local")
    back = codec.decode(codec.encode(error_response(err)))
    assert back == ErrorResponse("x", ErrorObject(-32602, "bad", {"field": "name"}))


def test_resource_not_found_round_trips_with_uri():
    err = RPCError(RESOURCE_NOT_FOUND, "Resource not found", {"uri": "agent://x"}, id=3,
                   side="local")
    back = codec.decode(codec.encode(error_response(err)))
    assert back.error.code == -32002 and back.error.data == {"uri": "agent://x"}


def test_protocol_error_attributes():
    err = RPCError(INTERNAL_ERROR, "oops", side="local")
    assert (err.code, err.message, err.data, err.id) == (-32603, "oops", UNSET, None)
    assert isinstance(err, Exception)
    assert "-32603" in str(err) and "oops" in repr(err)
    assert error_object(err) == ErrorObject(-32603, "oops")


def test_decode_params_unknown_method_is_method_not_found():
    assert not codec.known_method("sampling/createMessage")
    assert codec.known_method("tools/call")
    with pytest.raises(RPCError) as ei:
        codec.decode_params("sampling/createMessage", Raw(b"{}"), id=5)
    assert ei.value.code == METHOD_NOT_FOUND and ei.value.id == 5


@pytest.mark.parametrize(
    ("method", "params", "needle"),
    [
        ("tools/call", b'{"arguments":{}}', "name"),
        ("tools/call", b'{"name":5}', "params.name"),
        ("tools/call", b'{"name":"x","arguments":[1]}', "params.arguments"),
        ("tools/call", b"[1,2]", "object"),
        ("tools/call", b'"str"', "object"),
        ("resources/read", b"{}", "uri"),
        ("initialize", b'{"protocolVersion":"2025-11-25","capabilities":{}}', "clientInfo"),
        ("notifications/cancelled", b'{"requestId":1.5}', "requestId"),
    ],
)
def test_decode_params_mismatch_is_invalid_params(method, params, needle):
    with pytest.raises(RPCError) as ei:
        codec.decode_params(method, Raw(params), id=42)
    e = ei.value
    assert e.code == INVALID_PARAMS and e.id == 42
    assert method in e.message and needle in e.message
    assert codec.decode(codec.encode(error_response(e))).error.code == -32602


@pytest.mark.parametrize("method", ["tools/call", "resources/read", "initialize"])
def test_decode_params_required_but_absent(method):
    for raw in (UNSET, Raw(b"null")):
        with pytest.raises(RPCError) as ei:
            codec.decode_params(method, raw, id=1)
        assert ei.value.code == INVALID_PARAMS and "required" in ei.value.message


def test_decode_params_optional_absent_gives_empty_instance():
    assert codec.decode_params("ping", UNSET) == t.RequestParams()
    assert codec.decode_params("tools/list", UNSET) == t.PaginatedParams()
    assert codec.decode_params("tools/list", Raw(b"null")) == t.PaginatedParams()
    assert codec.decode_params("notifications/initialized", UNSET) == t.NotificationParams()


def test_every_params_type_table_entry_is_decodable():
    for method, (tp, required) in codec.PARAMS_TYPES.items():
        assert codec.known_method(method)
        if not required:
            assert isinstance(codec.decode_params(method, UNSET), tp)


# --------------------------------------------------------------------------
# encoding
# --------------------------------------------------------------------------


def test_encode_request_shapes():
    wire = codec.encode(Request(1, "ping"))
    assert msgspec.json.decode(wire) == {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert b"params" not in wire
    wire = codec.encode(Request("a", "tools/list", t.PaginatedParams(cursor="c")))
    assert msgspec.json.decode(wire) == {
        "jsonrpc": "2.0",
        "id": "a",
        "method": "tools/list",
        "params": {"cursor": "c"},
    }


def test_encode_notification_shapes():
    wire = codec.encode(Notification("notifications/initialized"))
    assert msgspec.json.decode(wire) == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert b'"id"' not in wire


def test_encode_response_and_error_shapes():
    assert msgspec.json.decode(codec.encode(Response(2, t.EmptyResult()))) == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {},
    }
    wire = codec.encode(ErrorResponse(3, ErrorObject(-32601, "nope")))
    assert msgspec.json.decode(wire) == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32601, "message": "nope"},
    }
    wire = codec.encode(ErrorResponse(3, ErrorObject(-32603, "x", data=None)))
    assert msgspec.json.decode(wire)["error"] == {"code": -32603, "message": "x", "data": None}


def test_encode_helpers_match_structs():
    p = t.CallToolParams("x", {"a": 1})
    assert codec.encode_request(1, "tools/call", p) == codec.encode(Request(1, "tools/call", p))
    assert codec.encode_notification("n") == codec.encode(Notification("n"))
    assert codec.encode_response(1, {"a": 1}) == codec.encode(Response(1, {"a": 1}))
    assert codec.encode_error(None, -32700, "p") == codec.encode(
        ErrorResponse(None, ErrorObject(-32700, "p"))
    )


def test_raw_params_are_spliced_verbatim():
    wire = codec.encode_request(9, "tools/call", t.CallToolParams("w", Raw(b'{"location":"NYC"}')))
    assert msgspec.json.decode(wire)["params"] == {"name": "w", "arguments": {"location": "NYC"}}


@pytest.mark.parametrize(
    "msg",
    [
        Request(1, "ping"),
        Request("id-1", "tools/call", {"name": "x", "arguments": {"k": [1, 2]}}),
        Notification("notifications/initialized"),
        Notification("notifications/cancelled", {"requestId": 4, "reason": "deadline"}),
        Response(5, {"content": []}),
        ErrorResponse(6, ErrorObject(-32602, "bad", {"why": "no"})),
        ErrorResponse(None, ErrorObject(-32700, "Parse error")),
    ],
)
def test_envelope_round_trip(msg):
    back = codec.decode(codec.encode(msg))
    assert type(back) is type(msg)
    assert back.jsonrpc == "2.0"
    for f in ("id", "method", "error"):
        assert getattr(back, f, None) == getattr(msg, f, None)
    for f in ("params", "result"):
        if hasattr(msg, f):
            v = getattr(msg, f)
            b = getattr(back, f)
            if v is UNSET:
                assert b is UNSET
            else:
                assert msgspec.json.decode(bytes(b)) == v


# --------------------------------------------------------------------------
# decode_result / decode_response
# --------------------------------------------------------------------------

CALL_RESPONSE = (
    b'{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"22.5\xc2\xb0C"}],'
    b'"isError":false,"structuredContent":{"temperature":22.5}}}'
)


def test_decode_result_typed():
    m = codec.decode(CALL_RESPONSE)
    r = codec.decode_result(m.result, t.CallToolResult, m.id)
    assert r == t.CallToolResult(
        [t.TextContent("22.5°C")], isError=False, structuredContent={"temperature": 22.5}
    )


def test_result_decode_error_is_a_protocol_error_with_the_id():
    m = codec.decode(b'{"jsonrpc":"2.0","id":11,"result":{"tools":[{"name":1}]}}')
    with pytest.raises(RPCError) as ei:
        codec.decode_result(m.result, codec.RESULT_TYPES["tools/list"], m.id)
    e = ei.value
    assert isinstance(e, RPCError)
    assert e.code == INTERNAL_ERROR and e.id == 11
    assert "ListToolsResult" in e.message and "result.tools[0].name" in e.message


def test_decode_response_fast_path():
    m = codec.decode_response(CALL_RESPONSE, t.CallToolResult)
    assert type(m) is Response and m.id == 2
    assert isinstance(m.result, t.CallToolResult)
    assert m.result.structuredContent == {"temperature": 22.5}


def test_decode_response_other_messages_pass_through():
    err = b'{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"no"}}'
    assert codec.decode_response(err, t.CallToolResult) == ErrorResponse(
        2, ErrorObject(-32601, "no")
    )
    note = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}'
    m = codec.decode_response(note, t.CallToolResult)
    assert type(m) is Notification and m.method == "notifications/progress"
    req = b'{"jsonrpc":"2.0","id":"s1","method":"ping"}'
    assert codec.decode_response(req, t.CallToolResult) == Request("s1", "ping")


def test_decode_response_errors_match_general_path():
    with pytest.raises(RPCError) as ei:
        codec.decode_response(b"{not json", t.CallToolResult)
    assert ei.value.code == PARSE_ERROR
    with pytest.raises(RPCError) as ei:
        codec.decode_response(b'{"jsonrpc":"2.0","id":true,"result":{}}', t.EmptyResult)
    assert ei.value.code == INVALID_REQUEST
    with pytest.raises(RPCError) as ei:
        codec.decode_response(b'{"jsonrpc":"2.0","id":3,"result":{"content":5}}', t.CallToolResult)
    assert ei.value.id == 3 and "result.content" in ei.value.message


def test_decode_response_unknown_content_block_survives():
    data = (
        b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a"},'
        b'{"type":"hologram","voxels":[1,2]}]}}'
    )
    m = codec.decode_response(data, t.CallToolResult)
    assert isinstance(m.result.content[0], t.TextContent)
    assert isinstance(m.result.content[1], t.UnknownContent)
    assert m.result.content[1].type == "hologram"


# --------------------------------------------------------------------------
# robustness: decode never fails with anything but RPCError
# --------------------------------------------------------------------------

hypothesis = peers.import_peer("hypothesis")
st = hypothesis.strategies

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=12,
)
_envelope = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2, None]),
        "id": _json,
        "method": st.sampled_from(["ping", "tools/call", 5, None]),
        "params": _json,
        "result": _json,
        "error": _json
        | st.fixed_dictionaries({"code": st.integers(), "message": st.text(max_size=8)}),
    },
)


@hypothesis.given(st.binary(max_size=64))
@hypothesis.settings(max_examples=300, deadline=None)
def test_decode_arbitrary_bytes_only_raises_protocol_error(data):
    try:
        codec.decode(data)
    except RPCError as e:
        assert e.code in (PARSE_ERROR, INVALID_REQUEST)


@hypothesis.given(_envelope)
@hypothesis.settings(max_examples=500, deadline=None)
def test_decode_arbitrary_envelopes(obj):
    data = msgspec.json.encode(obj)
    try:
        m = codec.decode(data)
    except RPCError as e:
        assert e.code == INVALID_REQUEST
        assert e.id is None or type(e.id) in (int, str)
        return
    # whatever was accepted re-encodes to an equal message
    assert codec.decode(codec.encode(m)) == m
    # and the one-pass path agrees with the general one, or fails only as a RPCError
    try:
        typed = codec.decode_response(data, t.EmptyResult)
    except RPCError:
        assert type(m) is Response
    else:
        assert type(typed) is type(m) and getattr(typed, "id", None) == getattr(m, "id", None)
