"""Fuzzing (hypothesis) of the two byte-level readers a peer controls:

* the served HTTP endpoint's request path (aiohttp's parser behind
  ``agentd.mcp.server.http.limits.Gate``, then our header checks and the JSON-RPC
  codec), over a real loopback socket to a real listener;
* the control-wire frame reader (``ControlSession.feed``: frames, JSON,
  typed params), fed arbitrary bytes in arbitrary chunks.

The properties: every input gets an HTTP answer with a 4xx/2xx status or a
closed connection, never a 5xx, never an error-level log line, and the server
keeps serving; the frame reader either yields messages or raises
``TreeError`` (nothing else), and chunking never changes what a
valid stream decodes to.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import re
import socket
import sys
import threading

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd import log as agentd_log
from agentd.child.control import ControlSession
from agentd.errors import TreeError
from agentd.mcp.server.handler import Handler
from agentd.mcp.server.http.server import Limits, serve
from agentd_native import encode_frame

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "fuzz", "version": "1"}}}


# ------------------------------------------------------------- HTTP server
class _Served:
    """A real listener on its own loop thread (hypothesis drives it synchronously)."""

    def __init__(self) -> None:
        self.log = io.StringIO()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        h = Handler("fuzz", "1")

        @h.tool("echo", {"type": "object"}, description="echo")
        async def echo(args, ctx):
            return json.dumps(args)

        async def start() -> None:
            self.runner = await serve(h, port=0, limits=Limits(
                body_timeout=1.0, header_timeout=1.0, keepalive_timeout=1.0))
            self.ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def stop(self) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.runner.stop(), self.loop)
        fut.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@pytest.fixture(scope="module")
def served():
    s = _Served()
    agentd_log.configure(stream=s.log)
    try:
        yield s
    finally:
        s.stop()
        agentd_log.configure(stream=sys.stderr)  # where the conftest's `logs` puts it back


def exchange(port: int, data: bytes) -> bytes:
    """Send, then read until the server closes (an incomplete request is closed by
    the server's header/body timeouts) or one whole answer has arrived."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(data)
        except OSError:
            return b""
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                got = b"".join(chunks)
                head, sep, rest = got.partition(b"\r\n\r\n")
                length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                if sep and length and len(rest) >= int(length.group(1)):
                    break  # one whole answer: the connection may stay open (keep-alive)
        except (ConnectionResetError, TimeoutError):
            pass
        return b"".join(chunks)


TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_0123456789",
                min_size=1, max_size=20)
RAW = st.binary(max_size=200)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                             max_size=4),
    max_leaves=20)
bodies = st.one_of(
    RAW,
    json_values.map(orjson.dumps),
    st.builds(lambda m, p, i: orjson.dumps({"jsonrpc": "2.0", "id": i, "method": m,
                                            "params": p}),
              st.sampled_from(["initialize", "tools/call", "tools/list", "ping", "x/y"]),
              json_values, st.integers(-(2**31), 2**31) | st.text(max_size=5)),
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
    st.just(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",'
            b'"arguments":{"x":"\xff\xfe"}}}'),
)
content_types = st.sampled_from([
    "application/json", "APPLICATION/JSON", "application/json; charset=utf-8",
    "application/jsonp", "text/plain", "", "application/json;;;", "application/*"])
targets = st.one_of(st.sampled_from(["/mcp", "/", "/nope", "http://evil.example/mcp",
                                     "http://127.0.0.1/mcp", "*", "//mcp", "/mcp?x=1"]),
                    TOKEN.map(lambda t: "/" + t))
methods = st.sampled_from(["POST", "GET", "DELETE", "PUT", "OPTIONS", "HEAD", "PRI", "post"])


@st.composite
def requests(draw) -> bytes:
    method = draw(methods)
    target = draw(targets)
    body = draw(bodies)
    headers = [("Host", draw(st.sampled_from(["127.0.0.1", "localhost:1", "evil.example",
                                              "[::1]", ""])))]
    ctype = draw(content_types)
    if ctype:
        headers.append(("Content-Type", ctype))
    headers.append(("Accept", draw(st.sampled_from(
        ["application/json, text/event-stream", "*/*", "application/jsonp", "text/*", ""]))))
    for name, value in draw(st.lists(st.tuples(TOKEN, st.text(max_size=30)), max_size=4)):
        headers.append((name, value))
    if draw(st.booleans()):
        headers.append(("Origin", draw(st.sampled_from(
            ["http://127.0.0.1", "null", "http://evil.example", "file://x"]))))
    length = draw(st.sampled_from(["exact", "missing", "short", "long", "junk"]))
    if length == "exact":
        headers.append(("Content-Length", str(len(body))))
    elif length == "short":
        headers.append(("Content-Length", str(max(0, len(body) - 3))))
    elif length == "long":
        headers.append(("Content-Length", str(len(body) + 10)))
    elif length == "junk":
        headers.append(("Content-Length", "12abc"))
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    raw = head.encode("utf-8", "surrogateescape") + b"\r\n" + body
    if draw(st.booleans()):  # arbitrary damage somewhere in the message
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(RAW) + raw[at:]
    return raw


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=requests())
def test_http_request_path_never_fails_inside(served, data):
    answer = exchange(served.runner.port, data)
    if answer:
        assert answer.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), answer[:60]
        status = int(answer[9:12])
        assert 200 <= status < 500, answer[:300]


def test_http_fuzz_left_the_server_serving_and_quiet(served):
    body = orjson.dumps(INIT)
    answer = exchange(served.runner.port, (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    lines = [json.loads(ln) for ln in served.log.getvalue().splitlines() if ln.strip()]
    assert not [ln for ln in lines if ln["level"] == "error"]


# ------------------------------------------------------- control wire reader
def _feed_all(session: ControlSession, chunks: list[bytes]) -> list:
    out = []
    for chunk in chunks:
        out.extend(session.feed(chunk))
    return out


@st.composite
def chunked(draw, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=st.data())
def test_control_frame_reader_only_raises_protocol_errors(data):
    raw = data.draw(st.one_of(
        st.binary(max_size=300),
        st.lists(st.binary(max_size=60).map(encode_frame), max_size=5).map(b"".join),
        st.lists(bodies.map(lambda b: encode_frame(b)), max_size=4).map(b"".join),
    ))
    role = data.draw(st.sampled_from(["child", "parent"]))
    session = ControlSession(role, max_frame=data.draw(st.sampled_from([16, 1024, 1 << 20])))
    try:
        _feed_all(session, data.draw(chunked(raw)))
    except TreeError:
        pass


valid_msgs = st.one_of(
    st.builds(lambda m: {"jsonrpc": "2.0", "id": 1, "method": "child/run",
                         "params": {"message": m}}, st.text(max_size=40)),
    st.builds(lambda h, s: {"jsonrpc": "2.0", "method": "child/terminal",
                            "params": {"handle": h, "status": s}},
              st.text(max_size=10), st.sampled_from(["completed", "failed", "cancelled"])),
    st.just({"jsonrpc": "2.0", "id": 2, "method": "child/cancel", "params": {}}),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=st.data())
def test_control_frame_reader_is_independent_of_chunking(data):
    msgs = data.draw(st.lists(valid_msgs, min_size=1, max_size=6))
    raw = b"".join(encode_frame(orjson.dumps(m)) for m in msgs)
    whole = ControlSession("child").feed(raw)
    pieces = _feed_all(ControlSession("child"), data.draw(chunked(raw)))
    assert [(e.method, e.id) for e in pieces] == [(e.method, e.id) for e in whole]
    assert len(whole) == len(msgs)
