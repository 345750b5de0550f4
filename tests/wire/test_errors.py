"""The error tree (agentd.errors): every exception class of the package has a
place under `AgentdError`, and a run's exit code is read off the class."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from msgspec import UNSET

import agentd
from agentd.errors import AgentdError, ConfigError, RPCError, classify
from agentd.exitcodes import ExitCode
from agentd.intelligence.base import IntelligenceUnavailable
from agentd.mcp.client.rules.faults import RequiredServerLost
from agentd.wire import codec
from agentd.wire.jsonrpc import ErrorResponse, error_response


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(agentd.__path__, "agentd."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == info.name:
                found.append(obj)
    return found


def test_every_exception_class_is_in_the_tree() -> None:
    classes = _exception_classes()
    assert len(classes) > 10  # the walk found the package
    outside = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes
                     if not issubclass(c, AgentdError))
    assert outside == []


def test_one_jsonrpc_error_type_with_a_side() -> None:
    for side in ("local", "remote"):
        err = RPCError(-32601, "Method not found", {"x": 1}, side=side, id=7)
        assert (err.code, err.message, err.data, err.side, err.id) == (
            -32601, "Method not found", {"x": 1}, side, 7)
        assert str(err) == "[-32601] Method not found"
    assert RPCError(-32603, "boom", side="remote").data is UNSET  # no data: none on the wire
    back = codec.decode(codec.encode(error_response(RPCError(-32002, "Resource not found",
                                                             {"uri": "r://x"}, side="local",
                                                             id=3))))
    assert isinstance(back, ErrorResponse)
    assert (back.id, back.error.code, back.error.data) == (3, -32002, {"uri": "r://x"})


def test_classify_is_one_lookup_on_the_error() -> None:
    assert classify(IntelligenceUnavailable("down")) == (
        ExitCode.INTELLIGENCE, "intelligence.unavailable", "down")
    assert classify(RequiredServerLost("fs", "refused", handshake=True))[:2] == (
        ExitCode.MCP_REQUIRED, "mcp.required_failed")
    assert classify(RequiredServerLost("fs", "gone"))[:2] == (
        ExitCode.FAILED, "mcp.required_lost")
    assert classify(ConfigError("bad")) == (ExitCode.USAGE, "config.invalid", "bad")
    assert classify(RPCError(-32603, "boom", side="remote")) == (
        ExitCode.FAILED, "run.failed", "RPCError: [-32603] boom")
    assert classify(KeyError("k")) == (ExitCode.FAILED, "run.failed", "KeyError: 'k'")


def test_a_kind_decides_where_a_subclass_did() -> None:
    from agentd.errors import A2AFault, IntelligenceError, PoolError, ReactiveError

    assert classify(RequiredServerLost("p", "no card", handshake=True, what="A2A peer")) == (
        ExitCode.MCP_REQUIRED, "mcp.required_failed", "required A2A peer 'p' failed: no card")
    assert classify(A2AFault("peer p: GetTask: gone", kind="not_found"))[:2] == (
        ExitCode.FAILED, "run.failed")
    assert classify(PoolError("pool: worker w is unreachable", kind="unavailable")) == (
        ExitCode.FAILED, "pool.relay_unavailable", "pool: worker w is unreachable")
    assert classify(PoolError("relay request: bad MAC", kind="auth"))[:2] == (
        ExitCode.FAILED, "run.failed")
    assert IntelligenceUnavailable("down").kind == "unavailable"
    assert classify(IntelligenceError("token_ceiling=1 reached", kind="ceiling"))[:2] == (
        ExitCode.FAILED, "run.failed")
    err = ReactiveError("file:///x", "fs", "no resources.subscribe")
    assert classify(err) == (ExitCode.MCP_REQUIRED, "reactive.refused",
                             "cannot watch file:///x on server 'fs': no resources.subscribe; "
                             "polling is disabled (--poll-interval 0)")
