"""Observability: traces, metrics and health, importable from any layer.

Three small modules, each with a do-nothing path that costs a global lookup:

* `agentd.obs.trace` — spans and W3C trace-context propagation; off unless the
  standard `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
  environment is set, then exported as OTLP/HTTP by `agentd.obs.otlp` (loaded
  only then; no dependency).
* `agentd.obs.calls` — one MCP tool call's span, count and latency.
* `agentd.obs.metrics` — process-wide counters, gauges and histograms in a
  tiny registry rendered in the Prometheus text exposition format (no
  dependency: the metric set is small and fixed, and incrementing a dict entry is
  cheaper than any client library's locking).
* `agentd.obs.health` — liveness and readiness (`/healthz`, `/readyz`): checks
  registered by whoever owns the state (the toolbox, the forkserver), and the
  draining flag set at the first signal.

`agentd.obs.http` mounts `/metrics`, `/healthz` and `/readyz` on an aiohttp
application (the self-MCP listener, or the standalone `--metrics-listen` one).
"""

from __future__ import annotations

from agentd.obs import health, metrics, trace

__all__ = ["health", "metrics", "trace"]
