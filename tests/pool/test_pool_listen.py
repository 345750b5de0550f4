"""A 2026-07-28 listen naming handles on several pool workers is fanned in.

Three real workers (the fixtures of tests/pool/test_pool.py); the official MCP
Python SDK's 2026-07-28 client listens on one worker for runs owned by all
three.  The acknowledgement follows every owner's answer to its relayed
``subscribe``: when the client holds the ack, each peer owner has already
logged the relayed operation, and the listening worker logged the fan-in
before the listen opened (one process's log is in the order of its events).
An owner that does not answer (SIGSTOPped) does not hang the listen: after
``--pool-subscribe-timeout`` its handles are held by the lost-owner rule and
their ``updated`` still comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

import pytest
from pool_harness import POOL_KEY, TOKENS, Pool, client, httpx2, pool_of_three

from agentd.cli.flags import config_from_flags
from agentd.errors import ConfigError

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(300)]

from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.client.subscriptions import ResourceUpdated  # noqa: E402


async def _spawn(pool: Pool, wid: str) -> str:
    async with client(pool.url(wid), "alice") as s:
        r = await s.call_tool("subagent.spawn", {"instruction": "[slow] x", "async": True})
        return r.structured_content["handle"]


async def _cancel(pool: Pool, wid: str, handle: str) -> None:
    async with client(pool.url(wid), "alice") as s:
        r = await s.call_tool("subagent.cancel", {"handle": handle})
        assert r.structured_content["status"] == "cancelled"


@contextlib.asynccontextmanager
async def _modern(url: str):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS['alice']}"},
                                  timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http), mode="auto",
                   cache=None) as c:
        yield c


def _order(worker, first: str, then: str) -> tuple[int, int]:
    names = [r.get("event") for r in worker.events()]
    return names.index(first), names.index(then)


async def _updates(sub, n: int) -> set[str]:
    got: set[str] = set()
    async with asyncio.timeout(60):
        while len(got) < n:
            event = await anext(aiter(sub))
            assert isinstance(event, ResourceUpdated)
            got.add(event.uri)
    return got


async def test_a_listen_on_three_owners_is_acked_after_every_owner_answered(
        agentd_bin, tmp_path) -> None:
    async with pool_of_three(agentd_bin, tmp_path) as pool:
        owned = {wid: await _spawn(pool, wid) for wid in ("w1", "w2", "w3")}
        uris = {wid: f"agent://subagent/{h}" for wid, h in owned.items()}
        async with _modern(pool.url("w1")) as c, \
                c.listen(resource_subscriptions=list(uris.values())) as sub:
            # the ack is here: every peer owner has answered its relayed subscribe
            for wid in ("w2", "w3"):
                assert [r for r in pool.workers[wid].events("pool.relayed")
                        if r.get("op") == "subscribe" and r.get("kind") == "body"]
            assert sorted(sub.honored.resource_subscriptions) == sorted(uris.values())
            w1 = pool.workers["w1"]
            fan = w1.events("pool.subscribe_fanned_in")
            assert [(r["owners"], r["handles"], r["unanswered"]) for r in fan] == [(2, 2, 0)]
            fanned, opened = _order(w1, "pool.subscribe_fanned_in", "mcp.serve.listen")
            assert fanned < opened
            for wid, handle in owned.items():  # each owner ends its run
                await _cancel(pool, wid, handle)
            assert await _updates(sub, 3) == set(uris.values())


async def test_an_owner_that_does_not_answer_does_not_hang_the_listen(
        agentd_bin, tmp_path) -> None:
    pool = Pool(tmp_path)
    stopped = None
    try:
        pool.start(agentd_bin, "w1", extra=("--pool-subscribe-timeout", "4"))
        pool.start(agentd_bin, "w2")
        pool.start(agentd_bin, "w3")
        h2, h3 = await _spawn(pool, "w2"), await _spawn(pool, "w3")
        u2, u3 = f"agent://subagent/{h2}", f"agent://subagent/{h3}"
        stopped = pool.workers["w3"].proc
        stopped.send_signal(signal.SIGSTOP)
        async with _modern(pool.url("w1")) as c, \
                c.listen(resource_subscriptions=[u2, u3]) as sub:
            # acknowledged without w3's answer: its handle is held (the run may be alive)
            assert sorted(sub.honored.resource_subscriptions) == sorted([u2, u3])
            w1 = pool.workers["w1"]
            silent = w1.events("pool.subscribe_unanswered")
            assert [(r["peer"], r["handles"]) for r in silent] == [("w3", 1)]
            unanswered, opened = _order(w1, "pool.subscribe_unanswered", "mcp.serve.listen")
            assert unanswered < opened
            stopped.send_signal(signal.SIGCONT)
            stopped = None
            await _cancel(pool, "w2", h2)
            await _cancel(pool, "w3", h3)  # or w3 was called dead meanwhile: lost, updated too
            assert await _updates(sub, 2) == {u2, u3}
    finally:
        if stopped is not None:
            stopped.send_signal(signal.SIGCONT)
        pool.stop()


@pytest.mark.parametrize(("key", "default", "most"), [
    ("subscribe_timeout", 5.0, 60.0),
    ("dead_after", 9.0, 12.0),  # with the 2 s probes and their 1 s timeout: the 15 s bound
])
def test_pool_timing_flags_and_config_keys(tmp_path, monkeypatch, key, default, most) -> None:
    monkeypatch.setenv("AGENTD_SECRET_POOL_KEY", POOL_KEY)
    name, flag = f"pool_{key}", "--pool-" + key.replace("_", "-")
    path = tmp_path / "pool.toml"
    path.write_text('pool_key = "{{secret:POOL_KEY}}"\n')
    flags = {"config_file": str(path), "instruction": "x", "pool_id": "w1",
             "serve_mcp": "http://127.0.0.1:8443"}
    pool = config_from_flags(flags).pool
    assert pool is not None and getattr(pool, key) == default
    path.write_text(f'pool_key = "{{{{secret:POOL_KEY}}}}"\n{name} = 0.25\n')
    pool = config_from_flags(flags).pool
    assert pool is not None and getattr(pool, key) == 0.25
    pool = config_from_flags({**flags, name: most}).pool  # the flag wins
    assert pool is not None and getattr(pool, key) == most
    for bad in (0.0, -1.0, most + 0.5):
        with pytest.raises(ConfigError, match=f"{flag} must be"):
            config_from_flags({**flags, name: bad})
    path.write_text(f'pool_key = "{{{{secret:POOL_KEY}}}}"\n{name} = "5"\n')
    with pytest.raises(ConfigError, match=f"{flag} must be"):
        config_from_flags(flags)
