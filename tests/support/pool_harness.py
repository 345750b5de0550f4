"""The pool harness: three real console-script workers on loopback (plain http,
or https with mTLS), their bearers and pool key, and an official-SDK client
session to any of them, and HAProxy in front of them as a balancer. Shared by
the pool tests (tests/pool/) and benchmarks/bench_pool.py.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import ssl
import subprocess
import urllib.request

import peers
from agentd_proc import Agentd

mcp = peers.import_peer("mcp", reason="the official MCP Python SDK (pip install mcp)")
httpx2 = peers.import_peer("httpx2")
from mcp import Client, ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

TOKENS = {"alice": "tok-alice-5b02c7", "bob": "tok-bob-91e4d0"}
POOL_KEY = "pool-key-for-tests-3f9a1c77e2"
IDS = ("w1", "w2", "w3")


def playback_book(tmp):
    path = tmp / "pool.playback.json"
    path.write_text(json.dumps({"playback": 1, "scripts": [
        {"name": "slow", "match": "[slow]", "turns": [{"delay": 120, "content": "late"}]},
        {"name": "quick", "match": "[quick]", "turns": [{"content": "done"}]},
        {"name": "session", "match": "[session]",
         "turns": [{"content": "first answer"}, {"content": "second answer"}]},
        {"name": "worker", "match": "pool worker", "turns": [{"content": "idle"}]},
    ]}))
    return path


class Pool:
    def __init__(self, tmp, *, bearers: bool = True, book=None, intelligence: str | None = None,
                 journals: bool = False) -> None:
        """``book``: the workers' playback file (default: the scripts above);
        ``intelligence``: their --intelligence instead (a test's gateway);
        ``journals``: each worker gets ``--journal`` on a directory of its own
        (`journal(wid)`), the same one again when it is restarted."""
        self.tmp = tmp
        self.bearers = bearers
        self.book = book
        self.intelligence = intelligence
        self.journals = journals
        self.ports = {i: peers.free_port() for i in IDS}
        self.workers: dict[str, Agentd] = {}
        self.retired: list[Agentd] = []  # the processes `restart` ended
        self.starts = dict.fromkeys(IDS, 0)  # each worker's processes so far
        cfg = tmp / "worker.toml"
        cfg.write_text('[serve_bearers]\nalice = "{{secret:ALICE_TOKEN}}"\n'
                       'bob = "{{secret:BOB_TOKEN}}"\n')
        self.cfg = cfg

    def url(self, wid: str) -> str:
        return f"http://127.0.0.1:{self.ports[wid]}/mcp"

    def journal(self, wid: str):
        return self.tmp / f"journal-{wid}"

    def start(self, agentd_bin: str, wid: str, run: int = 0, extra: tuple[str, ...] = (),
              *, peer_flags: bool = True, key: str = POOL_KEY) -> Agentd:
        """``peer_flags``: list every member with --pool-peer (off: --pool-dns in ``extra``);
        ``key``: its pool key."""
        flags = [f for p in IDS for f in ("--pool-peer",
                                          f"{p}=http://127.0.0.1:{self.ports[p]}")
                 ] if peer_flags else []
        env = {"AGENTD_SECRET_ALICE_TOKEN": TOKENS["alice"],
               "AGENTD_SECRET_BOB_TOKEN": TOKENS["bob"], "AGENTD_POOL_KEY": key}
        intelligence = self.intelligence or f"playback:{self.book or playback_book(self.tmp)}"
        journal = ("--journal", str(self.journal(wid))) if self.journals else ()
        worker = Agentd([agentd_bin, "--instruction", "Be a pool worker",
                         "--intelligence", intelligence, "--mode", "reactive",
                         "--subscribe", "file:///nowhere",
                         "--serve-mcp", f"http://127.0.0.1:{self.ports[wid]}",
                         *(("--config", str(self.cfg)) if self.bearers else ()),
                         "--pool-id", wid, *flags, *journal, *extra],
                        self.tmp, f"{wid}-{run}", env=env)
        self.workers[wid] = worker
        self.starts[wid] = max(self.starts[wid], run + 1)
        worker.wait_event("mcp.serve.listening")
        return worker

    def restart(self, agentd_bin: str, wid: str, extra: tuple[str, ...] = (), *,
                key: str = POOL_KEY) -> Agentd:
        """A rollout's step for one worker: SIGTERM, its exit awaited (130: drained),
        then the worker again with the same pool id, port and journal, until ready."""
        old = self.workers[wid]
        assert old.stop() == 130, old.stderr()[-3000:]
        self.retired.append(old)
        worker = self.start(agentd_bin, wid, self.starts[wid], extra, key=key)
        self.ready(wid)
        return worker

    def formed(self) -> None:
        """Until every worker has heard each of its peers answer a probe.  A worker's
        first probes go out before the workers started after it listen, and the next
        come a probe interval later; until then it knows no peer alive and places no
        spawn on one.  A rollout starts from a pool that has formed."""
        for wid, worker in self.workers.items():
            for peer in self.workers:
                if peer != wid:
                    worker.wait_event("pool.peer", lambda r, peer=peer: r.get("peer") == peer
                                      and r.get("status") == "alive")

    def ready(self, wid: str) -> None:
        """Until the worker's /readyz answers 200 (the balancer's check then passes)."""
        def answered() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[wid]}/readyz",
                                            timeout=5) as resp:
                    return resp.status == 200
            except OSError:
                return False
        self.workers[wid].wait_until(answered)

    def stop(self) -> None:
        stop_workers([*self.retired, *self.workers.values()])


def stop_workers(workers) -> None:
    """Stop every worker, then check no log of theirs holds the pool key or a bearer."""
    for w in workers:
        if w.proc.poll() is None:
            w.stop()
    for w in workers:
        text = w.err.read_text()
        assert POOL_KEY not in text and all(t not in text for t in TOKENS.values())


@contextlib.asynccontextmanager
async def client(url: str, who: str):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS[who]}"},
                                  timeout=60) as http, \
            streamable_http_client(url, http_client=http) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def pool_of_three(agentd_bin, tmp, extra: tuple[str, ...] = ()):
    pool = Pool(tmp)
    try:
        for wid in IDS:
            pool.start(agentd_bin, wid, extra=extra)
        yield pool
    finally:
        pool.stop()


class TlsPool:
    """Three https workers with mTLS; each worker's certificate is also its
    client identity towards its peers."""

    def __init__(self, tmp) -> None:
        self.tmp = tmp
        self.ports = {i: peers.free_port() for i in IDS}
        self.ca = peers.import_peer("trustme").CA()
        self.ca_file = tmp / "pool-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.workers: dict[str, Agentd] = {}
        self.cfg = tmp / "worker.toml"
        self.cfg.write_text('[serve_bearers]\nalice = "{{secret:ALICE_TOKEN}}"\n'
                            'bob = "{{secret:BOB_TOKEN}}"\n')
        self.caller = self.issue("caller.pool.test", "caller")

    def issue(self, name: str, stem: str, ca=None) -> tuple[str, str]:
        cert = (ca or self.ca).issue_cert("127.0.0.1", name)
        pem, key = self.tmp / f"{stem}.pem", self.tmp / f"{stem}.key"
        cert.cert_chain_pems[0].write_to_path(str(pem))
        cert.private_key_pem.write_to_path(str(key))
        return str(pem), str(key)

    def url(self, wid: str) -> str:
        return f"https://127.0.0.1:{self.ports[wid]}/mcp"

    def context(self, cert: tuple[str, str] | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if cert is not None:
            ctx.load_cert_chain(*cert)
        return ctx

    def start(self, agentd_bin: str, wid: str) -> Agentd:
        cert, key = self.issue(f"{wid}.pool.test", wid)
        peer_flags = [f for p in IDS for f in ("--pool-peer",
                                               f"{p}=https://127.0.0.1:{self.ports[p]}")]
        env = {"AGENTD_SECRET_ALICE_TOKEN": TOKENS["alice"],
               "AGENTD_SECRET_BOB_TOKEN": TOKENS["bob"], "AGENTD_POOL_KEY": POOL_KEY}
        worker = Agentd([agentd_bin, "--instruction", "Be a pool worker",
                         "--intelligence", f"playback:{playback_book(self.tmp)}", "--mode", "reactive",
                         "--subscribe", "file:///nowhere",
                         "--serve-mcp", f"https://127.0.0.1:{self.ports[wid]}",
                         "--serve-cert", cert, "--serve-key", key,
                         "--serve-client-ca", str(self.ca_file), "--config", str(self.cfg),
                         "--pool-id", wid, *peer_flags], self.tmp, wid, env=env)
        self.workers[wid] = worker
        worker.wait_event("mcp.serve.listening")
        return worker

    def stop(self) -> None:
        stop_workers(self.workers.values())


@contextlib.asynccontextmanager
async def tls_client(pool: TlsPool, wid: str, who: str):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS[who]}"},
                                  verify=pool.context(pool.caller), timeout=60) as http, \
            streamable_http_client(pool.url(wid), http_client=http) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


def rpc_result(resp) -> dict:
    """The JSON-RPC result of a POST answer, JSON or one SSE event."""
    text = resp.text
    if resp.headers["content-type"].startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)["result"]


def haproxy_bin() -> str:
    found = shutil.which("haproxy") or (shutil.which("haproxy", path="/usr/sbin:/sbin"))
    if found is None and shutil.which("apt-get"):
        for cmd in (["apt-get", "install", "-y", "haproxy"], ["apt-get", "update"],
                    ["apt-get", "install", "-y", "haproxy"]):
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False, timeout=600)
            found = shutil.which("haproxy", path="/usr/sbin:/sbin:/usr/bin")
            if found:
                break
    if found is None:
        peers.unavailable("haproxy is not installed and apt-get could not install it")
    assert found is not None
    return found


def owner_routes(backends: dict[str, int]) -> str:
    """The header routing of docs/operations.md "Pool": a request naming a handle
    (``Mcp-Param-Handle`` of subagent.status/send/cancel, ``Mcp-Name`` of a read)
    goes to the worker the handle names; anything else is round robin."""
    lines = []
    for name in backends:
        lines.append(f"  acl to_{name} req.hdr(Mcp-Param-Handle) -m reg ^served\\.{name}\\.")
        lines.append(f"  acl to_{name} req.hdr(Mcp-Name) -m reg "
                     f"^agent://subagent/served\\.{name}\\.")
        lines.append(f"  use_backend {name} if to_{name}")
    for name, p in backends.items():
        lines.append(f"backend {name}\n  server {name} 127.0.0.1:{p}")
    return "\n".join(lines)


@contextlib.contextmanager
def balancer(tmp, backends: dict[str, int], *, route: bool = False, checks: bool = False):
    """HAProxy on a free loopback port: round robin per request, no stickiness
    (``route``: plus the owner routing on the handle headers; ``checks``: the
    workers' own ``/readyz`` as its health check, so a draining or restarting
    worker gets no new requests, and a connection refused is sent to another)."""
    port = peers.free_port()
    cfg = tmp / "haproxy.cfg"
    check = " check inter 100ms fall 1 rise 1" if checks else ""
    servers = "\n".join(f"  server {name} 127.0.0.1:{p}{check}"
                         for name, p in backends.items())
    if checks:
        servers = "  option httpchk GET /readyz\n  option redispatch\n  retries 3\n" + servers
    routes, extra = "", ""
    if route:
        text = owner_routes(backends).split("\nbackend ", 1)
        routes, extra = text[0] + "\n", "backend " + text[1] + "\n"
    cfg.write_text(f"""global
  maxconn 512
defaults
  mode http
  timeout connect 5s
  timeout client 600s
  timeout server 600s
frontend pool
  bind 127.0.0.1:{port}
{routes}  default_backend workers
backend workers
  balance roundrobin
  option http-server-close
{servers}
{extra}""")
    proc = peers.PeerProcess([haproxy_bin(), "-db", "-f", str(cfg)], port).start()
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.stop()


@contextlib.asynccontextmanager
async def sdk_client(url: str, who: str, mode: str = "auto"):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS[who]}"},
                                  timeout=120) as http, \
            Client(streamable_http_client(url, http_client=http), mode=mode,
                   cache=None) as c:
        yield c
