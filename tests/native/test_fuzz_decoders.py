"""Property tests over every decoder of a peer's bytes (issue 28): the targets
of fuzz/fuzz_decoders.py, each fed hypothesis-made bytes — arbitrary ones, and
JSON shaped to hit the bounds (deep nesting around the interpreter's
recursion limit, integers beyond 64 bits, invalid UTF-8, URLs that are no
URL). The property is the targets' own: nothing but agentd's own errors
escapes. Inputs that once escaped are kept below as explicit regressions.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))

import fuzz_decoders

TARGETS = fuzz_decoders.TARGETS
NAMES = sorted(TARGETS)


def _deep(depth: int, inner: bytes = b"") -> bytes:
    return b"[" * depth + inner + b"]" * depth


_scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=20),
    st.integers(min_value=-(2 ** 80), max_value=2 ** 80),
    st.floats(allow_nan=False, allow_infinity=False))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


@st.composite
def shaped(draw: st.DrawFn) -> bytes:
    """JSON-RPC-ish bytes with one hostile part: deep, huge, not UTF-8, or cut."""
    import orjson

    depth = draw(st.sampled_from([0, 255, 256, 300, 900, 975, 982, 990, 1000, 1100, 5000]))
    try:
        value = orjson.dumps(draw(_json))
    except TypeError:  # an integer beyond 64 bits: write it as JSON text
        value = str(draw(st.integers(min_value=2 ** 64, max_value=2 ** 80))).encode()
    payload = _deep(depth, value) if depth else value
    where = draw(st.sampled_from(["result", "params", "meta", "args", "bare", "oauth"]))
    if where == "result":
        out = (b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":' +
               payload + b"}}")
    elif where == "params":
        out = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + payload + b"}"
    elif where == "meta":
        out = (b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{'
               b'"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
               b'"io.modelcontextprotocol/clientCapabilities":{},"x":' + payload + b"}}}")
    elif where == "args":
        out = (b'{"choices":[{"message":{"tool_calls":[{"function":{"name":"x",'
               b'"arguments":' + payload + b"}}]}}]}")
    elif where == "oauth":
        out = (b'{"resource":"https://mcp.example/mcp","issuer":"https://as.example",'
               b'"token_endpoint":"https://as.example:99999/t","authorization_servers":'
               b'["https://[x"],"x":' + payload + b"}")
    else:
        out = payload
    mangle = draw(st.sampled_from(["none", "utf8", "cut"]))
    if mangle == "utf8":
        at = draw(st.integers(min_value=0, max_value=len(out)))
        out = out[:at] + b"\xff\xfe" + out[at:]
    elif mangle == "cut":
        out = out[:draw(st.integers(min_value=0, max_value=len(out)))]
    return out


_settings = settings(max_examples=40, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", NAMES)
@_settings
@given(data=st.binary(max_size=256))
def test_arbitrary_bytes_never_escape(name: str, data: bytes) -> None:
    TARGETS[name](data)


@pytest.mark.parametrize("name", NAMES)
@_settings
@given(data=shaped())
def test_hostile_json_never_escapes(name: str, data: bytes) -> None:
    TARGETS[name](data)


# Inputs that escaped before the guarded entry, kept as explicit cases.
REGRESSIONS = [
    # structuredContent nested 5,000 levels (RecursionError from the typed decode)
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":' + _deep(5000) + b"}}",
    # a 2026-07-28 _meta nested 982 levels: past the codec, into the envelope probe
    (b'{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{'
     b'"io.modelcontextprotocol/protocolVersion":"2026-07-28","x":' + _deep(982) + b"}}}"),
    # a gateway's tool-call arguments as an object, 300 deep and with 2**70
    (b'{"choices":[{"message":{"tool_calls":[{"function":{"name":"x","arguments":{"a":' +
     _deep(300) + b"}}}]}}]}"),
    (b'{"choices":[{"message":{"tool_calls":[{"function":{"name":"x","arguments":{"n":' +
     str(2 ** 70).encode() + b"}}}]}}]}"),
    # progress params nested past the decoder's guard (RecursionError from parse_progress)
    b'{"progressToken":1,"progress":1,"x":' + _deep(1000) + b"}",
    # Retry-After dates whose year overflows
    b"Fri, 31 Dec 99999999999 23:59:59 GMT", b"Mon, 01 Jan 99999999999999999999999 00:00:00 GMT",
    b"1e999", b"nan",
    # OAuth metadata whose URLs are no URL
    b"https://[x", b"https://as.example:99999/",
    b'{"resource":"https://mcp.example/mcp","authorization_servers":["https://[x"]}',
    b'{"issuer":"https://as.example","token_endpoint":"https://as.example:99999/t"}',
    # jsonschema-rs's own nesting limit on tool arguments
    b'{"a":' + _deep(300) + b"}",
    # a pool peer's relay answer nested 100,000 levels (RecursionError, then -32603)
    b'{"kind":"body","body":{"x":' + _deep(100_000) + b"}}",
    # invalid UTF-8 inside params
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"x":"\xff"}}}',
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("data", REGRESSIONS, ids=lambda d: d[:24].decode("latin-1"))
def test_regressions(name: str, data: bytes) -> None:
    TARGETS[name](data)


def test_every_decoder_of_peer_input_has_a_target() -> None:
    assert {"codec.decode", "codec.decode_response", "codec.decode_result",
            "codec.decode_params", "client_session.receive", "client_session.results",
            "stateless_session.classify", "control.feed", "openai.decode", "retry_after",
            "a2a.decode", "oauth.urls", "oauth.metadata", "schema.validate", "client.progress",
            "client.ttl", "pool.relay_answer"} <= set(TARGETS)


def test_retry_after_is_one_overflow_safe_parser() -> None:
    """Both clients' `Retry-After` (delta-seconds or an HTTP-date), clamped to the
    caller's cap; the clock is injected."""
    from agentd.intelligence import openai
    from agentd.mcp.client.rules import faults

    assert openai.parse_retry_after is faults.parse_retry_after  # one function, two callers
    p = faults.parse_retry_after
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert p("3") == 3.0 and p(" 0 ") == 0.0 and p("-5") == 0.0
    assert p("Wed, 21 Oct 2015 07:28:10 GMT", now=now) == 10.0
    assert p("Wed, 21 Oct 2015 07:28:10 GMT", now=now + 60) == 0.0  # in the past
    assert p("Wed, 21 Oct 2015 08:28:00 GMT", now=now) == faults.RETRY_AFTER_CAP
    assert p("Wed, 21 Oct 2015 08:28:00 GMT", now=now, cap=60.0) == 60.0
    assert p("1e999") == faults.RETRY_AFTER_CAP and p("-inf") == 0.0
    for junk in (None, "", "soon", "nan", "Fri, 31 Dec 99999999999 23:59:59 GMT",
                 "Mon, 01 Jan 99999999999999999999999 00:00:00 GMT"):
        assert p(junk) is None, junk
    assert p("9" * 10_000) == faults.RETRY_AFTER_CAP  # read 64 characters: a number, capped
