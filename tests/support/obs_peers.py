"""Real peers for the observability tests: an OTLP/HTTP receiver and Prometheus.

* `OtlpReceiver` — an aiohttp server on loopback accepting `POST /v1/traces`
  and decoding each body with the official `opentelemetry-proto` types
  (`ExportTraceServiceRequest`), the way a collector does.
* `prometheus_bin()` — Debian's `prometheus` binary, installed with apt-get
  when missing (as root); a test that cannot have it skips, or fails under
  CI=true (`peers.unavailable`).
* `Prometheus` — a real Prometheus server scraping one target, queried over
  its HTTP API.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from peers import PeerProcess, free_port, unavailable
from waiting import until, until_sync

_apt_lock = threading.Lock()


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    attrs: dict[str, Any]
    service: str = ""


@dataclass
class OtlpReceiver:
    """`async with OtlpReceiver() as r:` -> `r.endpoint` for OTEL_EXPORTER_OTLP_ENDPOINT."""

    spans: list[Span] = field(default_factory=list)
    requests: int = 0
    content_types: set[str] = field(default_factory=set)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    headers: list[dict[str, str]] = field(default_factory=list)
    # set by a test: each answer waits for it (spans recorded first), so a POST
    # stays in flight for as long as the test needs
    answer: asyncio.Event | None = None

    async def __aenter__(self) -> OtlpReceiver:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        async def traces(request: web.Request) -> web.Response:
            body = await request.read()
            msg = ExportTraceServiceRequest()
            msg.ParseFromString(body)
            self.requests += 1
            self.content_types.add(request.headers.get("Content-Type", ""))
            self.headers.append({k.lower(): v for k, v in request.headers.items()})
            for rs in msg.resource_spans:
                service = next((a.value.string_value for a in rs.resource.attributes
                                if a.key == "service.name"), "")
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        self.spans.append(Span(
                            trace_id=sp.trace_id.hex(), span_id=sp.span_id.hex(),
                            parent_id=sp.parent_span_id.hex(), name=sp.name,
                            attrs={a.key: _value(a.value) for a in sp.attributes},
                            service=service))
            self.arrived.set()
            if self.answer is not None:
                await self.answer.wait()
            return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                                content_type="application/x-protobuf")

        app = web.Application()
        app.router.add_post("/v1/traces", traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]

    async def wait_for(self, name: str, *, count: int = 1, limit: float = 30.0) -> None:
        async with asyncio.timeout(limit):
            while len(self.named(name)) < count:
                self.arrived.clear()
                await self.arrived.wait()


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def prometheus_bin() -> str:
    """The `prometheus` binary, installing Debian's package when it is missing."""
    with _apt_lock:
        path = shutil.which("prometheus")
        if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600)
            subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "prometheus"],
                           env=env, capture_output=True, timeout=900)
            path = shutil.which("prometheus")
    if path is None:
        unavailable("Debian's prometheus package is not installed and could not be")
        raise AssertionError  # unreachable: unavailable() skips or fails
    return path


class Prometheus(PeerProcess):
    """A real Prometheus scraping `target` (host:port) every second."""

    def __init__(self, binary: str, tmp: Path, target: str, *, bearer: str | None = None,
                 metrics_path: str = "/metrics") -> None:
        port = free_port()
        tmp.mkdir(parents=True, exist_ok=True)
        lines = ["global:", "  scrape_interval: 1s", "  evaluation_interval: 1s",
                 "scrape_configs:", "  - job_name: agentd",
                 f"    metrics_path: {metrics_path}", "    scrape_timeout: 1s"]
        if bearer:
            token = tmp / "bearer"
            token.write_text(bearer)
            lines += ["    authorization:", "      type: Bearer",
                      f"      credentials_file: {token}"]
        lines += ["    static_configs:", f"      - targets: ['{target}']"]
        config = tmp / "prometheus.yml"
        config.write_text("\n".join(lines) + "\n")
        super().__init__([binary, f"--config.file={config}",
                          f"--storage.tsdb.path={tmp / 'data'}",
                          f"--web.listen-address=127.0.0.1:{port}"], port, cwd=tmp)

    def start(self, *, limit: float = 60.0) -> Prometheus:
        """Started, and ready: the port opens before the TSDB is (503 until /-/ready)."""
        super().start(limit=limit)

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready",
                                            timeout=5) as resp:
                    return resp.status == 200
            except (urllib.error.URLError, OSError):
                return False
        try:
            until_sync(ready, limit=limit, step=0.2, what="prometheus ready")
        except AssertionError:
            self.stop()
            raise
        return self

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    async def wait_value(self, promql: str, want: float, *, limit: float = 60.0) -> float:
        """Poll the query until its first sample equals `want` (or fail after `limit`)."""
        async def reached() -> bool:
            try:
                result = await asyncio.to_thread(self.query, promql)
            except urllib.error.HTTPError as exc:
                if exc.code != 503:  # 503: still starting (or reloading)
                    raise
                return False
            return bool(result) and float(result[0]["value"][1]) == want
        await until(reached, limit=limit, step=0.5, what=f"{promql} == {want} (scraped)")
        return want
