"""The pool's sans-IO rules: MAC'd handles and session ids, the relay MAC, membership."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.errors import PoolError
from agentd.pool import handles as h
from agentd.pool.membership import LOST_BOUND_CAP, Membership, Transition

KEY = h.PoolKey(b"k" * 32)
OTHER = h.PoolKey(b"o" * 32)
INC = b"\x01" * h.INCARNATION_BYTES


def _mint(owner: str = "w1", principal: str = "alice", key: h.PoolKey = KEY) -> str:
    return h.mint_handle(key, owner, INC, os.urandom(10), principal)


def test_handle_names_its_owner_and_principal() -> None:
    handle = _mint("worker-2")
    assert handle.startswith("served.worker-2.")
    ref = h.parse_handle(KEY, handle, "alice")
    assert ref is not None and ref.owner == "worker-2" and ref.incarnation == INC
    assert ref.top == handle
    # a child handle in the run's subtree names the same owner and top
    child = h.parse_handle(KEY, handle + ".3.1", "alice")
    assert child is not None and child.top == handle


def test_other_principal_other_key_and_malformed_are_unknown() -> None:
    handle = _mint()
    assert h.parse_handle(KEY, handle, "bob") is None
    assert h.parse_handle(OTHER, handle, "alice") is None
    for bad in ("served.1", "served.w1", "served.w1.", handle + ".x", "x" + handle,
                handle.replace("served.", "served.W", 1), "served..", "", "." * 600):
        assert h.parse_handle(KEY, bad, "alice") is None, bad


def test_moving_a_handle_to_another_owner_fails() -> None:
    handle = _mint("w1")
    assert h.parse_handle(KEY, handle.replace(".w1.", ".w2.", 1), "alice") is None


@given(st.integers(min_value=0, max_value=39), st.sampled_from("abcdefghijklmnopqrstuvwxyz234567"))
def test_every_altered_token_character_is_unknown(pos: int, char: str) -> None:
    handle = _mint()
    token = handle.split(".")[2]
    if token[pos] == char:
        return
    altered = f"served.w1.{token[:pos]}{char}{token[pos + 1:]}"
    assert h.parse_handle(KEY, altered, "alice") is None


@given(st.text(max_size=80))
def test_arbitrary_text_is_never_a_handle(text: str) -> None:
    assert h.parse_handle(KEY, text, "alice") is None
    assert h.verify_session(KEY, text) is None


def test_session_ids_name_their_owner_and_are_visible_ascii() -> None:
    local = "AbC-_09" * 6
    sid = h.mint_session(KEY, "w3", local)
    assert all(0x21 <= ord(c) <= 0x7E for c in sid)
    assert h.verify_session(KEY, sid) == ("w3", local)
    assert h.verify_session(OTHER, sid) is None
    assert h.verify_session(KEY, sid.replace("w3.", "w4.", 1)) is None
    assert h.verify_session(KEY, sid[:-1] + ("x" if sid[-1] != "x" else "y")) is None
    assert h.verify_session(KEY, local) is None  # a plain server id is not a pool id
    # a handle's token is not a session's: the MAC domains differ
    handle = h.mint_handle(KEY, "w3", INC, os.urandom(10), "")
    assert h.verify_session(KEY, handle.removeprefix("served.")) is None


def test_short_pool_key_refused_and_never_shown() -> None:
    with pytest.raises(ValueError):
        h.PoolKey(b"short")
    assert "k" not in repr(KEY).lower().replace("poolkey", "")


def _signed(now: float, nonce: str = "n0nce-0001", principal: str = "alice",
            body: bytes = b"{}", receiver: str = "w1") -> dict[str, str]:
    return h.sign_request(KEY, "w2", now, nonce, "POST", "/pool/relay", body, principal,
                          receiver=receiver)


def _verify(v: h.RelayVerifier, hdr: dict[str, str], now: float, principal: str = "alice",
            body: bytes = b"{}", **kw: bool) -> str:
    signed = v.verify(hdr[h.RELAY_HEADER], principal, now, "POST", "/pool/relay", **kw)
    v.check_body(signed, body)
    return signed.sender


def test_relay_mac_accepts_once_and_refuses_replay_staleness_and_tampering() -> None:
    v = h.RelayVerifier(KEY, "w1", started=900.0)
    hdr = _signed(1000.0)
    assert _verify(v, hdr, 1001.0) == "w2"
    with pytest.raises(PoolError, match="replayed"):
        _verify(v, hdr, 1002.0)
    fresh = _signed(1000.0, nonce="n0nce-0002")
    with pytest.raises(PoolError, match="bad MAC"):  # the principal is bound
        _verify(v, fresh, 1001.0, principal="bob")
    with pytest.raises(PoolError, match="signed digest"):  # the body is bound
        _verify(v, fresh, 1001.0, body=b"{ }")
    with pytest.raises(PoolError, match="stale"):
        _verify(v, _signed(1000.0, nonce="n0nce-0003"), 1000.0 + h.RELAY_SKEW + 1)
    for bad in (None, "", "v2 a,b,c,d", "v2 a,b", "v2 w2,w1,notanumber,n0nce-0003,00,00",
                "v2 w2,w1,1000000,n0nce-0003,nothex,00"):
        with pytest.raises(PoolError):
            v.verify(bad, "alice", 1000.0, "POST", "/pool/relay")
    old = hdr[h.RELAY_HEADER].replace("v2 ", "v1 ", 1)  # an older agentd's head: said so
    with pytest.raises(PoolError, match="v1 authentication"):
        v.verify(old, "alice", 1001.0, "POST", "/pool/relay")
    wrong_key = h.RelayVerifier(OTHER, "w1", started=900.0)
    with pytest.raises(PoolError, match="bad MAC"):
        _verify(wrong_key, _signed(1000.0, nonce="n0nce-0004"), 1001.0)


def test_relay_mac_names_its_receiver_and_outlives_a_restart() -> None:
    """A captured request is refused by any other worker, by its sender, and by its
    receiver once that restarted (an empty nonce memory is not the only check)."""
    hdr = _signed(1000.0, nonce="captured-01")
    for other in ("w3", "w2"):  # another worker; the sender itself
        with pytest.raises(PoolError, match="addressed to another worker"):
            _verify(h.RelayVerifier(KEY, other, started=900.0), hdr, 1001.0)
    receiver = h.RelayVerifier(KEY, "w1", started=900.0)
    assert _verify(receiver, hdr, 1001.0) == "w2"
    restarted = h.RelayVerifier(KEY, "w1", started=1000.5)  # same id, new process
    with pytest.raises(PoolError, match="before this worker started"):
        _verify(restarted, hdr, 1001.0)
    assert _verify(restarted, _signed(1000.6, nonce="after-start"), 1001.0) == "w2"
    # a probe may name no receiver (--pool-dns learns the id from the answer); a relay may not
    unnamed = _signed(1000.7, nonce="unnamed-01", receiver="")
    with pytest.raises(PoolError, match="addressed to another worker"):
        _verify(restarted, unnamed, 1001.0)
    assert _verify(restarted, unnamed, 1001.0, unnamed=True) == "w2"


def test_relay_nonce_memory_is_bounded_and_forgets_outside_the_window() -> None:
    v = h.RelayVerifier(KEY, "w1", started=0.0, max_nonces=2)
    for i in range(2):
        _verify(v, _signed(1000.0, nonce=f"nonce-{i:04d}"), 1000.0)
    with pytest.raises(PoolError, match="memory full"):
        _verify(v, _signed(1000.0, nonce="nonce-0009"), 1000.0)
    later = _signed(1000.0 + h.RELAY_SKEW + 1, nonce="nonce-0010")
    assert _verify(v, later, 1000.0 + h.RELAY_SKEW + 1) == "w2"


def test_membership_alive_suspect_dead_within_the_bound() -> None:
    m = Membership("w1")
    assert m.bound <= LOST_BOUND_CAP
    assert m.set_peers({"w1", "w2", "w3"}, 0.0) == []
    assert m.status("w1") == "alive" and m.status("w2") == "suspect"
    assert m.due(0.0) == ["w2", "w3"]
    assert m.due(0.0) == []  # in flight
    assert m.answered("w2", b"i2", 3, 0.1) == [Transition("w2", "alive")]
    assert m.answered("w3", b"i3", 0, 0.1) == [Transition("w3", "alive")]
    assert m.place() == "w2"  # w3 has no room
    # w2 dies: its probes fail from now on
    t = 0.1
    seen: list[Transition] = []
    while t < 0.1 + m.bound:
        t += m.interval
        for p in m.due(t):
            seen += m.failed(p, t) if p == "w2" else m.answered(p, b"i3", 0, t)
        seen += m.tick(t)
        if m.status("w2") == "dead":
            break
    assert seen[0] == Transition("w2", "suspect")
    assert seen[-1] == Transition("w2", "dead", b"i2")
    assert t - 0.1 <= m.bound
    assert m.place() is None
    assert m.status("w3") == "alive"


def test_membership_hung_probe_ages_and_restart_loses_runs() -> None:
    m = Membership("w1")
    m.set_peers({"w2"}, 0.0)
    m.due(0.0)
    m.answered("w2", b"old", 1, 0.0)
    m.due(m.interval)  # this probe never answers
    assert m.tick(m.interval + m.timeout) == [Transition("w2", "suspect")]
    assert m.tick(m.dead_after) == [Transition("w2", "dead", b"old")]
    assert m.tick(m.dead_after + 1) == []  # once
    # it comes back as a new process: alive, and the old incarnation is reported lost
    assert m.answered("w2", b"new", 1, 20.0) == [Transition("w2", "alive", b"old")]
    # a restart that was never seen as dead is reported too
    assert m.answered("w2", b"newer", 1, 21.0) == [Transition("w2", "alive", b"new")]


def test_membership_peer_leaving_the_list_is_dead() -> None:
    m = Membership("w1")
    m.set_peers({"w2", "w3"}, 0.0)
    m.due(0.0)
    m.answered("w2", b"i2", 1, 0.0)
    assert m.set_peers({"w3"}, 1.0) == [Transition("w2", "dead", b"i2")]
    assert m.status("w2") is None


def test_membership_refuses_timing_beyond_the_bound() -> None:
    with pytest.raises(ValueError):
        Membership("w1", dead_after=14.0)
    with pytest.raises(ValueError):
        Membership("w1", interval=0)


def _dies(m: Membership, peer: str) -> list[Transition]:
    """``peer``'s probes fail from now on, until the membership calls it dead."""
    seen: list[Transition] = []
    t = m.started
    while m.status(peer) != "dead":
        t += m.interval
        for p in m.due(t):
            seen += m.failed(p, t)
        seen += m.tick(t)
    return seen


def test_a_durable_peer_that_dies_keeps_its_runs_until_another_incarnation_answers() -> None:
    m = Membership("w1")
    m.set_peers({"w2"}, 0.0)
    m.due(0.0)
    m.answered("w2", b"jrnl1", 2, 0.0, durable=True)
    assert m.peers["w2"].holds(b"jrnl1") and not m.peers["w2"].holds(b"other")
    seen = _dies(m, "w2")
    assert seen[-1] == Transition("w2", "dead")  # down is not lost: its runs are journaled
    assert m.peers["w2"].holds(b"jrnl1") and m.place() is None
    # restarted on the same journal: alive, nothing reported lost
    t = m.started + m.bound + 10 * m.interval
    m.due(t)
    assert m.answered("w2", b"jrnl1", 2, t, durable=True) == [Transition("w2", "alive")]
    assert m.peers["w2"].holds(b"jrnl1")
    # its journal is gone (a node loss): another incarnation answers, the runs are lost
    m.due(t + m.interval)
    assert m.answered("w2", b"jrnl2", 2, t + m.interval, durable=True) \
        == [Transition("w2", "alive", b"jrnl1")]
    assert not m.peers["w2"].holds(b"jrnl1") and m.peers["w2"].holds(b"jrnl2")


def test_a_peer_without_a_journal_that_dies_loses_its_runs_as_before() -> None:
    m = Membership("w1")
    m.set_peers({"w2"}, 0.0)
    m.due(0.0)
    m.answered("w2", b"rand1", 2, 0.0)
    assert _dies(m, "w2")[-1] == Transition("w2", "dead", b"rand1")
    assert not m.peers["w2"].holds(b"rand1")
    # a peer that answered durable once but non-durable last is held to the old rule
    m.due(100.0)
    m.answered("w2", b"rand2", 2, 100.0, durable=True)
    m.due(101.0)
    m.answered("w2", b"rand2", 2, 101.0)
    assert _dies(m, "w2")[-1] == Transition("w2", "dead", b"rand2")


def test_the_probe_mac_binds_durable_and_keeps_the_non_durable_mac() -> None:
    plain = h.probe_mac(KEY, "w2", "ab12", 3, "nonce-1")
    durable = h.probe_mac(KEY, "w2", "ab12", 3, "nonce-1", durable=True)
    assert plain != durable  # an answer cannot be altered to look durable, or not
    assert plain == h.probe_mac(KEY, "w2", "ab12", 3, "nonce-1", durable=False)
    # the non-durable MAC is the one an agentd without journals computes
    assert plain == KEY.mac(b"probe", b"w2", b"ab12", b"3", b"nonce-1").hex()


def test_an_incarnation_says_whether_its_worker_journals_its_runs() -> None:
    for seed in (b"\x00" * 5, b"\xff" * 5, os.urandom(5), b"jrnl1"):
        durable, plain = h.incarnation(seed, durable=True), h.incarnation(seed, durable=False)
        assert len(durable) == len(plain) == h.INCARNATION_BYTES
        assert durable[1:] == plain[1:] == seed[1:]  # only the first bit differs
        assert durable[0] | 0x80 == durable[0] and plain[0] & 0x80 == 0
        assert durable[0] & 0x7F == plain[0] == seed[0] & 0x7F
        for inc, want in ((durable, True), (plain, False)):
            handle = h.mint_handle(KEY, "w1", inc, os.urandom(10), "alice")
            ref = h.parse_handle(KEY, handle, "alice")
            assert ref is not None and ref.incarnation == inc and ref.durable is want


def test_a_dead_peer_never_heard_holds_only_durable_handles() -> None:
    """A peer dead before it ever answered: only a handle whose incarnation says
    its owner journals its runs is still held (agentd.pool.handles.incarnation)."""
    m = Membership("w1")
    m.set_peers({"w2"}, 0.0)
    assert _dies(m, "w2")[-1] == Transition("w2", "dead")
    assert m.peers["w2"].holds(b"jrnl1", durable=True)
    assert not m.peers["w2"].holds(b"jrnl1")
    # once it answers, an incarnation other than the handle's is a loss either way
    m.due(100.0)
    m.answered("w2", b"jrnl2", 2, 100.0, durable=True)
    assert not m.peers["w2"].holds(b"jrnl1", durable=True)


def test_a_token_carries_its_incarnation() -> None:
    handle = _mint("w1")
    assert h.token_incarnation(handle.split(".")[2]) == INC
    for bad in ("", "1" * 40, handle.split(".")[2][:-1], "served"):
        with pytest.raises(ValueError):
            h.token_incarnation(bad)
