"""Metrics: a tiny process-wide registry in the Prometheus text format (0.0.4).

Why not `prometheus-client`: the metric set is small and fixed, everything
runs on one event-loop thread, and a counter here is one dict update, with no
lock, no dependency and nothing to configure. Metrics are always on; they cost
nothing until something increments them and are only rendered when `/metrics`
is scraped.

Labels are positional (`RUNS.inc("completed")`), in the order declared. Label
values come from configuration (server, model names) or from small fixed sets
(statuses, outcomes, caps): never from a peer's free text, so the series count
stays bounded.

The metric set (docs/operations.md has the table): runs by status, loop steps,
tokens by model and kind, intelligence calls, MCP calls by
server/tool/outcome with a latency histogram, live and total subagents by
status, spawn refusals by cap, reactive wakes and coalesced updates,
control-wire frames by direction, forkserver restarts.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable

from agentd.output import Usage

__all__ = ["REGISTRY", "Counter", "Gauge", "Histogram", "Registry", "render"]

_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: tuple[str, ...], extra: str = "") -> str:
    parts = [f'{n}="{_escape(str(v))}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _num(v: float) -> str:
    if v == math.inf:
        return "+Inf"
    if isinstance(v, int) or v.is_integer():
        return str(int(v))
    return repr(v)


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help: str, labels: Iterable[str] = ()) -> None:
        self.name = name
        self.help = help
        self.labelnames = tuple(labels)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def lines(self) -> list[str]:
        return []


class Counter(_Metric):
    """A monotonically increasing count, per label set."""

    kind = "counter"

    def __init__(self, name: str, help: str, labels: Iterable[str] = ()) -> None:
        super().__init__(name, help, labels)
        self.values: dict[tuple[str, ...], float] = {}
        if not self.labelnames:
            self.values[()] = 0

    def inc(self, *labels: str, n: float = 1) -> None:
        v = self.values
        v[labels] = v.get(labels, 0) + n

    def get(self, *labels: str) -> float:
        return self.values.get(labels, 0)

    def lines(self) -> list[str]:
        return [f"{self.name}{_labels(self.labelnames, k)} {_num(v)}"
                for k, v in sorted(self.values.items())]


class Gauge(_Metric):
    """A value that goes up and down; or a callback read at scrape time."""

    kind = "gauge"

    def __init__(self, name: str, help: str, labels: Iterable[str] = ()) -> None:
        super().__init__(name, help, labels)
        self.values: dict[tuple[str, ...], float] = {}
        self.sources: list[Callable[[], dict[tuple[str, ...], float]]] = []

    def set(self, value: float, *labels: str) -> None:
        self.values[labels] = value

    def inc(self, *labels: str, n: float = 1) -> None:
        self.values[labels] = self.values.get(labels, 0) + n

    def dec(self, *labels: str, n: float = 1) -> None:
        self.values[labels] = self.values.get(labels, 0) - n

    def source(self, fn: Callable[[], dict[tuple[str, ...], float]]) -> Callable[[], None]:
        """Read `fn()` at each scrape (summed with the others); returns its remover."""
        self.sources.append(fn)

        def remove() -> None:
            if fn in self.sources:
                self.sources.remove(fn)
        return remove

    def snapshot(self) -> dict[tuple[str, ...], float]:
        out = dict(self.values)
        for fn in list(self.sources):
            try:
                got = fn()
            except Exception:  # a source's bug must not break the scrape
                continue
            for k, v in got.items():
                out[k] = out.get(k, 0) + v
        return out

    def lines(self) -> list[str]:
        return [f"{self.name}{_labels(self.labelnames, k)} {_num(v)}"
                for k, v in sorted(self.snapshot().items())]


class Histogram(_Metric):
    """Observations in cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(self, name: str, help: str, labels: Iterable[str] = (),
                 buckets: Iterable[float] = _DEFAULT_BUCKETS) -> None:
        super().__init__(name, help, labels)
        self.buckets = tuple(sorted(buckets))
        self.series: dict[tuple[str, ...], list[float]] = {}  # counts..., sum, count

    def observe(self, value: float, *labels: str) -> None:
        s = self.series.get(labels)
        if s is None:
            s = self.series[labels] = [0.0] * (len(self.buckets) + 2)
        i = bisect_left(self.buckets, value)  # the first edge >= value (le is inclusive)
        if i < len(self.buckets):
            s[i] += 1
        s[-2] += value
        s[-1] += 1

    def lines(self) -> list[str]:
        out = []
        for k, s in sorted(self.series.items()):
            acc = 0.0
            for i, edge in enumerate(self.buckets):
                acc += s[i]
                le = f'le="{float(edge)!r}"'
                out.append(f"{self.name}_bucket{_labels(self.labelnames, k, le)} {_num(acc)}")
            inf = _labels(self.labelnames, k, 'le="+Inf"')
            out.append(f"{self.name}_bucket{inf} {_num(s[-1])}")
            out.append(f"{self.name}_sum{_labels(self.labelnames, k)} {_num(s[-2])}")
            out.append(f"{self.name}_count{_labels(self.labelnames, k)} {_num(s[-1])}")
        return out


class Registry:
    def __init__(self) -> None:
        self.metrics: dict[str, _Metric] = {}

    def add(self, metric: _Metric) -> _Metric:
        self.metrics[metric.name] = metric
        return metric

    def render(self) -> bytes:
        lines: list[str] = []
        for m in self.metrics.values():
            lines.extend(m.header())
            lines.extend(m.lines())
        return ("\n".join(lines) + "\n").encode()


REGISTRY = Registry()
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _c(name: str, help: str, *labels: str) -> Counter:
    m = Counter(name, help, labels)
    REGISTRY.add(m)
    return m


def _g(name: str, help: str, *labels: str) -> Gauge:
    m = Gauge(name, help, labels)
    REGISTRY.add(m)
    return m


def _h(name: str, help: str, *labels: str) -> Histogram:
    m = Histogram(name, help, labels)
    REGISTRY.add(m)
    return m


# ------------------------------------------------------------------ the metric set
RUNS = _c("agentd_runs_total", "Runs of this process ended, by status (a reactive "
          "worker's run ends once, at its drain; its wakes are agentd_reactive_wakes_total).",
          "status")
STEPS = _c("agentd_loop_steps_total",
           "Loop steps (answers of the intelligence), the root's and every brokered subagent's.")
TOKENS = _c("agentd_tokens_total", "Tokens reported by the intelligence, by model and kind "
            "(prompt|completion), the root's and every brokered subagent's.", "model", "kind")
INTELLIGENCE = _c("agentd_intelligence_calls_total",
                  "Calls of the intelligence, by model and outcome (ok|error).",
                  "model", "outcome")
INTELLIGENCE_SECONDS = _h("agentd_intelligence_call_duration_seconds",
                          "Duration of intelligence calls.", "model")
MCP_CALLS = _c("agentd_mcp_calls_total",
               "MCP tools/call requests, by server, tool and outcome "
               "(ok|tool_error|fault|cancelled|idle_limit|total_limit).", "server", "tool",
               "outcome")
MCP_SECONDS = _h("agentd_mcp_call_duration_seconds",
                 "Latency of MCP tools/call requests.", "server", "tool")
SUBAGENTS_LIVE = _g("agentd_subagents_live", "Subagents running now.")
SUBAGENTS = _c("agentd_subagents_total",
               "Subagents by status: spawned, resumed (a journaled run an earlier process "
               "held, driven again), and each terminal status.", "status")
REFUSALS = _c("agentd_spawn_refusals_total", "Spawns refused, by the cap that refused them.",
              "cap")
SERVED = _c("agentd_served_requests_total",
            "Requests this process's MCP server (--serve-mcp) answered, by JSON-RPC method "
            "(one it does not serve: other) and outcome (ok|error|internal_error), and those "
            "its guard refused before reading them (method \"-\", outcome "
            "unauthorized: the 401s, or forbidden: the 403s).", "method", "outcome")
WAKES = _c("agentd_reactive_wakes_total", "Reactive wakes of the loop.")
COALESCED = _c("agentd_reactive_coalesced_total",
               "Resource updates folded into a wake that was already due.")
FRAMES = _c("agentd_control_frames_total", "Control-wire frames, by direction (in|out).",
            "direction")
FORKSERVER_RESTARTS = _c("agentd_forkserver_restarts_total",
                         "Forkservers restarted after they died.")
SPANS_DROPPED = _c("agentd_trace_spans_dropped_total",
                   "Finished spans not exported, by reason (queue_full: past "
                   "OTEL_BSP_MAX_QUEUE_SIZE; export_failed: the collector refused or "
                   "was unreachable).", "reason")
for _reason in ("queue_full", "export_failed"):  # the exporter adds to these
    SPANS_DROPPED.values[(_reason,)] = 0
POOL_PEERS = _g("agentd_pool_peers", "Pool peers as this worker sees them, by status "
                "(alive|suspect|dead); absent without --pool-* flags.", "status")
POOL_RELAYED = _c("agentd_pool_relayed_total", "Handle operations relayed between pool "
                  "workers, by direction (out: to the owner; in: from a peer) and op "
                  "(status|send|cancel|read|spawn|wait; session: a 2025-11-25 "
                  "session request proxied out).", "direction", "op")
READY = _g("agentd_ready", "1 when /readyz answers ready.")
INFO = _g("agentd_build_info", "Always 1; the labels tell the version.", "version")


def render() -> bytes:
    return REGISTRY.render()


def turn(model: str, usage: Usage, seconds: float) -> None:
    """One answer of the intelligence (a loop step): steps, calls, latency, tokens."""
    STEPS.inc()
    INTELLIGENCE.inc(model, "ok")
    INTELLIGENCE_SECONDS.observe(seconds, model)
    prompt = usage.prompt_tokens
    completion = usage.completion_tokens
    if prompt:
        TOKENS.inc(model, "prompt", n=prompt)
    if completion:
        TOKENS.inc(model, "completion", n=completion)


def _build_info() -> dict[tuple[str, ...], float]:
    import agentd  # the version resolves at the first scrape, not at import (lean children)

    return {(agentd.__version__,): 1}


INFO.source(_build_info)
