"""Merged values (the file first, the flags over it) -> one validated, frozen `Config`.

Checked as a whole before any side effect: any problem raises `ConfigError`,
which the CLI turns into exit 2 with one line on stderr -- before a socket is
opened or a process started. What belongs to one subsystem is checked by it
(`endpoints`: the servers and A2A peers; `serve`: the metrics listener;
`intelligence`: the sampling settings); the run's own settings (mode,
subscriptions, spawn, limits, stream bounds, the journal) are checked here.
"""

from __future__ import annotations

import os

import msgspec

from agentd.config import endpoints
from agentd.config.intelligence import SAMPLING_KEYS, sampling
from agentd.config.model import (
    DEFAULT_SSE_EVENT_BYTES,
    DEFAULT_SSE_RETRY_MAX_MS,
    DEFAULT_SSE_RETRY_MIN_MS,
    JOURNAL_RUN_BYTES_BOUNDS,
    MODES,
    SPAWN_MODES,
    Config,
    StreamBounds,
)
from agentd.config.serve import check_metrics
from agentd.errors import ConfigError


def build(values: dict, *, needs_instruction: bool = True) -> Config:
    """Validate merged values (file first, flags over it) into a frozen Config."""
    servers = list(values.pop("mcp", ()))
    endpoints.check_servers(servers)
    a2a_peers = endpoints.check_a2a(values, servers)
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
    check_journal(values)
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
    check_metrics(values)
    clean = {k: v for k, v in values.items() if v is not None and k not in SAMPLING_KEYS}
    try:
        return msgspec.convert({**clean, "mcp": servers, "subscribe": subscribe,
                                "a2a_peers": a2a_peers, "sampling": sampling(values)}, Config,
                               from_attributes=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"config: {exc}") from None



def check_journal(values: dict) -> None:
    """`--journal DIR` and `--journal-run-bytes N` among merged `values`. DIR is made
    absolute here, against the working directory at start, so that the children and
    a restart from elsewhere name the same journal. It is not created here (the
    journal creates it, 0700, when it opens it, after the whole config is checked);
    only something already there that is not a directory is refused."""
    journal = values.get("journal")
    if journal is not None:
        if not isinstance(journal, str) or not journal.strip():
            raise ConfigError(f"--journal {journal!r}: expected a directory path "
                              "(config key `journal`)")
        path = os.path.abspath(journal)
        if os.path.lexists(path) and not os.path.isdir(path):
            raise ConfigError(f"--journal {journal}: exists and is not a directory: name a "
                              "directory, or a path to create (config key `journal`)")
        values["journal"] = path
    size = values.get("journal_run_bytes")
    if size is None:
        return
    low, high = JOURNAL_RUN_BYTES_BOUNDS
    if isinstance(size, bool) or not isinstance(size, int) or not low <= size <= high:
        raise ConfigError(f"--journal-run-bytes {size!r}: must be {low} (1 MiB) to {high} "
                          "(16 GiB) bytes (config key `journal_run_bytes`)")
    if journal is None:
        raise ConfigError("--journal-run-bytes needs --journal (config key `journal`): it "
                          "bounds each run's journal file")
