"""One validated, frozen configuration, built before any side effect.

Flags and the optional TOML file are merged here and checked as a whole; any
problem raises `ConfigError`, which the CLI turns into exit 2 with one line on
stderr — before a socket is opened or a process started.

Secrets in MCP server headers are written `{{secret:NAME}}`, unresolved in the config;
`resolve_headers()` substitutes them at connect time, from env `AGENTD_SECRET_<NAME>` or
`<secrets_dir>/<NAME>`, and registers each value for log redaction.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import msgspec

from agentd import intelligence_config as _model
from agentd import log as _log
from agentd.errors import ConfigError
from agentd.netaddr import is_loopback_host
from agentd.secrets import DEFAULT_SECRETS_DIR, SECRET_RE, resolve_secret, substitute
from agentd_native import SSEParser
from agentd_native import sse as _sse

MODES = ("task", "reactive")
RESERVED_SERVER_NAME = "agentd"  # the self-tools' server name (agentd__subagent_spawn, ...)
SPAWN_MODES = ("exec", "forkserver")
# The forkserver where it works (Linux: pidfds, SCM_RIGHTS, the death signal);
# the Supervisor falls back to exec, with one warning, if it cannot start.
DEFAULT_SPAWN = "forkserver" if sys.platform.startswith("linux") else "exec"
DEFAULT_MAX_INFLIGHT_INTELLIGENCE = 64  # intelligence calls in flight, tree-wide
# agentd batch (docs/batch.md): samples in flight, the progress line's period, the bounds
# of a task line, of a tasks file and of a cassette a replay reads
DEFAULT_PARALLEL = 8
DEFAULT_PROGRESS_INTERVAL = 5.0
DEFAULT_TASK_LINE_BYTES = 1 << 20
DEFAULT_MAX_TASKS = 100_000
DEFAULT_SCORER_TIMEOUT = 60.0  # seconds a `command:` scorer of agentd batch has per sample
DEFAULT_CASSETTE_BYTES = 256 << 20
LOG_FORMATS = ("auto", "json", "text")
DEFAULT_LOG_FORMAT = "auto"  # text on a terminal, else JSON lines (agentd.log)
# Where --serve-cert/--serve-key default to (spec §2): server.crt and server.key in
# this directory; env AGENTD_TLS_DIR moves the directory (docs/cli.md).
DEFAULT_TLS_DIR = "/etc/agentd/tls"
TLS_DIR_ENV = "AGENTD_TLS_DIR"
SERVE_FILE_KEYS = ("serve_mcp", "serve_cert", "serve_key", "serve_client_ca", "serve_bearer",
                   "serve_bearers")
# --config's names for the --pool-* flags
POOL_FILE_KEYS = ("pool_id", "pool_peers", "pool_key", "pool_dns", "pool_dns_interval",
                  "pool_subscribe_timeout", "pool_dead_after")

# Documented defaults (docs/cli.md, docs/config.md).
DEFAULT_MAX_DEPTH = 4
DEFAULT_MAX_CHILDREN = 16
DEFAULT_MAX_SUBAGENTS = 256
DEFAULT_MAX_STEPS = 50
DEFAULT_INIT_TIMEOUT = 10.0
DEFAULT_PING_INTERVAL = 30.0
# a tools/call silent or running this long is ended (rules/call_limits; why: docs/cli.md)
DEFAULT_TOOL_IDLE_TIMEOUT = 0.0  # off: docs/cli.md says why
DEFAULT_TOOL_TIMEOUT = 3600.0
DEFAULT_DRAIN_TIMEOUT = 25.0
DEFAULT_OBSERVATION_BYTES = 64 * 1024
DEFAULT_DEBOUNCE = 0.05
DEFAULT_MAX_SUBSCRIPTIONS = 64
DEFAULT_MAX_SCHEMA_DEPTH = 128  # a tool schema nested deeper is excluded (per server)
MAX_SCHEMA_DEPTH_CAP = 256  # its ceiling: the schema walks below it stay far from the stack
DEFAULT_SSE_EVENT_BYTES = _sse.MAX_EVENT  # one SSE event from a peer: data lines + open line
DEFAULT_SSE_RETRY_MIN_MS = 100  # a peer's SSE `retry:` is clamped to [min, max] ms
DEFAULT_SSE_RETRY_MAX_MS = _sse.RETRY_MAX_MS
DEFAULT_MCP_MAX_BYTES = 64 * 1024 * 1024  # one MCP server's JSON (non-SSE) answer body
DEFAULT_POLL_INTERVAL = 5.0  # seconds between reads of a URI watched by polling; 0: never poll


class OAuthAuth(msgspec.Struct, frozen=True, tag_field="type", tag="oauth",
                forbid_unknown_fields=True):
    """`auth = { type = "oauth", … }`, every key optional (docs/security.md): `client_id`/
    `client_secret`/`issuer` pre-registered there, or a hosted `client_id_metadata_url`."""

    client_id_metadata_url: str | None = None
    client_id: str | None = None
    client_secret: str | None = None  # a {{secret:NAME}} reference, never the secret
    issuer: str | None = None
    scopes: list[str] = []

    @property
    def type(self) -> str:
        return "oauth"


class ClientCredentialsAuth(msgspec.Struct, frozen=True, tag_field="type",
                            tag="client_credentials", forbid_unknown_fields=True):
    """`auth = { type = "client_credentials", client_id, client_secret | private_key_file }`:
    machine-to-machine, no person, no token store (client_secret_basic or private_key_jwt)."""

    client_id: str
    client_secret: str | None = None  # a {{secret:NAME}} reference
    private_key_file: str | None = None  # PEM key: private_key_jwt
    signing_algorithm: str | None = None  # default ES256
    issuer: str | None = None
    scopes: list[str] = []

    @property
    def type(self) -> str:
        return "client_credentials"


class ServerSpec(msgspec.Struct, frozen=True):
    """A declared MCP server: trusted config, never built from model output."""

    name: str
    url: str
    required: bool = True
    headers: dict[str, str] = {}  # values may hold {{secret:NAME}}, unresolved
    ca_file: str | None = None  # custom CA bundle for a private https endpoint
    client_cert: str | None = None  # PEM certificate presented to an mTLS server
    client_key: str | None = None  # its private key (PEM)
    auth: OAuthAuth | ClientCredentialsAuth | None = None  # OAuth (agentd.mcp.client.oauth)
    # the deepest tool schema offered (agentd.mcp.client.rules.catalogue); a deeper one is excluded
    max_schema_depth: int = DEFAULT_MAX_SCHEMA_DEPTH
    # this server's tool-call limits over --tool-idle-timeout / --tool-timeout
    # (None: the run's; 0: no limit), for a server whose long tools report no progress
    tool_idle_timeout: float | None = None
    tool_timeout: float | None = None
    transport: Literal["streamable-http", "sse"] = "streamable-http"  # sse: 2024-11-05's


class ServeSpec(msgspec.Struct, frozen=True):
    """Where and how the self-MCP is served (`--serve-mcp`)."""

    url: str
    scheme: Literal["http", "https"]
    host: str
    port: int
    cert: str | None = None
    key: str | None = None
    client_ca: str | None = None
    bearer: str | None = msgspec.field(default=None)  # secret: never logged
    # named bearers: name -> "{{secret:NAME}}" (unresolved; the name is the principal)
    bearers: dict[str, str] = {}

    @property
    def loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def authenticated(self) -> bool:
        return bool(self.bearer) or bool(self.bearers) or bool(self.client_ca)


class PoolPeer(msgspec.Struct, frozen=True):
    """``--pool-peer ID=URL``: a pool member's ``--serve-mcp`` base URL as this worker reaches it."""

    id: str
    url: str


class PoolDns(msgspec.Struct, frozen=True):
    """``--pool-dns NAME[:PORT]``: peers at ``scheme://A:PORT`` for each address A of NAME."""

    name: str
    port: int
    scheme: Literal["http", "https"]
    interval: float = 5.0  # --pool-dns-interval: seconds between resolutions


class PoolSpec(msgspec.Struct, frozen=True):
    """Pool mode (docs/operations.md "Pool"): this worker's id, its peers and the key."""

    id: str
    peers: tuple[PoolPeer, ...] = ()
    key: str = msgspec.field(default="")  # the resolved shared secret: never logged
    dns: PoolDns | None = None  # --pool-dns: discovered peers, with the static ones
    # --pool-subscribe-timeout: s a subscribe or listen awaits its handles' owners; --pool-dead-
    # after: s without a probe's answer before a peer is dead (agentd.pool.membership's defaults)
    subscribe_timeout: float = 5.0
    dead_after: float = 9.0


class StreamBounds(msgspec.Struct, frozen=True):
    """The bounds of every SSE stream a peer sends agentd (MCP answers and streams,
    a streamed completion, an A2A stream): one event's bytes, the clamp on `retry:`, and
    `answer_bytes`, an MCP server's JSON answer body.  One struct: each consumer builds its
    parser from it (`parser()`), so none can forget a bound (docs/security.md)."""

    event_bytes: int = DEFAULT_SSE_EVENT_BYTES
    retry_min_ms: int = DEFAULT_SSE_RETRY_MIN_MS
    retry_max_ms: int = DEFAULT_SSE_RETRY_MAX_MS
    answer_bytes: int = DEFAULT_MCP_MAX_BYTES

    def parser(self) -> SSEParser:
        return SSEParser(self.event_bytes, self.retry_min_ms, self.retry_max_ms)

    def clamp_ms(self, ms: int) -> int:
        """A reconnection delay of our own (the default one) inside the same clamp."""
        return min(max(ms, self.retry_min_ms), self.retry_max_ms)


class RunLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The bounds of a run, declared once: the root's `Config` and a child's
    `ChildConfig` (agentd.child.control) both embed them, as flat fields (the flags,
    the config-file keys and the control wire keep one name per limit)."""

    max_depth: int = DEFAULT_MAX_DEPTH
    max_children: int = DEFAULT_MAX_CHILDREN
    max_subagents: int = DEFAULT_MAX_SUBAGENTS
    max_steps: int = DEFAULT_MAX_STEPS
    deadline: float | None = None  # seconds from start
    token_ceiling: int | None = None  # a child's: what is left of the tree's ceiling
    init_timeout: float = DEFAULT_INIT_TIMEOUT
    ping_interval: float = DEFAULT_PING_INTERVAL
    tool_idle_timeout: float = DEFAULT_TOOL_IDLE_TIMEOUT  # 0: no idle limit
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT  # 0: no cap
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    observation_bytes: int = DEFAULT_OBSERVATION_BYTES

    @property
    def limits(self) -> RunLimits:
        """Just the limits (a `Config` or `ChildConfig` narrowed to them)."""
        mine = msgspec.structs.asdict(self)
        return RunLimits(**{f: mine[f] for f in RunLimits.__struct_fields__})


class Config(RunLimits, frozen=True):
    instruction: str | None = None
    intelligence: str | None = None
    model: str | None = None
    intelligence_stream: bool | None = None  # None: env AGENTD_INTELLIGENCE_STREAM, else off
    intelligence_timeout: float | None = None  # None: env, else the provider's default
    intelligence_attempts: int | None = None  # None: env, else the provider's default
    intelligence_max_bytes: int = _model.DEFAULT_INTELLIGENCE_MAX_BYTES
    sampling: _model.Sampling = _model.Sampling()  # --temperature ... (agentd.intelligence_config)
    output_contract: str | None = None
    self_tools: str = "all"  # --self-tools (agentd.agent.selftools.OFFERS)
    tool_images: str = "parts"  # --tool-images (agentd.agent.images.MODES)
    trajectory: str | None = None  # --trajectory FILE: the run's ATIF trajectory (agentd.trajectory)
    mcp: tuple[ServerSpec, ...] = ()
    serve: ServeSpec | None = None
    features: tuple[str, ...] = ()  # opt-in features (--features): "a2a"
    a2a_peers: tuple[ServerSpec, ...] = ()  # --a2a-peer / a2a_peers (with --features a2a)
    serve_a2a: bool = False  # --serve-a2a: A2A beside the self-MCP on its listener
    pool: PoolSpec | None = None  # --pool-id/--pool-peer/--pool-key: a worker pool
    mode: str = "task"
    subscribe: tuple[str, ...] = ()
    debounce: float = DEFAULT_DEBOUNCE
    max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS
    poll_interval: float = DEFAULT_POLL_INTERVAL  # --poll-interval (docs/reactive.md)
    wake_on_start: bool = False  # --wake-on-start: run once at start (docs/reactive.md)
    spawn: str = DEFAULT_SPAWN
    max_inflight_intelligence: int = DEFAULT_MAX_INFLIGHT_INTELLIGENCE
    sse_event_bytes: int = DEFAULT_SSE_EVENT_BYTES
    sse_retry_min_ms: int = DEFAULT_SSE_RETRY_MIN_MS
    sse_retry_max_ms: int = DEFAULT_SSE_RETRY_MAX_MS
    mcp_max_bytes: int = DEFAULT_MCP_MAX_BYTES
    log_format: str = DEFAULT_LOG_FORMAT
    # --log-level / AGENTD_LOG_LEVEL / log_level; None: info for a run, warning interactive
    log_level: str | None = None
    secrets_dir: str = DEFAULT_SECRETS_DIR
    state_dir: str | None = None  # --state-dir: the OAuth token store (agentd.mcp.client.oauth)
    auth_interactive: bool = False  # --auth-interactive: a login may happen during a run
    metrics_listen: str | None = None  # --metrics-listen HOST:PORT (/metrics, probes)
    # /metrics bearer: a token or "{{secret:NAME}}"; default: --serve-bearer; never logged
    metrics_bearer: str | None = msgspec.field(default=None)
    # agentd batch's own (the flags of the same names; docs/batch.md)
    parallel: int = DEFAULT_PARALLEL
    batch_token_ceiling: int | None = None
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL
    task_line_bytes: int = DEFAULT_TASK_LINE_BYTES
    max_tasks: int = DEFAULT_MAX_TASKS
    cassette_bytes: int = DEFAULT_CASSETTE_BYTES

    def server(self, name: str) -> ServerSpec | None:
        return next((s for s in self.mcp if s.name == name), None)

    @property
    def stream_bounds(self) -> StreamBounds:
        return StreamBounds(self.sse_event_bytes, self.sse_retry_min_ms, self.sse_retry_max_ms,
                            self.mcp_max_bytes)


def split_host_port(value: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` (as for --metrics-listen) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--metrics-listen {value!r}: expected HOST:PORT")
    return host, int(port)


def check_endpoint(url: str, what: str) -> None:
    """An MCP endpoint is https://, or http:// on a loopback host only, and a URL
    at all (``https://[x`` or port 99999 is refused here, never raised later)."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # ValueError: not a port number (99999, "x")
    except ValueError as exc:
        raise ConfigError(f"{what}: endpoint {url[:200]!r} is not a URL: {exc}") from None
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname and is_loopback_host(parts.hostname):
        return
    raise ConfigError(f"{what}: endpoint {url!r} must be https:// or a loopback http://")


def _endpoint_flag(flag: str, what: str, value: str) -> ServerSpec:
    """`name=<endpoint>` from a repeatable endpoint flag: one rule for every such flag."""
    if "=" not in value:
        raise ConfigError(f"{flag} {value!r}: expected name=<endpoint>")
    name, url = value.split("=", 1)
    name = name.strip()
    if not name:
        raise ConfigError(f"{flag} {value!r}: the {what} name is empty")
    check_endpoint(url, f"{flag} {name}")
    return ServerSpec(name=name, url=url)


def parse_mcp_flag(value: str) -> ServerSpec:
    """`name=<endpoint>` from a --mcp flag."""
    return _endpoint_flag("--mcp", "server", value)


def default_tls_file(name: str) -> str:
    return str(Path(os.environ.get(TLS_DIR_ENV) or DEFAULT_TLS_DIR) / name)


def resolve_bearers(spec: ServeSpec, secrets_dir: str = DEFAULT_SECRETS_DIR) -> dict[str, str]:
    """The named bearers' tokens, resolved when the listener starts."""
    return {name: substitute(ref, secrets_dir) for name, ref in spec.bearers.items()}


FEATURES = ("a2a",)


def parse_a2a_peer_flag(value: str) -> ServerSpec:
    """`name=<endpoint>` from a --a2a-peer flag (same endpoint rule as --mcp)."""
    return _endpoint_flag("--a2a-peer", "peer", value)


def _check_a2a(values: dict, servers: list[ServerSpec]) -> tuple[ServerSpec, ...]:
    """--features / --a2a-peer / --serve-a2a, checked together (exit 2 on a problem)."""
    features = tuple(values.get("features") or ())
    unknown = sorted(set(features) - set(FEATURES))
    if unknown:
        raise ConfigError(f"--features {unknown[0]!r}: expected one of {', '.join(FEATURES)}")
    peers = list(values.pop("a2a_peers", None) or ())
    if "a2a" not in features:
        if peers:
            raise ConfigError("--a2a-peer needs --features a2a")
        if values.get("serve_a2a"):
            raise ConfigError("--serve-a2a needs --features a2a")
    if values.get("serve_a2a") and values.get("serve") is None:
        raise ConfigError("--serve-a2a needs --serve-mcp (A2A is served on its listener)")
    names = [p.name for p in peers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"--a2a-peer: duplicate peer name {dupes[0]!r}")
    for n in names:
        if n == RESERVED_SERVER_NAME:
            raise ConfigError(f"--a2a-peer: the name {n!r} is reserved for agentd's own "
                              "self-tools")
        if any(s.name == n for s in servers):
            raise ConfigError(f"--a2a-peer {n}: an MCP server has the same name (tool_scope "
                              "names both, so they must differ)")
    return tuple(peers)


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


def parse_serve(url: str, cert: str | None, key: str | None, client_ca: str | None,
                bearer: str | None, bearers: dict[str, str] | None = None) -> ServeSpec:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--serve-mcp {url!r}: expected http(s)://host:port")
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"--serve-mcp {url!r}: {exc}") from None
    scheme: Literal["http", "https"] = "https" if parts.scheme == "https" else "http"
    if port is None:
        port = 443 if scheme == "https" else 80
    if parts.scheme == "https" and not cert and not key:  # flag, then config, then env
        cert = os.environ.get("AGENTD_SERVE_CERT") or None
        key = os.environ.get("AGENTD_SERVE_KEY") or None
    if bool(cert) != bool(key):
        raise ConfigError("--serve-cert and --serve-key go together")
    defaulted = parts.scheme == "https" and not cert
    if defaulted:  # spec §2: the files in /etc/agentd/tls unless told otherwise
        cert, key = default_tls_file("server.crt"), default_tls_file("server.key")
        for path, flag, env in ((cert, "--serve-cert", "AGENTD_SERVE_CERT"),
                                (key, "--serve-key", "AGENTD_SERVE_KEY")):
            if not os.access(path, os.R_OK):
                raise ConfigError(f"--serve-mcp https:// needs a certificate and key: the "
                                  f"default {path} is not readable (set {flag}, "
                                  f"{flag[2:].replace('-', '_')} in --config, env {env}, "
                                  f"or env {TLS_DIR_ENV} for the directory)")
    if parts.scheme == "http" and (cert or client_ca):
        raise ConfigError("--serve-cert/--serve-client-ca need an https:// --serve-mcp")
    if client_ca and not cert:
        raise ConfigError("--serve-client-ca (mTLS) needs --serve-cert and --serve-key")
    spec = ServeSpec(url=url, scheme=scheme, host=parts.hostname, port=port,
                     cert=cert, key=key, client_ca=client_ca, bearer=bearer or None,
                     bearers=dict(bearers or {}))
    if spec.bearer and "default" in spec.bearers:
        raise ConfigError("serve_bearers: the name 'default' is --serve-bearer's")
    if not spec.loopback and not spec.authenticated:
        raise ConfigError(
            f"--serve-mcp {url}: a non-loopback listener needs mTLS "
            "(--serve-cert, --serve-key, --serve-client-ca) or --serve-bearer")
    for given, flag in ((cert, "--serve-cert"), (key, "--serve-key"),
                        (client_ca, "--serve-client-ca")):
        if given and not os.access(given, os.R_OK):
            raise ConfigError(f"{flag} {given}: not readable")
    return spec


# private_key_jwt signing algorithms (PyJWT names; agentd.mcp.client.oauth.jwt_assertion)
JWT_ALGORITHMS = ("ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384",
                  "PS512", "EdDSA")


def check_auth(spec: ServerSpec, where: str) -> None:
    """A server's `auth` table: secrets only as {{secret:NAME}}, URLs https (or loopback
    http), a readable key file, one client-credentials method (exit 2 otherwise)."""
    auth = spec.auth
    assert auth is not None
    secret = auth.client_secret
    if secret is not None and not SECRET_RE.fullmatch(secret.strip()):
        raise ConfigError(f"{where}: client_secret must be a {{{{secret:NAME}}}} reference, "
                          "never the secret itself")
    if auth.issuer is not None:
        check_endpoint(auth.issuer, f"{where}: issuer")
    if isinstance(auth, OAuthAuth):
        url = auth.client_id_metadata_url
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme != "https" or not parts.hostname or parts.path in ("", "/"):
                raise ConfigError(f"{where}: client_id_metadata_url {url!r} must be an "
                                  "https:// URL with a path")
        if secret is not None and not auth.client_id:
            raise ConfigError(f"{where}: client_secret needs client_id")
        return
    if not auth.client_id:
        raise ConfigError(f"{where}: client_credentials needs client_id")
    if bool(auth.client_secret) == bool(auth.private_key_file):
        raise ConfigError(f"{where}: client_credentials needs exactly one of client_secret "
                          "(client_secret_basic) and private_key_file (private_key_jwt)")
    if auth.private_key_file and not os.access(auth.private_key_file, os.R_OK):
        raise ConfigError(f"{where}: private_key_file {auth.private_key_file}: not readable")
    if auth.signing_algorithm is not None and auth.signing_algorithm not in JWT_ALGORITHMS:
        raise ConfigError(f"{where}: signing_algorithm {auth.signing_algorithm!r}: expected "
                          f"one of {', '.join(JWT_ALGORITHMS)}")
    if auth.signing_algorithm is not None and not auth.private_key_file:
        raise ConfigError(f"{where}: signing_algorithm goes with private_key_file")


def _endpoint_specs(path: str, raws: object, key: str, what: str) -> list[ServerSpec]:
    """The `mcp_servers` / `a2a_peers` tables of a config file: one validation for both."""
    if not isinstance(raws, list):
        raise ConfigError(f"--config {path}: {key} must be an array of tables ([[{key}]])")
    out = []
    for i, raw in enumerate(raws):
        if not isinstance(raw, dict):
            raise ConfigError(f"--config {path}: {key}[{i}] must be a table")
        try:
            spec = msgspec.convert(raw, ServerSpec)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"--config {path}: {key}[{i}]: {exc}") from None
        if not spec.name.strip():
            raise ConfigError(f"--config {path}: {key}[{i}]: the {what} name is empty")
        where = f"--config {key}[{i}] {spec.name}"
        check_endpoint(spec.url, where)
        if bool(spec.client_cert) != bool(spec.client_key):
            raise ConfigError(f"{where}: client_cert and client_key go together")
        if not 1 <= spec.max_schema_depth <= MAX_SCHEMA_DEPTH_CAP:
            raise ConfigError(f"{where}: max_schema_depth must be 1..{MAX_SCHEMA_DEPTH_CAP}")
        for field, limit in (("tool_idle_timeout", spec.tool_idle_timeout),
                             ("tool_timeout", spec.tool_timeout)):
            if limit is not None and not limit >= 0:
                raise ConfigError(f"{where}: {field} must not be negative (0: no limit)")
        for field, value in (("ca_file", spec.ca_file), ("client_cert", spec.client_cert),
                             ("client_key", spec.client_key)):
            if value and not os.access(value, os.R_OK):
                raise ConfigError(f"{where}: {field} {value}: not readable")
        out.append(spec)
    return out


def load_config_file(path: str) -> dict:
    """Read the TOML config file into plain values (validated by build())."""
    import tomllib  # only the root reads a file; a subagent's config comes over the wire

    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: invalid TOML: {exc}") from None
    servers = _endpoint_specs(path, data.pop("mcp_servers", []), "mcp_servers", "server")
    for i, spec in enumerate(servers):
        if spec.auth is not None:
            check_auth(spec, f"--config mcp_servers[{i}] {spec.name}: auth")
    peers = _endpoint_specs(path, data.pop("a2a_peers", []), "a2a_peers", "peer")
    if peers:
        data["a2a_peers"] = peers
    key = data.get("pool_key")
    if key is not None and not (isinstance(key, str) and SECRET_RE.fullmatch(key.strip())):
        raise ConfigError(f"--config {path}: pool_key must be a {{{{secret:NAME}}}} reference, "
                          "never the key itself")
    peers_v = data.get("pool_peers", [])
    if not (isinstance(peers_v, list) and all(isinstance(v, str) for v in peers_v)):
        raise ConfigError(f"--config {path}: pool_peers must be an array of \"ID=URL\" strings")
    if not isinstance(data.get("pool_dns", ""), str):
        raise ConfigError(f"--config {path}: pool_dns must be a \"NAME[:PORT]\" string")
    known = (set(Config.__struct_fields__) - {"mcp", "serve", "pool", "sampling"}) \
        | set(SERVE_FILE_KEYS) | set(POOL_FILE_KEYS) | set(_model.SAMPLING_KEYS)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"--config {path}: unknown keys: {', '.join(unknown)}")
    data["mcp"] = servers
    return data


def build(values: dict, *, needs_instruction: bool = True) -> Config:
    """Validate merged values (file first, flags over it) into a frozen Config."""
    servers = list(values.pop("mcp", ()))
    names = [s.name for s in servers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"--mcp: duplicate server name {dupes[0]!r}")
    if RESERVED_SERVER_NAME in names:
        raise ConfigError(f"--mcp: the server name {RESERVED_SERVER_NAME!r} is reserved "
                          "for agentd's own self-tools")
    a2a_peers = _check_a2a(values, servers)
    mode = values.get("mode", "task")
    if mode not in MODES:
        raise ConfigError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    subscribe = tuple(values.get("subscribe", ()))
    if mode == "reactive" and not subscribe:
        raise ConfigError("--mode reactive needs at least one --subscribe URI")
    if mode == "task" and subscribe:
        raise ConfigError("--subscribe needs --mode reactive (a task run wakes on nothing; "
                          "its model subscribes with the agentd__subscribe self-tool)")
    if mode == "task" and values.get("wake_on_start"):
        raise ConfigError("--wake-on-start needs --mode reactive (a task run runs once anyway)")
    for uri in subscribe:
        if not uri or "{" in uri or "}" in uri:
            raise ConfigError(f"--subscribe {uri!r}: a concrete URI is needed, not a template")
    if values.get("spawn", "exec") not in SPAWN_MODES:
        raise ConfigError(f"--spawn: expected one of {', '.join(SPAWN_MODES)}")
    trajectory = values.get("trajectory")
    if trajectory is not None and not (isinstance(trajectory, str) and trajectory
                                       and os.path.isdir(os.path.dirname(trajectory) or ".")):
        raise ConfigError(f"--trajectory {trajectory!r}: the file's directory must exist "
                          "(config key `trajectory`)")
    if needs_instruction and not values.get("instruction"):
        raise ConfigError("--instruction is required for a run")
    for key in ("max_depth", "max_children", "max_subagents", "max_steps",
                "observation_bytes", "max_subscriptions", "intelligence_attempts",
                "max_inflight_intelligence", "sse_event_bytes", "intelligence_max_bytes", "mcp_max_bytes",
                "parallel", "batch_token_ceiling", "task_line_bytes", "max_tasks",
                "cassette_bytes"):
        if key in values and values[key] is not None and values[key] < 1:
            raise ConfigError(f"--{key.replace('_', '-')} must be at least 1")
    given = {k: values[k] for k in ("sse_event_bytes", "sse_retry_min_ms", "sse_retry_max_ms")
             if values.get(k) is not None}
    bounds = StreamBounds(given.get("sse_event_bytes", DEFAULT_SSE_EVENT_BYTES),
                          given.get("sse_retry_min_ms", DEFAULT_SSE_RETRY_MIN_MS),
                          given.get("sse_retry_max_ms", DEFAULT_SSE_RETRY_MAX_MS))
    try:
        bounds.parser()  # the parser's own check: one rule for what a bound may be
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--sse-event-bytes {bounds.event_bytes}, --sse-retry-min-ms "
                          f"{bounds.retry_min_ms}, --sse-retry-max-ms {bounds.retry_max_ms}: "
                          f"{exc}") from None
    for key in ("init_timeout", "ping_interval", "drain_timeout", "deadline",
                "intelligence_timeout", "progress_interval"):
        if values.get(key) is not None and values[key] <= 0:
            raise ConfigError(f"--{key.replace('_', '-')} must be positive")
    if values.get("debounce") is not None and values["debounce"] < 0:
        raise ConfigError("--debounce must not be negative")
    for key in ("tool_idle_timeout", "tool_timeout"):  # 0 switches the limit off
        if values.get(key) is not None and not values[key] >= 0:
            raise ConfigError(f"--{key.replace('_', '-')} must not be negative (0: no limit)")
    if values.get("poll_interval") is not None and not 0 <= values["poll_interval"] <= 86400:
        raise ConfigError("--poll-interval must be between 0 (never poll) and 86400 seconds")
    if values.get("metrics_listen"):
        host, _port = split_host_port(values["metrics_listen"])
        serve = values.get("serve")
        if not is_loopback_host(host) and not values.get("metrics_bearer") \
                and not (serve is not None and serve.bearer):
            raise ConfigError(f"--metrics-listen {values['metrics_listen']}: a non-loopback "
                              "listener needs --metrics-bearer (or --serve-bearer): its "
                              "/metrics is behind it")
    elif values.get("metrics_bearer"):
        raise ConfigError("--metrics-bearer needs --metrics-listen")
    clean = {k: v for k, v in values.items() if v is not None and k not in _model.SAMPLING_KEYS}
    try:
        return msgspec.convert({**clean, "mcp": servers, "subscribe": subscribe,
                                "a2a_peers": a2a_peers, "sampling": _model.sampling(values)}, Config,
                               from_attributes=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"config: {exc}") from None


def resolve_headers(spec: ServerSpec, secrets_dir: str = DEFAULT_SECRETS_DIR) -> dict[str, str]:
    """The server's headers with every {{secret:NAME}} substituted (at connect time)."""
    return {k: substitute(v, secrets_dir) for k, v in spec.headers.items()}
