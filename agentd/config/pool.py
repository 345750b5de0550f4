"""Pool mode's configuration (`--pool-*`, or `pool_*` in `--config`), checked as one.

The pool's own rules decide what a key, an id, a DNS name and a duration may be
(`agentd.pool.handles`, `discovery`, `membership`) and whether the pool could
carry each caller's principal (`agentd.pool.link_check`); this module asks them
and turns every refusal into a `ConfigError` (exit 2) naming the flag.
"""

from __future__ import annotations

import socket

from agentd import log as _log
from agentd.config.endpoints import check_endpoint
from agentd.config.model import PoolDns, PoolPeer, PoolSpec, ServeSpec
from agentd.errors import ConfigError
from agentd.secrets import SECRET_RE, resolve_secret

# --config's names for the --pool-* flags
POOL_FILE_KEYS = ("pool_id", "pool_peers", "pool_key", "pool_dns", "pool_dns_interval",
                  "pool_subscribe_timeout", "pool_dead_after")


def check_file_keys(path: str, data: dict) -> None:
    """The config file's `pool_*` values have the shapes their flags have; the key
    only as a `{{secret:NAME}}` reference."""
    key = data.get("pool_key")
    if key is not None and not (isinstance(key, str) and SECRET_RE.fullmatch(key.strip())):
        raise ConfigError(f"--config {path}: pool_key must be a {{{{secret:NAME}}}} reference, "
                          "never the key itself")
    peers_v = data.get("pool_peers", [])
    if not (isinstance(peers_v, list) and all(isinstance(v, str) for v in peers_v)):
        raise ConfigError(f"--config {path}: pool_peers must be an array of \"ID=URL\" strings")
    if not isinstance(data.get("pool_dns", ""), str):
        raise ConfigError(f"--config {path}: pool_dns must be a \"NAME[:PORT]\" string")


def parse_pool(pool_id: str | None, peers: list[str], key: str | None,
               serve: ServeSpec | None, secrets_dir: str,
               dns: str | None = None, dns_interval: float | None = None,
               subscribe_timeout: float | None = None,
               dead_after: float | None = None) -> PoolSpec | None:
    """The ``--pool-*`` flags (or ``pool_id``/``pool_peers``/``pool_key``/``pool_dns`` in
    ``--config``) checked together; None without any of them.  Exit 2: pool flags
    without ``--serve-mcp`` (peers relay to that listener) or without a key, a key
    that is too short, an id that is not a DNS label, a malformed or duplicate
    peer, a malformed ``--pool-dns``, a ``--pool-subscribe-timeout`` or
    ``--pool-dead-after`` out of range, and a pool that could not carry each
    caller's own principal: an unauthenticated listener with peers off this host,
    an mTLS ``--serve-cert`` the pool's CA does not accept."""
    from agentd.pool import discovery, handles, link_check, membership

    if pool_id is None and not peers and not key and not dns:
        return None
    if serve is None:
        raise ConfigError("--pool-id/--pool-peer/--pool-dns/--pool-key need --serve-mcp "
                          "(peers relay to its listener)")
    if not key:
        raise ConfigError("pool mode needs --pool-key (or env AGENTD_POOL_KEY, or "
                          "pool_key = \"{{secret:NAME}}\" in --config)")
    ref = SECRET_RE.fullmatch(key.strip())
    if ref is not None:
        key = resolve_secret(ref.group(1), secrets_dir)
    _log.register_secret(key)
    if len(key.encode()) < handles.MIN_KEY_BYTES:
        raise ConfigError(f"--pool-key: at least {handles.MIN_KEY_BYTES} bytes")
    if pool_id is None:
        pool_id = socket.gethostname().split(".")[0].lower()
    if handles.POOL_ID_RE.fullmatch(pool_id) is None:
        raise ConfigError(f"--pool-id {pool_id[:80]!r}: expected a DNS label (a-z, 0-9, '-', "
                          f"at most {handles.MAX_POOL_ID} characters)")
    out: dict[str, PoolPeer] = {}
    for value in peers:
        peer_id, eq, url = value.partition("=")
        if not eq or handles.POOL_ID_RE.fullmatch(peer_id) is None:
            raise ConfigError(f"--pool-peer {value[:200]!r}: expected ID=<serve-mcp URL> "
                              "with a DNS-label ID")
        check_endpoint(url, f"--pool-peer {peer_id}")
        if peer_id in out:
            raise ConfigError(f"--pool-peer: duplicate peer id {peer_id!r}")
        out[peer_id] = PoolPeer(peer_id, url.rstrip("/"))
    interval = _seconds("--pool-dns-interval", dns_interval, discovery.DEFAULT_DNS_INTERVAL,
                        discovery.MAX_DNS_INTERVAL)
    try:
        pool_dns = PoolDns(*discovery.parse_name(dns, serve.port), serve.scheme,
                           interval) if dns else None
    except ValueError as exc:
        raise ConfigError(f"--pool-dns {str(dns)[:200]!r}: {exc}") from None
    why = link_check.refusal(serve.url, serve.authenticated, {p.id: p.url for p in out.values()},
                             bool(dns) and serve.scheme == "https", serve.cert, serve.key,
                             serve.client_ca)
    if why is not None:  # docs/security.md, "Principals across the pool"
        raise ConfigError(why)
    return PoolSpec(pool_id, tuple(p for p in out.values() if p.id != pool_id), key, pool_dns,
                    _seconds("--pool-subscribe-timeout", subscribe_timeout,
                             membership.DEFAULT_SUBSCRIBE_TIMEOUT,
                             membership.MAX_SUBSCRIBE_TIMEOUT),
                    _seconds("--pool-dead-after", dead_after, membership.DEFAULT_DEAD_AFTER,
                             membership.MAX_DEAD_AFTER))


def _seconds(flag: str, value: float | None, default: float, most: float) -> float:
    """A duration flag in (0, most] (None: its default); exit 2 outside."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= most:
        raise ConfigError(f"{flag} must be in (0, {most:g}] seconds")
    return float(value)
