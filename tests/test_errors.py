"""The error tree (agentd.errors): every exception class of the package has a
place under `AgentdError`, and a run's exit code is read off the class."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import agentd
from agentd.config import ConfigError
from agentd.errors import AgentdError, PeerError, RemoteError, RPCError, classify
from agentd.exitcodes import ExitCode
from agentd.intelligence.base import IntelligenceUnavailable
from agentd.mcp.faults import RequiredServerLost
from agentd.wire.jsonrpc import ProtocolError


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
    assert len(classes) > 25
    outside = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes
                     if not issubclass(c, AgentdError))
    assert outside == []


def test_the_peer_errors_share_one_base() -> None:
    for cls in (ProtocolError, RPCError, RemoteError):
        err = cls(-32601, "Method not found", {"x": 1})
        assert isinstance(err, PeerError)
        assert (err.code, err.message, err.data) == (-32601, "Method not found", {"x": 1})
    # the texts the callers print are unchanged
    assert str(ProtocolError(-32601, "nope")) == "[-32601] nope"
    assert str(RPCError(-32603, "boom")) == "[-32603] boom"
    assert str(RemoteError(-32010, "spawn refused: x")) == "spawn refused: x"


def test_classify_is_one_lookup_on_the_error() -> None:
    assert classify(IntelligenceUnavailable("down")) == (
        ExitCode.INTELLIGENCE, "intelligence.unavailable", "down")
    assert classify(RequiredServerLost("fs", "refused", handshake=True))[:2] == (
        ExitCode.MCP_REQUIRED, "mcp.required_failed")
    assert classify(RequiredServerLost("fs", "gone"))[:2] == (
        ExitCode.FAILED, "mcp.required_lost")
    assert classify(ConfigError("bad")) == (ExitCode.USAGE, "config.invalid", "bad")
    assert classify(RPCError(-32603, "boom")) == (
        ExitCode.FAILED, "run.failed", "RPCError: [-32603] boom")
    assert classify(KeyError("k")) == (ExitCode.FAILED, "run.failed", "KeyError: 'k'")
