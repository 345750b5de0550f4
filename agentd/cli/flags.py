"""Flags -> one validated, frozen Config: the merge of `--config` and the flags.

Shared by the root command (agentd/cli/main.py) and `agentd auth` (agentd/cli/auth.py),
which registers itself on the root: in `cli.py` it made the two import each
other. Every problem raises `ConfigError` (exit 2, one line) before any socket
is opened or process started.
"""

from __future__ import annotations

from typing import Any

from agentd import secrets
from agentd.agent import images, selftools
from agentd.config.build import build
from agentd.config.endpoints import check_header_secrets, parse_a2a_peer_flag, parse_mcp_flag
from agentd.config.intelligence import gateway, needs_model
from agentd.config.load import load_config_file
from agentd.config.model import LOG_FORMATS, Config
from agentd.config.pool import parse_pool
from agentd.config.serve import check_bearers, parse_serve
from agentd.errors import ConfigError


def parse_log_level(level: Any) -> str | None:
    """``--log-level`` (click reads env AGENTD_LOG_LEVEL for it) or the config
    file's ``log_level``, validated; None when nobody asked. It travels as a value
    (`Config.log_level`, a child's `ChildConfig.log_level`), never through the
    process environment."""
    if level is None:
        return None
    from agentd.log import LEVELS

    norm = level.strip().lower() if isinstance(level, str) else level
    if norm not in LEVELS:
        raise ConfigError(f"--log-level {level!r}: expected debug, info, warning or error")
    return str(norm)


def over_root(root: dict[str, Any], local: dict[str, Any], keys: Any) -> dict[str, Any]:
    """A subcommand's flags (`keys` of `local`) over the root command's, so a run
    flag works before or after the subcommand's name; repeated `--mcp`s add up."""
    flags = dict(root)
    for key in keys:
        value = local.get(key)
        if value is not None and value != ():
            flags[key] = tuple(flags.get(key) or ()) + tuple(value) if key == "mcp" else value
    return flags


def config_from_flags(flags: dict[str, Any], *, needs_instruction: bool = True) -> Config:
    """Merge the config file (if any) and the flags into one frozen Config."""
    flags = dict(flags)
    values: dict[str, Any] = {}
    config_file = flags.pop("config_file", None)
    if config_file:
        values = load_config_file(config_file)
    servers = list(values.pop("mcp", []))
    from_file = {s.name for s in servers}
    for spec in (parse_mcp_flag(v) for v in flags.pop("mcp", ())):
        # a --mcp naming a server of the config file sets its endpoint; the file
        # keeps what a flag cannot say (headers with secrets, CA, required)
        i = next((n for n, s in enumerate(servers) if s.name == spec.name), None)
        if i is None or spec.name not in from_file:
            servers.append(spec)
        else:
            import msgspec

            servers[i] = msgspec.structs.replace(servers[i], url=spec.url)
            from_file.discard(spec.name)  # a second flag for it is a duplicate
    subscribe = list(values.pop("subscribe", [])) + list(flags.pop("subscribe", ()))
    features = [f.strip() for v in (*(values.pop("features", None) or ()),
                                    *flags.pop("features", ())) for f in v.split(",")
                if f.strip()]
    a2a_peers = list(values.pop("a2a_peers", []))
    a2a_peers += [parse_a2a_peer_flag(v) for v in flags.pop("a2a_peer", ())]
    serve_keys = ("serve_mcp", "serve_cert", "serve_key", "serve_client_ca", "serve_bearer")
    serve = {k: flags.pop(k, None) or values.pop(k, None) for k in serve_keys}
    bearers = values.pop("serve_bearers", None)
    if bearers is not None:
        bearers = check_bearers(bearers, flags.get("secrets_dir")
                                    or values.get("secrets_dir") or secrets.DEFAULT_SECRETS_DIR)
    if serve["serve_bearer"]:
        from agentd.log import register_secret

        register_secret(serve["serve_bearer"])
    if flags.get("metrics_bearer"):
        from agentd.log import register_secret

        register_secret(flags["metrics_bearer"])
    if serve["serve_mcp"]:
        values["serve"] = parse_serve(serve["serve_mcp"], serve["serve_cert"],
                                      serve["serve_key"], serve["serve_client_ca"],
                                      serve["serve_bearer"], bearers)
    elif any(serve[k] for k in serve_keys[1:]) or bearers:
        raise ConfigError("--serve-cert/--serve-key/--serve-client-ca/--serve-bearer "
                          "need --serve-mcp")
    pool_id = flags.pop("pool_id", None) or values.pop("pool_id", None)
    pool_peers = list(values.pop("pool_peers", None) or ()) + list(flags.pop("pool_peer", ()))
    pool_key = flags.pop("pool_key", None) or values.pop("pool_key", None)
    pool_dns = flags.pop("pool_dns", None) or values.pop("pool_dns", None)
    dns_interval = flags.pop("pool_dns_interval", None)  # 0 is a value, refused: no `or`
    dns_interval = values.pop("pool_dns_interval", None) if dns_interval is None else dns_interval
    if dns_interval is not None and not pool_dns:
        raise ConfigError("--pool-dns-interval needs --pool-dns")
    sub_timeout, dead_after = (  # 0 is refused, not defaulted: no `or`
        values.pop(k, None) if (v := flags.pop(k, None)) is None else v
        for k in ("pool_subscribe_timeout", "pool_dead_after"))
    pool = parse_pool(pool_id, pool_peers, pool_key, values.get("serve"),
                      flags.get("secrets_dir") or values.get("secrets_dir")
                      or secrets.DEFAULT_SECRETS_DIR, pool_dns, dns_interval, sub_timeout,
                      dead_after)
    if pool is not None:
        values["pool"] = pool
    if flags.get("log_format") not in (None, *LOG_FORMATS):
        raise ConfigError(f"--log-format {flags['log_format']!r}: expected auto, json or text")
    values.update({k: v for k, v in flags.items() if v is not None})
    gateway(values)  # flag > file > AGENTD_* env > OPENAI_* env
    values["log_level"] = parse_log_level(values.get("log_level"))
    values["self_tools"] = selftools.check_offer(values.get("self_tools", "all"))
    values["tool_images"] = images.check_mode(values.get("tool_images", "parts"))
    values["mcp"] = servers
    secrets_dir = values.get("secrets_dir") or secrets.DEFAULT_SECRETS_DIR
    check_header_secrets(servers, secrets_dir)
    values["subscribe"] = subscribe
    values["features"] = tuple(dict.fromkeys(features))
    values["a2a_peers"] = a2a_peers
    return build(values, needs_instruction=needs_instruction)


def check_intelligence(config: Config) -> None:
    """A bad or missing --intelligence, or an HTTP gateway without a model, is exit 2
    with the one usage line, like every other usage error, before logging starts and
    before any MCP handshake (building a provider opens nothing)."""
    from agentd.intelligence import for_config

    for_config(config)
    needs_model(config.intelligence, config.model)
