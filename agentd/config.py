"""One validated, frozen configuration, built before any side effect.

Flags and the optional TOML file are merged here and checked as a whole; any
problem raises `ConfigError`, which the CLI turns into exit 2 with one line on
stderr — before a socket is opened or a process started.

Secrets in MCP server headers are written `{{secret:NAME}}` and stay unresolved
in the config; `resolve_headers()` substitutes them only when a connection is
made, from env `AGENTD_SECRET_<NAME>` or the file `<secrets_dir>/<NAME>`, and
registers each value for log redaction.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import msgspec

from agentd import log as _log

MODES = ("task", "reactive")
RESERVED_SERVER_NAME = "agentd"  # the self-tools' server name (agentd__subagent_spawn, ...)
SPAWN_MODES = ("exec", "forkserver")
LOG_FORMATS = ("json", "text")
SECRET_RE = re.compile(r"\{\{secret:([A-Za-z0-9_.-]+)\}\}")
DEFAULT_SECRETS_DIR = "/run/secrets/agentd"

# Documented defaults (docs/cli.md, docs/config.md).
DEFAULT_MAX_DEPTH = 4
DEFAULT_MAX_CHILDREN = 16
DEFAULT_MAX_SUBAGENTS = 256
DEFAULT_MAX_STEPS = 50
DEFAULT_INIT_TIMEOUT = 10.0
DEFAULT_PING_INTERVAL = 30.0
DEFAULT_DRAIN_TIMEOUT = 25.0
DEFAULT_OBSERVATION_BYTES = 64 * 1024
DEFAULT_DEBOUNCE = 0.05
DEFAULT_MAX_SUBSCRIPTIONS = 64


class ConfigError(Exception):
    """A usage or configuration problem: exit 2, one line on stderr."""


class ServerSpec(msgspec.Struct, frozen=True):
    """A declared MCP server: trusted config, never built from model output."""

    name: str
    url: str
    required: bool = True
    headers: dict[str, str] = {}  # values may hold {{secret:NAME}}, unresolved
    ca_file: str | None = None  # custom CA bundle for a private https endpoint
    client_cert: str | None = None  # PEM certificate presented to an mTLS server
    client_key: str | None = None  # its private key (PEM)


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

    @property
    def loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def authenticated(self) -> bool:
        return bool(self.bearer) or bool(self.client_ca)


class Config(msgspec.Struct, frozen=True):
    instruction: str | None = None
    intelligence: str | None = None
    model: str | None = None
    intelligence_stream: bool | None = None  # None: env AGENTD_INTELLIGENCE_STREAM, else off
    intelligence_timeout: float | None = None  # None: env, else the provider's default
    intelligence_attempts: int | None = None  # None: env, else the provider's default
    output_contract: str | None = None
    mcp: tuple[ServerSpec, ...] = ()
    serve: ServeSpec | None = None
    mode: str = "task"
    subscribe: tuple[str, ...] = ()
    max_depth: int = DEFAULT_MAX_DEPTH
    max_children: int = DEFAULT_MAX_CHILDREN
    max_subagents: int = DEFAULT_MAX_SUBAGENTS
    max_steps: int = DEFAULT_MAX_STEPS
    deadline: float | None = None  # seconds from start
    token_ceiling: int | None = None
    init_timeout: float = DEFAULT_INIT_TIMEOUT
    ping_interval: float = DEFAULT_PING_INTERVAL
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    observation_bytes: int = DEFAULT_OBSERVATION_BYTES
    debounce: float = DEFAULT_DEBOUNCE
    max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS
    spawn: str = "exec"
    log_format: str = "json"
    secrets_dir: str = DEFAULT_SECRETS_DIR

    def server(self, name: str) -> ServerSpec | None:
        return next((s for s in self.mcp if s.name == name), None)


def is_loopback_host(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(url: str, what: str) -> None:
    """An MCP endpoint is https://, or http:// on a loopback host only."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname and is_loopback_host(parts.hostname):
        return
    raise ConfigError(f"{what}: endpoint {url!r} must be https:// or a loopback http://")


def parse_mcp_flag(value: str) -> ServerSpec:
    """`name=<endpoint>` from a --mcp flag."""
    if "=" not in value:
        raise ConfigError(f"--mcp {value!r}: expected name=<endpoint>")
    name, url = value.split("=", 1)
    name = name.strip()
    if not name:
        raise ConfigError(f"--mcp {value!r}: the server name is empty")
    check_endpoint(url, f"--mcp {name}")
    return ServerSpec(name=name, url=url)


def parse_serve(url: str, cert: str | None, key: str | None, client_ca: str | None,
                bearer: str | None) -> ServeSpec:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--serve-mcp {url!r}: expected http(s)://host:port")
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"--serve-mcp {url!r}: {exc}") from None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    if bool(cert) != bool(key):
        raise ConfigError("--serve-cert and --serve-key go together")
    if parts.scheme == "https" and not cert:
        raise ConfigError("--serve-mcp https:// needs --serve-cert and --serve-key")
    if parts.scheme == "http" and (cert or client_ca):
        raise ConfigError("--serve-cert/--serve-client-ca need an https:// --serve-mcp")
    if client_ca and not cert:
        raise ConfigError("--serve-client-ca (mTLS) needs --serve-cert and --serve-key")
    spec = ServeSpec(url=url, scheme=parts.scheme, host=parts.hostname, port=port,
                     cert=cert, key=key, client_ca=client_ca, bearer=bearer or None)
    if not spec.loopback and not spec.authenticated:
        raise ConfigError(
            f"--serve-mcp {url}: a non-loopback listener needs mTLS "
            "(--serve-cert, --serve-key, --serve-client-ca) or --serve-bearer")
    for path, flag in ((cert, "--serve-cert"), (key, "--serve-key"),
                       (client_ca, "--serve-client-ca")):
        if path and not os.access(path, os.R_OK):
            raise ConfigError(f"{flag} {path}: not readable")
    return spec


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
    servers = []
    for i, raw in enumerate(data.pop("mcp_servers", [])):
        if not isinstance(raw, dict):
            raise ConfigError(f"--config {path}: mcp_servers[{i}] must be a table")
        try:
            spec = msgspec.convert(raw, ServerSpec)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"--config {path}: mcp_servers[{i}]: {exc}") from None
        if not spec.name.strip():
            raise ConfigError(f"--config {path}: mcp_servers[{i}]: the server name is empty")
        check_endpoint(spec.url, f"--config mcp_servers[{i}] {spec.name}")
        if bool(spec.client_cert) != bool(spec.client_key):
            raise ConfigError(f"--config mcp_servers[{i}] {spec.name}: client_cert and "
                              "client_key go together")
        for field in ("ca_file", "client_cert", "client_key"):
            value = getattr(spec, field)
            if value and not os.access(value, os.R_OK):
                raise ConfigError(f"--config mcp_servers[{i}] {spec.name}: {field} "
                                  f"{value}: not readable")
        servers.append(spec)
    known = set(Config.__struct_fields__) - {"mcp", "serve"}
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
    mode = values.get("mode", "task")
    if mode not in MODES:
        raise ConfigError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    subscribe = tuple(values.get("subscribe", ()))
    if mode == "reactive" and not subscribe:
        raise ConfigError("--mode reactive needs at least one --subscribe URI")
    for uri in subscribe:
        if not uri or "{" in uri or "}" in uri:
            raise ConfigError(f"--subscribe {uri!r}: a concrete URI is needed, not a template")
    if values.get("spawn", "exec") not in SPAWN_MODES:
        raise ConfigError(f"--spawn: expected one of {', '.join(SPAWN_MODES)}")
    if needs_instruction and not values.get("instruction"):
        raise ConfigError("--instruction is required for a run")
    for key in ("max_depth", "max_children", "max_subagents", "max_steps",
                "observation_bytes", "max_subscriptions", "intelligence_attempts"):
        if key in values and values[key] is not None and values[key] < 1:
            raise ConfigError(f"--{key.replace('_', '-')} must be at least 1")
    for key in ("init_timeout", "ping_interval", "drain_timeout", "deadline",
                "intelligence_timeout"):
        if values.get(key) is not None and values[key] <= 0:
            raise ConfigError(f"--{key.replace('_', '-')} must be positive")
    if values.get("debounce") is not None and values["debounce"] < 0:
        raise ConfigError("--debounce must not be negative")
    clean = {k: v for k, v in values.items() if v is not None}
    try:
        return msgspec.convert({**clean, "mcp": servers, "subscribe": subscribe}, Config,
                               from_attributes=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"config: {exc}") from None


def resolve_secret(name: str, secrets_dir: str = DEFAULT_SECRETS_DIR) -> str:
    """A secret's value from env AGENTD_SECRET_<NAME> or <secrets_dir>/<NAME>."""
    env = os.environ.get(f"AGENTD_SECRET_{name}")
    if env is not None:
        value = env
    else:
        path = Path(secrets_dir) / name
        try:
            value = path.read_text().strip()
        except OSError:
            raise ConfigError(f"secret {name!r} is not set (env AGENTD_SECRET_{name} "
                              f"or file {path})") from None
    _log.register_secret(value)
    return value


def resolve_headers(spec: ServerSpec, secrets_dir: str = DEFAULT_SECRETS_DIR) -> dict[str, str]:
    """The server's headers with every {{secret:NAME}} substituted (at connect time)."""
    return {k: SECRET_RE.sub(lambda m: resolve_secret(m.group(1), secrets_dir), v)
            for k, v in spec.headers.items()}
