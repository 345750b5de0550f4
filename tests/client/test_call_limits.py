"""The rules of a tools/call's limits (agentd.mcp.client.rules.call_limits), on an injected clock.

No sockets: :class:`CallDeadline` is fed ``(event, now)`` by hand; the token
bookkeeping of :class:`CallWatches` is fed raw notification bytes on a bare
event loop.  The real servers are in tests/client/test_client_progress.py.
"""

from __future__ import annotations

import io
import json
import sys

import msgspec
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from logcapture import events

from agentd import log
from agentd.cli.flags import config_from_flags
from agentd.config.model import Config, RunLimits, ServerSpec
from agentd.errors import ConfigError
from agentd.mcp.client.call_watch import CallWatches
from agentd.mcp.client.rules.call_limits import (
    CallDeadline,
    LimitReached,
    ToolLimits,
    meta_with_token,
    parse_progress,
    server_limits,
    tool_limits,
)
from agentd.mcp.client.rules.session import Capabilities, ClientSession
from agentd.wire import mcp_types as mt


def test_idle_deadline_moves_with_progress_and_names_its_limit():
    d = CallDeadline(ToolLimits(idle=60, total=3600), now=100.0)
    assert d.expires_at() == 160.0
    assert d.check(159.9) is None
    assert d.progressed(1, now=150.0)  # progress at t=150: idle runs from there
    assert d.expires_at() == 210.0
    assert d.check(200.0) is None
    reached = d.check(210.0)
    assert reached == LimitReached("idle", 60)
    assert reached.text == ("tool call ended by agentd: no progress for 60 s "
                            "(--tool-idle-timeout)")
    assert reached.reason == "no progress for 60 s (--tool-idle-timeout)"
    assert d.check(999.0) is reached  # ended once, for good
    assert not d.progressed(2, now=211.0)  # progress after the end revives nothing
    assert d.expires_at() == 210.0


def test_the_cap_bounds_a_call_that_reports_progress_for_ever():
    d = CallDeadline(ToolLimits(idle=10, total=25), now=0.0)
    for i, t in enumerate((5.0, 12.0, 19.0), start=1):
        assert d.progressed(i, now=t)
    assert d.expires_at() == 25.0  # 19 + 10 would be later: the cap decides
    assert d.check(24.0) is None
    reached = d.check(25.0)
    assert reached is not None and reached.limit == "total" and reached.flag == "--tool-timeout"
    assert reached.text == ("tool call ended by agentd: still running after 25 s "
                            "(--tool-timeout)")


def test_a_tie_is_the_cap_and_no_limit_never_expires():
    d = CallDeadline(ToolLimits(idle=10, total=10), now=0.0)
    reached = d.check(10.0)
    assert reached is not None and reached.limit == "total"
    free = CallDeadline(ToolLimits(None, None), now=0.0)
    assert free.expires_at() is None and free.check(1e12) is None
    only_cap = CallDeadline(ToolLimits(None, 5), now=1.0)
    assert only_cap.progressed(1, 2.0) and only_cap.expires_at() == 6.0


def test_progress_that_does_not_increase_refreshes_nothing():
    """The spec: progress MUST increase with each notification."""
    d = CallDeadline(ToolLimits(idle=10, total=None), now=0.0)
    assert d.progressed(5, now=1.0)
    assert not d.progressed(5, now=4.0)  # equal
    assert not d.progressed(3, now=8.0)  # backwards
    assert d.stalls == 2
    assert d.expires_at() == 11.0  # still counted from the last real progress
    assert d.progressed(5.5, now=9.0)
    assert d.expires_at() == 19.0


def test_progress_from_the_past_does_not_move_the_idle_clock_back():
    d = CallDeadline(ToolLimits(idle=10, total=None), now=50.0)
    assert d.progressed(1, now=40.0)  # a clock that went backwards: never earlier
    assert d.expires_at() == 60.0


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 5)), max_size=30),
       st.floats(0.5, 50), st.one_of(st.none(), st.floats(1, 500)))
def test_expiry_never_moves_earlier_and_never_passes_the_cap(steps, idle, total):
    d = CallDeadline(ToolLimits(idle, total), now=0.0)
    now, last = 0.0, d.expires_at()
    for value, dt in steps:
        now += dt
        if d.check(now) is not None:
            break
        d.progressed(value, now)
        at = d.expires_at()
        assert at is not None and last is not None and at >= last
        if total is not None:
            assert at <= total
        assert at >= now or at == total
        last = at


def test_parse_progress_takes_only_what_the_spec_allows():
    assert parse_progress(b'{"progressToken":7,"progress":1.5,"total":3}').value == 1.5
    assert parse_progress(b'{"progressToken":"t","progress":2}').token == "t"
    for bad_value in (b'"x"', b"null", b"true", b"[1]", b'{"a":1}'):
        got = parse_progress(b'{"progressToken":1,"progress":' + bad_value + b"}")
        assert got is not None and got.value is None, bad_value
    for bad in (b'{"progress":1}', b'{"progressToken":true,"progress":1}',
                b'{"progressToken":1.5,"progress":1}', b'{"progressToken":null}', b"[1]",
                b"not json", b"", b'{"progressToken":"' + b"x" * 300 + b'","progress":1}'):
        assert parse_progress(bad) is None, bad


def test_meta_with_token_splices_a_valid_object():
    assert orjson.loads(meta_with_token(b"{}", 3)) == {"progressToken": 3}
    run = orjson.dumps({"io.modelcontextprotocol/run-id": "r", "traceparent": "00-x"})
    assert orjson.loads(meta_with_token(run, 9)) == {
        "progressToken": 9, "io.modelcontextprotocol/run-id": "r", "traceparent": "00-x"}
    assert orjson.loads(meta_with_token(b' { "a" : 1 } ', 1)) == {"progressToken": 1, "a": 1}


def test_the_token_rides_params_meta_of_tools_call_at_both_revisions():
    for stateless in (False, True):
        s = ClientSession(client_version="1")
        s.state, s.capabilities = "ready", Capabilities(tools=True)
        s.stateless = stateless
        if stateless:
            s.set_meta({"io.modelcontextprotocol/run-id": "r"})
        meta = meta_with_token(s.meta_json if stateless else b'{"io.modelcontextprotocol/run-id"'
                               b':"r"}', 42)
        _rid, data = s.call_tool(b'"slow"', b"{}", meta)
        params = orjson.loads(data)["params"]
        assert params["_meta"]["progressToken"] == 42
        assert params["_meta"]["io.modelcontextprotocol/run-id"] == "r"
        if stateless:  # the revision's reserved keys stay beside it
            assert params["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"


def test_tool_limits_of_the_config():
    assert tool_limits(RunLimits()) == ToolLimits(None, 3600.0) == ToolLimits()
    assert tool_limits(RunLimits(tool_idle_timeout=0, tool_timeout=0)) == ToolLimits(None, None)
    assert tool_limits(Config(tool_idle_timeout=5)) == ToolLimits(5, 3600.0)


def test_a_servers_entry_overrides_the_runs_limits():
    run = ToolLimits(120.0, 3600.0)
    assert server_limits(run, ServerSpec("s", "http://127.0.0.1/mcp")) == run
    slow = ServerSpec("s", "http://127.0.0.1/mcp", tool_idle_timeout=0, tool_timeout=7200)
    assert server_limits(run, slow) == ToolLimits(None, 7200)
    quick = ServerSpec("s", "http://127.0.0.1/mcp", tool_idle_timeout=5)
    assert server_limits(ToolLimits(None, None), quick) == ToolLimits(5, None)


def test_a_config_files_server_entry_carries_its_limits(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('[[mcp_servers]]\nname = "slow"\nurl = "http://127.0.0.1:9/mcp"\n'
                    "tool_idle_timeout = 0\ntool_timeout = 7200\n")
    cfg = config_from_flags({"config_file": str(good)}, needs_instruction=False)
    spec = cfg.server("slow")
    assert spec is not None and (spec.tool_idle_timeout, spec.tool_timeout) == (0, 7200)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[mcp_servers]]\nname = "s"\nurl = "http://127.0.0.1:9/mcp"\n'
                   "tool_timeout = -1\n")
    with pytest.raises(ConfigError, match="tool_timeout must not be negative"):
        config_from_flags({"config_file": str(bad)}, needs_instruction=False)


@pytest.mark.parametrize("key", ["tool_idle_timeout", "tool_timeout"])
def test_a_negative_limit_is_a_usage_error(key):
    with pytest.raises(ConfigError, match=f"--{key.replace('_', '-')} must not be negative"):
        config_from_flags({key: -1.0}, needs_instruction=False)
    assert getattr(config_from_flags({key: 0.0}, needs_instruction=False), key) == 0.0


# -- the token bookkeeping (CallWatches), fed bytes on a bare loop -------------------


def _progress(token, value) -> msgspec.Raw:
    return msgspec.Raw(json.dumps({"progressToken": token, "progress": value}).encode())


async def test_unknown_malformed_and_stalled_progress_is_dropped_and_logged():
    buf = io.StringIO()
    log.configure(stream=buf, fmt="json", level="debug")
    try:
        w = CallWatches(ToolLimits(idle=10, total=None), log.log.bind(server="s"))
        watch = w.open("slow")
        assert watch is not None
        meta = orjson.loads(watch.meta(b"{}"))
        token = meta["progressToken"]
        before = watch.deadline.expires_at()
        for raw in (_progress(token + 1000, 1), _progress("nope", 1),
                    msgspec.Raw(b'{"progress":1}'), msgspec.Raw(b"[]"), msgspec.Raw(b"")):
            w.notified(raw)
        assert w.unknown == 5
        w.notified(_progress(token, "lots"))  # not a number: no progress, once logged
        w.notified(_progress(token, 3))
        w.notified(_progress(token, 2))  # backwards
        assert watch.deadline.last_progress == 3 and watch.deadline.stalls == 2
        assert watch.deadline.expires_at() >= before
        # a second send of the call gets a fresh token; the old one is unknown now
        new = orjson.loads(watch.meta(b"{}"))["progressToken"]
        assert new != token
        w.notified(_progress(token, 9))
        assert w.unknown == 6 and watch.deadline.last_progress == 3
        watch.release()
        w.notified(_progress(new, 10))
        assert w.unknown == 7
    finally:
        log.configure(stream=sys.stderr, level="info")
    assert len(events(buf, "mcp.progress.ignored")) == 7
    assert len(events(buf, "mcp.progress.stalled")) == 1  # bounded: once per call
    assert [e["progress"] for e in events(buf, "mcp.progress")] == [3.0]


async def test_no_limits_means_no_watch_and_no_token():
    w = CallWatches(ToolLimits(None, None), log.log)
    assert w.open("slow") is None


def test_progress_notifications_reach_the_client_whatever_the_capabilities():
    s = ClientSession(client_version="1")
    s.state = "ready"
    got = s.receive(b'{"jsonrpc":"2.0","method":"notifications/progress",'
                    b'"params":{"progressToken":1,"progress":2}}')
    assert [e.method for e in got] == [mt.NOTIFICATION_PROGRESS]
