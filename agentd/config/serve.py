"""The listeners agentd serves -- the self-MCP (`--serve-mcp`, TLS, mTLS, bearers)
and `--metrics-listen` -- checked before any socket is opened.

Secure by default: a listener off loopback needs mTLS or a bearer; a named
bearer is a `{{secret:NAME}}` reference, resolvable at start and kept
unresolved in the config until the listener starts (`resolve_bearers`).
Every problem is a `ConfigError` (exit 2).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from agentd.config.model import ServeSpec
from agentd.errors import ConfigError
from agentd.netaddr import is_loopback_host
from agentd.secrets import DEFAULT_SECRETS_DIR, SECRET_RE, resolve_secret, substitute

# Where --serve-cert/--serve-key default to (spec §2): server.crt and server.key in
# this directory; env AGENTD_TLS_DIR moves the directory (docs/cli.md).
DEFAULT_TLS_DIR = "/etc/agentd/tls"
TLS_DIR_ENV = "AGENTD_TLS_DIR"
BEARER_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
SERVE_FILE_KEYS = ("serve_mcp", "serve_cert", "serve_key", "serve_client_ca", "serve_bearer",
                   "serve_bearers")


def default_tls_file(name: str) -> str:
    return str(Path(os.environ.get(TLS_DIR_ENV) or DEFAULT_TLS_DIR) / name)


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


def check_bearers(bearers: object, secrets_dir: str) -> dict[str, str]:
    """Named bearers from the config file: each value exactly one {{secret:NAME}},
    resolvable now (exit 2 before any side effect), kept unresolved."""
    if not isinstance(bearers, dict):
        raise ConfigError("serve_bearers: expected a table of name = \"{{secret:NAME}}\"")
    out: dict[str, str] = {}
    for name, ref in bearers.items():
        if not isinstance(name, str) or not BEARER_NAME_RE.fullmatch(name):
            raise ConfigError(f"serve_bearers: bad bearer name {name!r} "
                              "(letters, digits, _ . -)")
        if not isinstance(ref, str) or not SECRET_RE.fullmatch(ref.strip()):
            raise ConfigError(f"serve_bearers.{name}: the token must be a {{{{secret:NAME}}}} "
                              "reference, never the token itself")
        resolve_secret(SECRET_RE.fullmatch(ref.strip()).group(1), secrets_dir)  # type: ignore[union-attr]
        out[name] = ref.strip()
    return out


def resolve_bearers(spec: ServeSpec, secrets_dir: str = DEFAULT_SECRETS_DIR) -> dict[str, str]:
    """The named bearers' tokens, resolved when the listener starts."""
    return {name: substitute(ref, secrets_dir) for name, ref in spec.bearers.items()}


def split_host_port(value: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` (as for --metrics-listen) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--metrics-listen {value!r}: expected HOST:PORT")
    return host, int(port)


def check_metrics(values: dict) -> None:
    """`--metrics-listen` and `--metrics-bearer` among merged `values`: a non-loopback
    /metrics is behind a bearer (its own, else the self-MCP's)."""
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
