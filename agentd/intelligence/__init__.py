"""Intelligence providers: where the agent's decisions come from.

`make_intelligence(spec, model=...)` picks the provider from `--intelligence`
(`for_config(config)`: the same from a run's Config, every knob it holds):

* `https://host/v1` (or a loopback `http://`): an OpenAI-compatible Chat
  Completions gateway (`agentd.intelligence.openai`);
* `playback:PATH`: the deterministic scripted provider
  (`agentd.intelligence.playback`, format in docs/playback.md).

Anything else is a `ConfigError` (exit 2). Creating a provider has no side
effect (no socket is opened until the first `complete()`).

Tunables that have no flag yet are read from the environment (documented in
docs/agent.md): `AGENTD_INTELLIGENCE_STREAM` (1/0), `AGENTD_INTELLIGENCE_TIMEOUT`
(seconds per request), `AGENTD_INTELLIGENCE_ATTEMPTS`, `AGENTD_INTELLIGENCE_BACKOFF`
(first retry delay, seconds), `AGENTD_INTELLIGENCE_CA` (CA bundle file).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from agentd.config.intelligence import PLAYBACK, Sampling
from agentd.config.model import Config, StreamBounds
from agentd.errors import ConfigError, IntelligenceError
from agentd.intelligence.base import (
    Completion,
    FunctionCall,
    FunctionDef,
    Intelligence,
    IntelligenceUnavailable,
    Message,
    ToolCall,
    ToolDef,
)
from agentd.netaddr import is_loopback_host

__all__ = [
    "Completion",
    "FunctionCall",
    "FunctionDef",
    "Intelligence",
    "IntelligenceUnavailable",
    "Message",
    "ToolCall",
    "ToolDef",
    "for_config",
    "make_intelligence",
    "speaks_http",
]

def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a number") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r}: must be positive")
    return value


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


def speaks_http(spec: str | None) -> bool:
    """Does the provider for `spec` talk HTTP?  Every one but `playback:PATH` does."""
    return not (spec or "").startswith(PLAYBACK)


def make_intelligence(spec: str | None, *, model: str | None = None,
                      stream: bool | None = None, timeout: float | None = None,
                      attempts: int | None = None, backoff: float | None = None,
                      ca_file: str | None = None,
                      sse: StreamBounds | None = None,
                      max_bytes: int | None = None,
                      sampling: Sampling | None = None) -> Intelligence:
    """The provider for `--intelligence SPEC` (raises ConfigError if invalid)."""
    if not spec:
        raise ConfigError("--intelligence is required for a run "
                          "(https://host/v1, a loopback http:// URL, or playback:PATH)")
    if spec.startswith(PLAYBACK):
        from agentd.intelligence.playback import Playback

        path = spec[len(PLAYBACK):]
        if not path:
            raise ConfigError("--intelligence playback:PATH: the path is empty")
        try:
            return Playback(path)
        except IntelligenceError as exc:
            if exc.kind != "playback":
                raise
            raise ConfigError(str(exc)) from None  # a bad file: exit 2
    parts = urlsplit(spec)
    ok = (parts.scheme == "https" and parts.hostname) or (
        parts.scheme == "http" and parts.hostname and is_loopback_host(parts.hostname))
    if not ok:
        raise ConfigError(f"--intelligence {spec!r}: expected https://host/v1, "
                          "a loopback http:// URL, or playback:PATH")
    from agentd.intelligence.openai import (
        DEFAULT_ATTEMPTS,
        DEFAULT_BACKOFF,
        DEFAULT_TIMEOUT,
        OpenAICompatible,
    )

    return OpenAICompatible(
        spec,
        model=model or None,
        stream=stream if stream is not None else _env_bool("AGENTD_INTELLIGENCE_STREAM", False),
        timeout=timeout or _env_float("AGENTD_INTELLIGENCE_TIMEOUT", DEFAULT_TIMEOUT),
        attempts=attempts or int(_env_float("AGENTD_INTELLIGENCE_ATTEMPTS", DEFAULT_ATTEMPTS)),
        backoff=backoff or _env_float("AGENTD_INTELLIGENCE_BACKOFF", DEFAULT_BACKOFF),
        ca_file=ca_file or os.environ.get("AGENTD_INTELLIGENCE_CA") or None,
        sse=sse,
        max_bytes=max_bytes,
        sampling=sampling,
    )


def for_config(config: Config) -> Intelligence:
    """The provider a run's `config` describes: its model, sampling settings, bounds."""
    return make_intelligence(config.intelligence, model=config.model,
                             stream=config.intelligence_stream,
                             timeout=config.intelligence_timeout,
                             attempts=config.intelligence_attempts, sse=config.stream_bounds,
                             max_bytes=config.intelligence_max_bytes, sampling=config.sampling)
