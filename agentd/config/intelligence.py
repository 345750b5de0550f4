"""The model's configuration, the way SDKs and harnesses set it (docs/cli.md, "The model").

Three things, each resolved in exactly one place so that every command (a run,
`agentd batch`, `agentd acp`) reads them alike:

* where the gateway is and which model: `--intelligence` / `--model`, else the
  config file's `intelligence` / `model`, else env `AGENTD_INTELLIGENCE` /
  `AGENTD_MODEL`, else `OPENAI_BASE_URL` (the variable every OpenAI SDK, inspect's
  agent bridge and Harbor set).  `OPENAI_MODEL` is not read: no SDK defines it, and
  a model picked up from an unrelated variable would be chosen silently;
* the gateway's key: env `AGENTD_INTELLIGENCE_KEY`, else `OPENAI_API_KEY` -- the
  operator's environment only, never a flag (it would show in `ps`), a file key,
  the model's or a server's text.  `gateway_key` says which variable gave it, so
  a 401 can name the variable to set without ever showing the value;
* the sampling settings (`Sampling`): flags or file keys, validated against the
  documented ranges, sent as given and absent when not set.  A subagent's
  completions go through the root's provider (agentd.tree.broker), so it uses
  the same settings by construction; the spawn tool has no way to change them.

Every problem is a `ConfigError` (exit 2, one line) before any side effect.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from agentd.errors import ConfigError

KEY_ENV = "AGENTD_INTELLIGENCE_KEY"
KEY_ENVS = (KEY_ENV, "OPENAI_API_KEY")
# (config value name, its own env, the OpenAI-style fallback env or None)
GATEWAY_ENVS = (("intelligence", "AGENTD_INTELLIGENCE", "OPENAI_BASE_URL"),
                ("model", "AGENTD_MODEL", None))
PLAYBACK = "playback:"
DEFAULT_INTELLIGENCE_MAX_BYTES = 64 * 1024 * 1024  # one non-streamed completion's body

# Documented ranges (docs/cli.md "Sampling settings"): the Chat Completions API's own.
TEMPERATURE_RANGE = (0.0, 2.0)
TOP_P_RANGE = (0.0, 1.0)
SEED_RANGE = (-(2 ** 63), 2 ** 63 - 1)
MAX_TOKENS_RANGE = (1, 2 ** 31 - 1)
MODEL_PARAMS_BYTES = 16 * 1024  # --model-param's JSON object, encoded
TOOL_CHOICES = ("auto", "none", "required")
TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a name as offered to the model
# body fields agentd sets itself: a --model-param naming one would send it twice
OWN_FIELDS = ("messages", "tools", "model", "stream", "stream_options")
SAMPLING_KEYS = ("temperature", "top_p", "seed", "max_tokens", "tool_choice",
                 "parallel_tool_calls", "model_params")


class Sampling(msgspec.Struct, frozen=True, omit_defaults=True):
    """The request body's sampling fields; None: not sent (the gateway's default).
    `model_params` is an object of provider-specific fields merged into the body."""

    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    tool_choice: str | None = None  # auto | none | required | a tool's offered name
    parallel_tool_calls: bool | None = None
    model_params: dict[str, Any] | None = None

    def fields(self) -> dict[str, Any]:
        """The body fields, in the Chat Completions API's forms."""
        out: dict[str, Any] = {k: v for k, v in msgspec.structs.asdict(self).items()
                               if v is not None and k != "model_params"}
        choice = self.tool_choice
        if choice is not None and choice not in TOOL_CHOICES:
            out["tool_choice"] = {"type": "function", "function": {"name": choice}}
        return {**out, **(self.model_params or {})}


def _number(key: str, value: Any, low: float, high: float, *, integer: bool) -> Any:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or (
            not integer and not math.isfinite(value)) or not low <= value <= high:
        what = "an integer" if integer else "a number"
        raise ConfigError(f"{_flag(key)} {value!r}: expected {what} in "
                          f"[{low:g}, {high:g}] ({key} in --config)")
    return value if integer else float(value)


def _flag(key: str) -> str:
    return "--model-param" if key == "model_params" else f"--{key.replace('_', '-')}"


def model_params(value: Any) -> dict[str, Any] | None:
    """`--model-param JSON` (text) or the file's `model_params` table, checked."""
    if value is None:
        return None
    if isinstance(value, str):
        if len(value.encode()) > MODEL_PARAMS_BYTES:
            raise ConfigError(f"--model-param: more than {MODEL_PARAMS_BYTES} bytes")
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"--model-param: not JSON ({exc}); expected an object such as "
                              "'{\"reasoning_effort\":\"high\"}'") from None
    if not isinstance(value, dict):
        raise ConfigError("--model-param: expected a JSON object such as "
                          "'{\"reasoning_effort\":\"high\"}' (model_params table in --config)")
    if len(msgspec.json.encode(value)) > MODEL_PARAMS_BYTES:
        raise ConfigError(f"--model-param: more than {MODEL_PARAMS_BYTES} bytes")
    for key in value:
        if key in OWN_FIELDS:
            raise ConfigError(f"--model-param: {key!r} is set by agentd itself "
                              f"(refused: {', '.join(OWN_FIELDS)})")
        if key in SAMPLING_KEYS:
            raise ConfigError(f"--model-param: {key!r} has its own flag: use {_flag(key)}")
    return dict(value)


def sampling(values: Mapping[str, Any]) -> Sampling:
    """The sampling settings among merged `values` (flags over the file), validated."""
    got = {k: values[k] for k in SAMPLING_KEYS if values.get(k) is not None}
    if "temperature" in got:
        got["temperature"] = _number("temperature", got["temperature"], *TEMPERATURE_RANGE,
                                     integer=False)
    if "top_p" in got:
        got["top_p"] = _number("top_p", got["top_p"], *TOP_P_RANGE, integer=False)
    if "seed" in got:
        got["seed"] = _number("seed", got["seed"], *SEED_RANGE, integer=True)
    if "max_tokens" in got:
        got["max_tokens"] = _number("max_tokens", got["max_tokens"], *MAX_TOKENS_RANGE,
                                    integer=True)
    choice = got.get("tool_choice")
    if choice is not None and not (isinstance(choice, str) and (
            choice in TOOL_CHOICES or TOOL_NAME_RE.fullmatch(choice))):
        raise ConfigError(f"--tool-choice {str(choice)[:80]!r}: expected auto, none, required "
                          "or a tool's name as offered to the model (server__tool)")
    if not isinstance(got.get("parallel_tool_calls", False), bool):
        raise ConfigError("parallel_tool_calls in --config: expected true or false")
    got["model_params"] = model_params(got.get("model_params"))
    return Sampling(**got)


def gateway(values: dict[str, Any], env: Mapping[str, str] | None = None) -> None:
    """Fill `intelligence` and `model` in `values` (flags over the file already) from
    the environment where neither set them: AGENTD_* first, then OPENAI_*."""
    env = os.environ if env is None else env
    for key, own, fallback in GATEWAY_ENVS:
        if values.get(key):
            continue
        value = env.get(own) or (env.get(fallback) if fallback else None) or None
        if value:
            values[key] = value.strip()


def needs_model(spec: str | None, model: str | None) -> None:
    """An HTTP gateway is asked for a model by name: without one, OpenAI, LiteLLM and
    most gateways refuse every request, found only after every MCP handshake."""
    if spec and not spec.startswith(PLAYBACK) and not model:
        raise ConfigError(f"--intelligence {spec}: no model configured: set --model NAME "
                          "(or env AGENTD_MODEL, or model = \"NAME\" in --config)")


def gateway_key(env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(the gateway's key, the variable that gave it), or (None, None)."""
    env = os.environ if env is None else env
    for name in KEY_ENVS:
        if env.get(name):
            return env[name], name
    return None, None


def key_hint(sent: bool, source: str | None) -> str:
    """What a 401/403 from the gateway tells the operator to do (never the key)."""
    if not sent:
        return (f"no key was sent: set env {KEY_ENV} (or OPENAI_API_KEY) to the "
                "gateway's API key")
    whence = f"from env {source} " if source else ""
    return f"the key {whence}was refused: check it is the gateway's API key"
