"""``--pool-dns``: pool members discovered as the addresses a name resolves to.

The multi-address rule (addresses in, peers out, given what the probes said)
is sans-IO and tested here with an injected clock and resolver answers, with
the membership it feeds.  The IO is tested with real processes and the
system resolver: this machine has no name resolving to several loopback
addresses (``localhost`` answers 127.0.0.1 only, and a test may not edit
/etc/hosts), so each worker's ``--pool-dns localhost:PORT`` names another
worker's port on 127.0.0.1 -- the real getaddrinfo path, one address each.
The multi-address shape over real sockets: three workers share one port on
127.0.0.2-4 (all of 127/8 is loopback on Linux) and the refresher, given
the resolver seam's answer of those three addresses, identifies each by its
signed probe answer.
"""

from __future__ import annotations

import json
import signal

import peers
import pytest
from agentd_proc import Agentd
from pool_harness import POOL_KEY, Pool, client, playback_book

from agentd.cli.flags import config_from_flags
from agentd.config.model import PoolDns
from agentd.errors import ConfigError, PoolError
from agentd.pool import handles
from agentd.pool.discovery import MAX_ADDRESSES, Discovery, address_url
from agentd.pool.link.dns import DnsRefresher, SystemResolver
from agentd.pool.link.relay import Relay
from agentd.pool.membership import Membership

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(300)]

ADDRS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


def _urls(addrs, port=7000):
    return [f"http://{a}:{port}" for a in addrs]


def test_new_addresses_are_probed_and_this_worker_is_skipped() -> None:
    d = Discovery("w2", "http", 7000)
    assert d.resolved(ADDRS) == _urls(ADDRS)
    for url, wid in zip(_urls(ADDRS), ("w1", "w2", "w3"), strict=True):
        d.identified(url, wid)
    assert d.peers() == {"w1": "http://127.0.0.2:7000", "w3": "http://127.0.0.4:7000"}
    assert d.resolved(ADDRS) == []  # every address known: nothing to probe
    assert d.resolved([*ADDRS, "127.0.0.5"]) == ["http://127.0.0.5:7000"]


def test_an_address_that_leaves_dns_keeps_its_peer_until_membership_calls_it_dead() -> None:
    d = Discovery("w2", "http", 7000)
    m = Membership("w2")
    d.resolved(ADDRS)
    for url, wid in zip(_urls(ADDRS), ("w1", "w2", "w3"), strict=True):
        d.identified(url, wid)
    assert m.set_peers(set(d.peers()), 0.0) == []
    for peer in m.due(0.0):
        m.answered(peer, b"inc-" + peer.encode(), 1, 0.0)
    assert d.resolved(ADDRS[1:]) == []  # w1's pod is gone from the answer
    assert d.peers()["w1"] == "http://127.0.0.2:7000"  # still probed at its last URL
    assert m.set_peers(set(d.peers()), 1.0) == []
    # its probes fail from now on; w3's keep answering
    now, transitions = 0.0, []
    while now < m.bound + m.interval:
        now += m.interval
        for peer in m.due(now):
            if peer == "w1":
                transitions += m.failed(peer, now)
            else:
                m.answered(peer, b"inc-w3", 1, now)
        transitions += m.tick(now)
    dead = [t for t in transitions if t.status == "dead"]
    assert [(t.peer, t.lost) for t in dead] == [("w1", b"inc-w1")]
    assert m.status("w3") == "alive"


def test_a_rescheduled_pod_moves_to_its_new_address() -> None:
    d = Discovery("w2", "http", 7000)
    d.resolved(["127.0.0.2", "127.0.0.3"])
    d.identified("http://127.0.0.2:7000", "w1")
    assert d.resolved(["127.0.0.3", "127.0.0.9"]) == _urls(["127.0.0.3", "127.0.0.9"])
    d.identified("http://127.0.0.9:7000", "w1")  # same pod name, new address
    assert d.peers() == {"w1": "http://127.0.0.9:7000"}
    d.identified("http://127.0.0.8:7000", "w4")  # not in the answer (any more): ignored
    assert "w4" not in d.peers()


def test_the_answer_is_bounded_and_checked() -> None:
    d = Discovery("me", "http", 7000)
    # not an address, a non-loopback address over http: not taken
    assert d.resolved(["not-an-ip", "10.1.2.3", "127.0.0.2"]) == ["http://127.0.0.2:7000"]
    assert d.refused == 1
    many = [f"127.0.{i // 250}.{i % 250 + 1}" for i in range(MAX_ADDRESSES + 10)]
    assert len(d.resolved(many)) == MAX_ADDRESSES
    s = Discovery("me", "https", 8443)
    assert s.resolved(["10.1.2.3", "fd00::5"]) == ["https://10.1.2.3:8443",
                                                    "https://[fd00::5]:8443"]
    assert s.refused == 0
    assert address_url("https", "::1", 1) == "https://[::1]:1"
    with pytest.raises(ValueError):
        Discovery("me", "http", 1, interval=0)


def test_resolution_runs_every_interval_on_the_injected_clock() -> None:
    d = Discovery("me", "http", 7000, interval=5.0)
    assert d.due(0.0) and not d.due(4.9) and d.due(5.0) and not d.due(9.0)


def test_a_probe_answer_is_bound_to_its_nonce() -> None:
    key = handles.PoolKey(POOL_KEY.encode())
    mac = handles.probe_mac(key, "w1", "ab12", 3, "nonce-1")
    assert mac == handles.probe_mac(key, "w1", "ab12", 3, "nonce-1")
    assert mac != handles.probe_mac(key, "w1", "ab12", 3, "nonce-2")  # replayed
    assert mac != handles.probe_mac(key, "w9", "ab12", 3, "nonce-1")  # another id
    assert mac != handles.probe_mac(handles.PoolKey(b"x" * 32), "w1", "ab12", 3, "nonce-1")


async def test_the_system_resolver_answers_localhost() -> None:
    assert "127.0.0.1" in await SystemResolver().resolve("localhost", 80)


def test_pool_dns_flag_and_config_key(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTD_SECRET_POOL_KEY", POOL_KEY)
    path = tmp_path / "pool.toml"
    path.write_text('pool_key = "{{secret:POOL_KEY}}"\npool_dns = "agentd-pool.ns.svc"\n')
    flags = {"config_file": str(path), "instruction": "x", "pool_id": "w1",
             "serve_mcp": "http://127.0.0.1:8443"}
    pool = config_from_flags(flags).pool
    assert pool is not None and pool.dns == PoolDns("agentd-pool.ns.svc", 8443, "http")
    pool = config_from_flags({**flags, "pool_dns": "other:9443"}).pool  # the flag wins
    assert pool is not None and pool.dns == PoolDns("other", 9443, "http")
    for bad in ("x:0", "x:99999", "x:y", "bad name", "-x"):
        with pytest.raises(ConfigError, match="--pool-dns"):
            config_from_flags({**flags, "pool_dns": bad})
    assert pool.dns.interval == 5.0
    path.write_text('pool_key = "{{secret:POOL_KEY}}"\npool_dns = "n"\npool_dns_interval = 0.5\n')
    pool = config_from_flags(flags).pool
    assert pool is not None and pool.dns is not None and pool.dns.interval == 0.5
    for bad in ("0", "301", '"5"'):
        path.write_text(f'pool_key = "{{{{secret:POOL_KEY}}}}"\npool_dns = "n"\n'
                        f'pool_dns_interval = {bad}\n')
        with pytest.raises(ConfigError, match="--pool-dns-interval must be"):
            config_from_flags(flags)
    with pytest.raises(ConfigError, match="--pool-dns-interval must be"):
        config_from_flags({**flags, "pool_dns_interval": 0.0})  # the flag's 0 is refused
    path.write_text('pool_key = "{{secret:POOL_KEY}}"\npool_dns_interval = 5\n')
    with pytest.raises(ConfigError, match="--pool-dns-interval needs --pool-dns"):
        config_from_flags(flags)
    path.write_text('pool_key = "{{secret:POOL_KEY}}"\npool_dns = 5\n')
    with pytest.raises(ConfigError, match="pool_dns must be"):
        config_from_flags(flags)


async def test_workers_found_by_dns_answer_each_others_handles(agentd_bin, tmp_path) -> None:
    """w1 and w2 find each other only through ``--pool-dns localhost:PORT``; w3's
    name resolves to itself and is recognised by its id in the probe answer."""
    pool = Pool(tmp_path)
    p = pool.ports
    dns = {"w1": p["w2"], "w2": p["w1"], "w3": p["w3"]}
    try:
        for wid in ("w1", "w2", "w3"):
            pool.start(agentd_bin, wid, peer_flags=False,
                       extra=("--pool-dns", f"localhost:{dns[wid]}"))
        pool.workers["w2"].wait_event("pool.peer", lambda r: r.get("peer") == "w1"
                                      and r.get("status") == "alive")
        pool.workers["w3"].wait_event("pool.dns_peer", lambda r: r.get("me") is True)
        async with client(pool.url("w1"), "alice") as a1:
            r = await a1.call_tool("subagent.spawn", {"instruction": "[slow] x", "async": True})
            handle = r.structured_content["handle"]
        assert handle.startswith("served.w1.")
        async with client(pool.url("w2"), "alice") as a2:
            r = await a2.call_tool("subagent.status", {"handle": handle})
            assert not r.is_error, r.content[0].text
            assert r.structured_content["status"] == "running"
            share = json.loads((await a2.read_resource("agent://status")).contents[0].text)
            assert share["pool"]["peers"] == {"w1": "alive"}
        async with client(pool.url("w2"), "bob") as b2:  # the ownership rule holds
            r = await b2.call_tool("subagent.status", {"handle": handle})
            assert r.is_error and r.content[0].text == f"unknown handle: {handle}"
        async with client(pool.url("w3"), "alice") as a3:  # itself is no peer
            share = json.loads((await a3.read_resource("agent://status")).contents[0].text)
            assert share["pool"]["peers"] == {}
        w1 = pool.workers["w1"]
        w1.proc.send_signal(signal.SIGKILL)
        w1.proc.wait()
        pool.workers["w2"].wait_event("pool.peer", lambda r: r.get("peer") == "w1"
                                      and r.get("status") == "dead")
        async with client(pool.url("w2"), "alice") as a2:
            r = await a2.call_tool("subagent.status", {"handle": handle})
            assert not r.is_error and r.structured_content == {
                "handle": handle, "status": "failed", "done": True, "partial": False,
                "result": "worker lost: pool member w1 that ran this subagent is gone"}
    finally:
        pool.stop()


class FixedResolver:
    """The Resolver seam answering one fixed address list: the three workers share a
    port on 127.0.0.2-4, the shape a headless Service's answer has, which no name
    on this machine resolves to."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses

    async def resolve(self, name: str, port: int) -> list[str]:
        assert name == "agentd-pool.test"
        return list(self.addresses)


async def test_three_workers_on_one_port_are_identified_by_their_signed_probes(
        agentd_bin, tmp_path) -> None:
    port = peers.free_port()
    env = {"AGENTD_POOL_KEY": POOL_KEY}
    workers = {}
    try:
        for n, wid in ((2, "w1"), (3, "w2"), (4, "w3")):
            workers[wid] = Agentd(
                [agentd_bin, "--instruction", "Be a pool worker", "--intelligence",
                 f"playback:{playback_book(tmp_path)}", "--mode", "reactive", "--subscribe",
                 "file:///nowhere", "--serve-mcp", f"http://127.0.0.{n}:{port}",
                 "--pool-id", wid, "--pool-dns", f"localhost:{port}"], tmp_path, wid, env=env)
        for w in workers.values():
            w.wait_event("mcp.serve.listening")
        resolver = FixedResolver(ADDRS)
        relay = Relay(handles.PoolKey(POOL_KEY.encode()), "w2", {})
        found = Discovery("w2", "http", port)  # as w2 sees the pool: itself is skipped
        dns = DnsRefresher(relay, found, "agentd-pool.test", resolver=resolver)
        try:
            await dns.refresh()
            assert found.peers() == {"w1": f"http://127.0.0.2:{port}",
                                     "w3": f"http://127.0.0.4:{port}"}
            assert found.ids[f"http://127.0.0.3:{port}"] == "w2"
            workers["w3"].proc.send_signal(signal.SIGKILL)
            workers["w3"].proc.wait()
            resolver.addresses = ADDRS[:2]  # its pod left the answer: the peer stays
            await dns.refresh()
            assert found.peers()["w3"] == f"http://127.0.0.4:{port}"
            with pytest.raises(PoolError, match="unreachable"):  # and its probes fail
                await relay.probe_url(found.peers()["w3"], 1.0)
            # a prober without the pool key learns nothing: the answer is refused
            other = Relay(handles.PoolKey(b"another-pool-key-0123456789"), "w9", {})
            stranger = Discovery("w9", "http", port)
            await DnsRefresher(other, stranger, "agentd-pool.test",
                               resolver=FixedResolver(ADDRS[:1])).refresh()
            assert stranger.peers() == {}
            await other.close()
        finally:
            await relay.close()
    finally:
        for w in workers.values():
            if w.proc.poll() is None:
                w.stop()
