"""Secret references: `{{secret:NAME}}` in config values, resolved only when used.

A value comes from env `AGENTD_SECRET_<NAME>` or the file `<secrets_dir>/<NAME>`
and is registered for log redaction the moment it is read, so no later log line,
trace attribute or child's environment can carry it in clear. A leaf (it needs
only the error tree and the log), so the config, the OAuth provider and the
listeners resolve references by the one rule.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from agentd import log as _log
from agentd.errors import ConfigError

__all__ = ["DEFAULT_SECRETS_DIR", "SECRET_RE", "resolve_secret", "substitute"]

SECRET_RE = re.compile(r"\{\{secret:([A-Za-z0-9_.-]+)\}\}")
DEFAULT_SECRETS_DIR = "/run/secrets/agentd"


def resolve_secret(name: str, secrets_dir: str = DEFAULT_SECRETS_DIR) -> str:
    """A secret's value from env AGENTD_SECRET_<NAME> or <secrets_dir>/<NAME>;
    unset is a ConfigError (exit 2) naming both places."""
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


def substitute(text: str, secrets_dir: str = DEFAULT_SECRETS_DIR) -> str:
    """``text`` with every ``{{secret:NAME}}`` replaced by its value."""
    return SECRET_RE.sub(lambda m: resolve_secret(m.group(1), secrets_dir), text)
