"""The `--config` TOML file, read into plain values for `agentd.config.build`.

Only the root reads a file (a subagent's config comes over the control wire).
The file is the operator's, trusted like the flags, and checked as closely:
a key no flag names is refused, and each subsystem checks its own tables and
keys here, before anything merges them with the flags (`endpoints`: the
`mcp_servers` and `a2a_peers` tables; `pool`: the `pool_*` values). Every
problem is a `ConfigError` (exit 2) naming the file.
"""

from __future__ import annotations

from agentd.config import endpoints, pool
from agentd.config.intelligence import SAMPLING_KEYS
from agentd.config.model import Config
from agentd.config.serve import SERVE_FILE_KEYS
from agentd.errors import ConfigError

# Config fields a file does not set by their own name: the nested ones, built from
# the tables and flat keys above them
NESTED_FIELDS = ("mcp", "serve", "pool", "sampling")


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
    servers, peers = endpoints.file_tables(path, data)
    if peers:
        data["a2a_peers"] = peers
    pool.check_file_keys(path, data)
    known = (set(Config.__struct_fields__) - set(NESTED_FIELDS)) \
        | set(SERVE_FILE_KEYS) | set(pool.POOL_FILE_KEYS) | set(SAMPLING_KEYS)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"--config {path}: unknown keys: {', '.join(unknown)}")
    data["mcp"] = servers
    return data
