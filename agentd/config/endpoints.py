"""The peers a run declares -- MCP servers and A2A peers -- checked where they are declared.

One endpoint rule for every flag and table naming a peer (`check_endpoint`:
https://, or http:// on a loopback host only), the servers' `auth` tables, and
their headers: a header's `{{secret:NAME}}` stays unresolved in the config and
`resolve_headers()` substitutes it only when a connection is made, from env
`AGENTD_SECRET_<NAME>` or the file `<secrets_dir>/<NAME>` (each value is then
registered for log redaction). Every problem is a `ConfigError` (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from urllib.parse import urlsplit

import msgspec

from agentd.config.model import MAX_SCHEMA_DEPTH_CAP, OAuthAuth, ServerSpec
from agentd.errors import ConfigError
from agentd.netaddr import is_loopback_host
from agentd.secrets import DEFAULT_SECRETS_DIR, SECRET_RE, resolve_secret, substitute

RESERVED_SERVER_NAME = "agentd"  # the self-tools' server name (agentd__subagent_spawn, ...)
FEATURES = ("a2a",)
# private_key_jwt signing algorithms (PyJWT names; agentd.mcp.client.oauth.jwt_assertion)
JWT_ALGORITHMS = ("ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384",
                  "PS512", "EdDSA")


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


def parse_a2a_peer_flag(value: str) -> ServerSpec:
    """`name=<endpoint>` from a --a2a-peer flag (same endpoint rule as --mcp)."""
    return _endpoint_flag("--a2a-peer", "peer", value)


def check_servers(servers: list[ServerSpec]) -> None:
    """The run's MCP servers together: names unique, none the self-tools' own."""
    names = [s.name for s in servers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"--mcp: duplicate server name {dupes[0]!r}")
    if RESERVED_SERVER_NAME in names:
        raise ConfigError(f"--mcp: the server name {RESERVED_SERVER_NAME!r} is reserved "
                          "for agentd's own self-tools")


def check_a2a(values: dict, servers: list[ServerSpec]) -> tuple[ServerSpec, ...]:
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


def file_tables(path: str, data: dict) -> tuple[list[ServerSpec], list[ServerSpec]]:
    """The config file's `mcp_servers` (with their `auth`) and `a2a_peers`, taken out
    of `data` and validated."""
    servers = _endpoint_specs(path, data.pop("mcp_servers", []), "mcp_servers", "server")
    for i, spec in enumerate(servers):
        if spec.auth is not None:
            check_auth(spec, f"--config mcp_servers[{i}] {spec.name}: auth")
    return servers, _endpoint_specs(path, data.pop("a2a_peers", []), "a2a_peers", "peer")


def check_header_secrets(servers: Iterable[ServerSpec], secrets_dir: str) -> None:
    """A required server's header {{secret:…}} that is not set: exit 2 now, not at
    connect (an optional server's is found at connect time: it is then left out,
    like a failure)."""
    for spec in (s for s in servers if s.required):
        for value in spec.headers.values():
            for ref in SECRET_RE.finditer(value):
                resolve_secret(ref.group(1), secrets_dir)


def resolve_headers(spec: ServerSpec, secrets_dir: str = DEFAULT_SECRETS_DIR) -> dict[str, str]:
    """The server's headers with every {{secret:NAME}} substituted (at connect time)."""
    return {k: substitute(v, secrets_dir) for k, v in spec.headers.items()}
