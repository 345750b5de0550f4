"""Fuzz targets: every decoder of a peer's bytes (issue 28).

``TARGETS`` maps a name to a callable taking arbitrary bytes. A target feeds
them to one decoder the way the code does with a peer's input and raises
``AssertionError`` when anything escapes other than the project's own errors
(:class:`agentd.errors.AgentdError` and its subclasses: ``RPCError``,
``HandshakeError``, ``IntelligenceError``, ``OAuthError``, the A2A fault, the
control wire's error, ``ConfigError``). ``fuzz/run.py`` discovers this file and
runs the targets (atheris when installed, else a random loop);
``tests/native/test_fuzz_decoders.py`` runs the same targets under hypothesis.

The decoders are called directly, never a mock of a peer: the bytes are the
peer.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from agentd.a2a.client import A2AClient
from agentd.child.control import ControlSession
from agentd.config.endpoints import check_endpoint
from agentd.config.model import ServerSpec
from agentd.errors import AgentdError, RPCError
from agentd.intelligence.openai import OpenAICompatible
from agentd.mcp.client.oauth import discovery
from agentd.mcp.client.oauth.challenge import parse_challenge
from agentd.mcp.client.oauth.http import check_url, origin
from agentd.mcp.client.rules.call_limits import parse_progress
from agentd.mcp.client.rules.call_meta import ttl_ms
from agentd.mcp.client.rules.faults import parse_retry_after
from agentd.mcp.client.rules.schema import Validator, schemas
from agentd.mcp.client.rules.session import ClientSession
from agentd.mcp.server.rules import stateless
from agentd.pool.link import relay
from agentd.wire import a2a as w
from agentd.wire import codec
from agentd.wire import mcp_types as t
from agentd.wire.guard import loads_peer
from agentd.wire.jsonrpc import Request
from agentd_native import encode_frame

Target = Callable[[bytes], None]
TARGETS: dict[str, Target] = {}


def target(name: str) -> Callable[[Callable[[bytes], Any]], Target]:
    """Register ``fn`` under ``name``, wrapped so that only the project's own
    errors may leave it."""
    def deco(fn: Callable[[bytes], Any]) -> Target:
        def run(data: bytes) -> None:
            try:
                fn(data)
            except AgentdError:
                pass
            except Exception as exc:  # the property: nothing else escapes a decoder
                raise AssertionError(f"{name}: {type(exc).__name__} escaped: {exc}"[:500]
                                     ) from exc
        run.__name__ = f"fuzz_{name.replace('.', '_')}"
        TARGETS[name] = run
        return run
    return deco


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


# ------------------------------------------------------------------ the codec
@target("codec.decode")
def _codec_decode(data: bytes) -> None:
    codec.decode(data)


@target("codec.decode_response")
def _codec_decode_response(data: bytes) -> None:
    codec.decode_response(data, t.CallToolResult)
    codec.decode_response(data, t.ListToolsResult)


@target("codec.decode_result")
def _codec_decode_result(data: bytes) -> None:
    for tp in (t.CallToolResult, t.InitializeResult, t.ReadResourceResult):
        try:
            codec.decode_result(msgspec.Raw(data), tp)
        except RPCError:
            pass


@target("codec.decode_params")
def _codec_decode_params(data: bytes) -> None:
    for method in (t.TOOLS_CALL, t.INITIALIZE, t.NOTIFICATION_PROGRESS):
        try:
            codec.decode_params(method, msgspec.Raw(data), 1)
        except RPCError:
            pass


@target("client.progress")
def _client_progress(data: bytes) -> None:
    """A server's notifications/progress params (read on the transport's reader)."""
    parse_progress(msgspec.Raw(data))


@target("client.ttl")
def _client_ttl(data: bytes) -> None:
    """A 2026-07-28 list result's ttlMs."""
    ttl_ms(msgspec.Raw(data))


# -------------------------------------------------- the client session (both eras)
@target("client_session.receive")
def _client_receive(data: bytes) -> None:
    s = ClientSession(client_version="fuzz")
    s.receive(data)  # never raises: garbage is counted
    s.take_garbled()


@target("client_session.results")
def _client_results(data: bytes) -> None:
    raw = msgspec.Raw(data)
    ClientSession.acknowledged(raw)
    ClientSession.input_required(raw)
    ClientSession.updated_uri(raw)
    s = ClientSession(client_version="fuzz")
    s.start_discover()
    try:
        s.finish_discover(raw)
    except AgentdError:
        pass
    s = ClientSession(client_version="fuzz")
    s.start_initialize()
    s.finish_initialize(raw)


# ------------------------------------------------- the served rules (2026-07-28)
@target("stateless_session.classify")
def _stateless_classify(data: bytes) -> None:
    req = Request(1, "tools/call", msgspec.Raw(data))
    stateless.carries_envelope(req)
    try:
        stateless.meta_free_params(req)
    except RPCError:
        pass
    try:
        stateless.listen_params(req)
    except RPCError:
        pass
    stateless.classify(req)


# ---------------------------------------------------------- the control wire
@target("control.feed")
def _control_feed(data: bytes) -> None:
    ControlSession("parent").feed(encode_frame(data))
    ControlSession("child").feed(data)


# ------------------------------------------------------------- the gateway
_gateway = OpenAICompatible("http://127.0.0.1:9/v1")


@target("openai.decode")
def _openai_decode(data: bytes) -> None:
    _gateway._decode(data)


@target("retry_after")
def _retry_after(data: bytes) -> None:
    value = parse_retry_after(_text(data))
    assert value is None or 0.0 <= value <= 30.0, value


# ---------------------------------------------------------------------- A2A
_a2a = A2AClient(ServerSpec(name="fuzz", url="http://127.0.0.1:9"), secrets_dir="/nonexistent")


@target("a2a.decode")
def _a2a_decode(data: bytes) -> None:
    for dec in (w.card_decoder, w.task_decoder, w.send_response_decoder, w.stream_decoder,
                w.send_request_decoder):
        try:
            _a2a._decode(dec, data, "fuzz")
        except AgentdError:
            pass


# ---------------------------------------------------------------- the pool link
@target("pool.relay_answer")
def _pool_relay_answer(data: bytes) -> None:
    relay.decode_answer(data, "w9")


# -------------------------------------------------------------------- OAuth
class _Doc:
    """Answers discovery's one GET with the fuzzed document (the bytes are the peer)."""

    def __init__(self, data: bytes) -> None:
        self.doc = loads_peer(data, lambda text: AgentdError(text))

    async def get_json(self, url: str, what: str) -> dict | None:
        return self.doc if isinstance(self.doc, dict) else None


@target("oauth.urls")
def _oauth_urls(data: bytes) -> None:
    text = _text(data)
    for fn in (lambda: check_url(text, "fuzz"), lambda: origin(text),
               lambda: discovery.resource_matches(text, "https://mcp.example/mcp"),
               lambda: check_endpoint(text, "fuzz")):
        try:
            fn()
        except AgentdError:
            pass
    parse_challenge(text)


@target("oauth.metadata")
def _oauth_metadata(data: bytes) -> None:
    http: Any = _Doc(data)
    try:
        asyncio.run(discovery.discover_prm(http, "https://mcp.example/mcp", None))
    except AgentdError:
        pass
    asyncio.run(discovery.discover_as(http, "https://as.example"))


# ------------------------------------------------------------ tool arguments
_maybe = schemas.get({"type": "object", "properties": {"a": {"type": "string"}}}, what="fuzz")
assert _maybe is not None
_validator: Validator = _maybe


@target("schema.validate")
def _schema_validate(data: bytes) -> None:
    value = loads_peer(data, lambda text: AgentdError(text))
    _validator.is_valid(value)
    _validator.errors(value)
