"""The configuration's data model: the frozen Structs every layer reads, and their defaults.

A run is given one `Config`, built and checked before any side effect
(`agentd.config.build`); every layer below the CLI only reads it, so it imports
this module and none of the parsing. Nothing here validates: each subsystem's
checks sit beside it (`endpoints`, `serve`, `pool`, `intelligence`), and the
documented defaults are here, once, because both the Structs and the flags'
help text use them.
"""

from __future__ import annotations

import sys
from typing import Literal

import msgspec

from agentd.config.intelligence import DEFAULT_INTELLIGENCE_MAX_BYTES, Sampling
from agentd.netaddr import is_loopback_host
from agentd.secrets import DEFAULT_SECRETS_DIR
from agentd_native import SSEParser
from agentd_native import sse as _sse

MODES = ("task", "reactive")
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
# --journal-run-bytes: one run's journal file (agentd.journal); past it the run is no
# longer journaled and cannot be resumed (docs/cli.md), so the floor keeps a run's
# first steps resumable and the ceiling keeps one runaway run from filling the volume
DEFAULT_JOURNAL_RUN_BYTES = 256 << 20
JOURNAL_RUN_BYTES_BOUNDS = (1 << 20, 16 << 30)
LOG_FORMATS = ("auto", "json", "text")
DEFAULT_LOG_FORMAT = "auto"  # text on a terminal, else JSON lines (agentd.log)
# Documented defaults (docs/cli.md, docs/config.md).
DEFAULT_MAX_DEPTH = 4
DEFAULT_MAX_CHILDREN = 16
DEFAULT_MAX_SUBAGENTS = 256
DEFAULT_MAX_STEPS = 50
DEFAULT_INIT_TIMEOUT = 10.0
DEFAULT_PING_INTERVAL = 30.0
# a tools/call with no progress notification for this long, or running this long in
# all, is ended by agentd (agentd.mcp.client.rules.call_limits; why these values: docs/cli.md)
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
    """`auth = { type = "oauth", … }`: every key optional (docs/security.md).
    `client_id`/`client_secret`/`issuer` are a pre-registration bound to that issuer;
    `client_id_metadata_url` is a Client ID Metadata Document the operator hosts."""

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
    # --pool-subscribe-timeout: s a subscribe or listen awaits the owners of its handles;
    # --pool-dead-after: s without a probe's answer before a peer is called dead
    # (parse_pool fills in agentd.pool.membership's defaults)
    subscribe_timeout: float = 5.0
    dead_after: float = 9.0


class StreamBounds(msgspec.Struct, frozen=True):
    """The bounds of every SSE stream a peer sends agentd (an MCP server's POST
    answers and GET stream, a streamed completion, an A2A stream): one event's
    bytes and the clamp on the stream's `retry:`; and `answer_bytes`, an MCP
    server's JSON answer body, the transport's other way of answering.  Why one
    struct: each consumer builds its parser from it (`parser()`), so none can
    forget a bound; crossing one is that peer's fault (docs/security.md)."""

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
    `ChildConfig` (agentd.tree.control) both embed them, as flat fields (the flags,
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
    intelligence_max_bytes: int = DEFAULT_INTELLIGENCE_MAX_BYTES
    sampling: Sampling = Sampling()  # --temperature ... (agentd.config.intelligence)
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
    # --log-level / env AGENTD_LOG_LEVEL / the file's log_level; None: not asked (a run
    # logs at info, the interactive commands at warning); subagents get it as a value
    log_level: str | None = None
    secrets_dir: str = DEFAULT_SECRETS_DIR
    state_dir: str | None = None  # --state-dir: the OAuth token store (agentd.mcp.client.oauth)
    # --journal DIR: the durable journal of every served run or batch sample (agentd.journal),
    # absolute; None: runs live in memory only. Never defaulted (docs/cli.md says why)
    journal: str | None = None
    journal_run_bytes: int = DEFAULT_JOURNAL_RUN_BYTES  # --journal-run-bytes: one run's file
    auth_interactive: bool = False  # --auth-interactive: a login may happen during a run
    metrics_listen: str | None = None  # --metrics-listen HOST:PORT (/metrics, probes)
    # bearer for /metrics on that listener: a token, or "{{secret:NAME}}" (resolved at
    # start); default: --serve-bearer. A secret: never logged.
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
