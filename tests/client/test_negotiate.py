"""The sans-IO negotiation rules (agentd/mcp/client/rules/negotiate.py): no sockets, no clock."""

from __future__ import annotations

import msgspec
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.errors import HandshakeError
from agentd.mcp.client.rules.negotiate import (
    VersionChoice,
    choose_supported,
    listen_delivers,
    renegotiate_for_updates,
    unknown_session,
)
from agentd.mcp.client.rules.session import ClientSession
from agentd.wire import mcp_types as mt


def test_choose_supported_prefers_the_newest_version_agentd_speaks():
    # the conformance suite's request-metadata answer
    assert choose_supported({"supported": ["2026-07-28"], "requested": "x"}) == VersionChoice(
        "2026-07-28", modern=True)
    # 2026-era first, whatever the order the server listed them in
    assert choose_supported({"supported": ["2025-06-18", "2026-07-28"]}).version == "2026-07-28"
    # initialize-era only: the newest of them
    assert choose_supported({"supported": ["2024-11-05", "2025-06-18"]}) == VersionChoice(
        "2025-06-18")
    # unknown versions beside a known one are ignored
    assert choose_supported({"supported": ["2099-01-01", "2025-03-26"]}).version == "2025-03-26"


def test_choose_supported_without_a_usable_list_falls_back_and_a_disjoint_one_fails():
    for data in (None, {}, {"supported": []}, {"supported": "2026-07-28"}, [1, 2], "x"):
        assert choose_supported(data) == VersionChoice(None)  # initialize, as for any server
    bad = choose_supported({"supported": ["2027-01-01", 7, None]})
    assert bad.incompatible and bad.version is None


@given(st.lists(st.one_of(st.text(max_size=12), st.integers(), st.none()), max_size=80))
def test_choose_supported_never_raises_and_only_names_what_it_was_given(supported):
    choice = choose_supported({"supported": supported})
    assert choice.version is None or choice.version in supported
    assert not (choice.incompatible and choice.version)


def test_session_discover_failed_sets_the_initialize_offer():
    s = ClientSession(client_version="1")
    s.start_discover()
    choice = s.discover_failed(-32022, {"supported": ["2025-06-18"]})
    assert choice == VersionChoice("2025-06-18") and s.offered_version == "2025-06-18"
    _rid, data = s.start_initialize()
    assert orjson.loads(data)["params"]["protocolVersion"] == "2025-06-18"
    s2 = ClientSession(client_version="1")
    s2.start_discover()
    assert s2.discover_failed(-32022, {"supported": ["2026-07-28"]}).modern
    assert s2.offered_version == mt.LATEST_PROTOCOL_VERSION  # unchanged: discover again
    s3 = ClientSession(client_version="1")
    s3.start_discover()
    with pytest.raises(HandshakeError, match="2027-01-01"):
        s3.discover_failed(-32022, {"supported": ["2027-01-01"]})


def discovered(resources: dict | None) -> ClientSession:
    s = ClientSession(client_version="1")
    s.start_discover()
    caps = {"tools": {}} if resources is None else {"tools": {}, "resources": resources}
    s.finish_discover(msgspec.Raw(orjson.dumps({
        "supportedVersions": ["2026-07-28"], "capabilities": caps, "ttlMs": 0,
        "cacheScope": "private", "resultType": "complete",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}}})))
    return s


def test_discover_capabilities_tell_whether_listen_delivers_updates():
    # the SDK 2.3 serving no subscriptions/listen says so explicitly: believed
    said_no = discovered({"subscribe": False, "listChanged": False})
    # still subscribable for the toolbox: at 2025-11-25 (the client renegotiates)
    assert said_no.listen_delivers is False and said_no.capabilities.resources_subscribe
    said_yes = discovered({"subscribe": True})
    assert said_yes.listen_delivers is True and said_yes.capabilities.resources_subscribe
    # unsaid (agentd's self-MCP and others): listen is core, ask it
    unsaid = discovered({})
    assert unsaid.listen_delivers is None and unsaid.capabilities.resources_subscribe
    assert discovered(None).listen_delivers is None
    unsaid.reset()
    assert unsaid.listen_delivers is None
    assert listen_delivers(msgspec.UNSET) is None
    assert listen_delivers(mt.ResourcesCapability(subscribe=False)) is False


def test_renegotiate_for_updates_only_where_2026_cannot_deliver_and_2025_was_not_refused():
    def r(**kw):
        base = dict(stateless=True, delivers=None, listen_unsupported=False,
                    legacy_refused=False)
        return renegotiate_for_updates(**{**base, **kw})

    assert not r()  # unknown yet: the listen acknowledgement will tell
    assert not r(delivers=True)
    assert r(delivers=False)  # discover said resources.subscribe: false
    assert r(listen_unsupported=True)  # subscriptions/listen answered -32601
    assert not r(delivers=False, legacy_refused=True)  # initialize failed once: degrade
    assert not r(stateless=False, delivers=False)  # already at 2025-11-25


@pytest.mark.parametrize("status,body,had,expect", [
    (404, "", True, True),  # the specification's answer
    (404, "Not Found", False, False),  # no session sent: not about ours
    # server-everything after a restart (POST and GET alike)
    (400, '{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid '
          'session ID provided"},"id":3}', True, True),
    (400, "Invalid or missing session ID", True, True),  # the conformance suite's servers
    (400, "Session not found", True, True),
    (400, "Bad Request: Missing session ID", False, False),  # never had one
    (400, '{"error":{"code":-32602,"message":"invalid params"}}', True, False),  # no session
    (400, "Bad Request", True, False),  # a plain client error stays one
    (401, "session expired", True, False),  # credentials, not the session
    (500, "unknown session", True, False),
])
def test_unknown_session(status, body, had, expect):
    assert unknown_session(status, body, had_session=had) is expect


def test_a_mid_run_32022_is_resent_after_negotiating_again():
    from agentd.errors import RPCError
    from agentd.mcp.client.rules.faults import classify

    d = classify(RPCError(-32022, "Unsupported protocol version",
                          {"supported": ["2025-11-25"]}, side="remote"), idempotent=False)
    assert d.retryable and d.resend and d.reconnect  # refused before it ran, even tools/call


def test_an_incompatible_supported_list_is_named_within_bounds():
    """-32022 naming only versions agentd does not speak: a HandshakeError
    naming at most 8 of them, each cut, however long the peer made them."""
    s = ClientSession(client_version="1")
    s.start_discover()
    with pytest.raises(HandshakeError) as e:
        s.discover_failed(-32022, {"supported": ["x" * 100_000] * 50})
    assert len(str(e.value)) < 8 * 42 + 200
