"""Metrics and health probes of a running agentd.

Debian's Prometheus scrapes a serving agentd; `/readyz` and `--metrics-listen`
are read over real loopback sockets.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import urllib.error
import urllib.request

import pytest
from agentd_proc import agentd_env, start_agentd
from obs_peers import Prometheus, prometheus_bin
from obs_worker import TOKEN, http_get, spawn_served, start_worker, write_book
from peers import free_port, python_peer, require_modules
from waiting import until


def test_refusal_caps_are_a_small_fixed_set() -> None:
    import msgspec

    from agentd.agent.subagents import SpawnRequest
    from agentd.tree.admission import CallerView, TreeView, admit

    tree = TreeView(max_depth=4, max_children=16, max_subagents=256, live=0, tokens=0,
                    ceiling=50000)
    caller = CallerView(handle="0.2", running=True, scope=frozenset(), live_children=0,
                        minted=0)

    def cap(tree=tree, handle="0.2", caller=caller, request=SpawnRequest("x")):
        return admit(tree, handle, caller, request).cap

    assert cap(handle="0.2.1.3") == "max_depth"
    assert cap(tree=msgspec.structs.replace(tree, tokens=50000)) == "token_ceiling"
    assert cap(request=SpawnRequest("x", tool_scope=("x",))) == "tool_scope"
    assert cap(caller=None) == "not_running"
    assert cap(tree=msgspec.structs.replace(tree, closing=True)) == "shutting_down"
    assert cap(request=SpawnRequest("x", mode="x")) == "mode"  # type: ignore[arg-type]


# ------------------------------------------------------------------ metrics

def test_exposition_format_units() -> None:
    from agentd.obs.metrics import Counter, Gauge, Histogram, Registry

    reg = Registry()
    c = reg.add(Counter("x_total", "Things.", ("kind",)))
    g = reg.add(Gauge("y", "Level."))
    h = reg.add(Histogram("z_seconds", "Latency.", ("op",), buckets=(0.1, 1.0)))
    c.inc('a"b\\c\nd')
    c.inc("plain", n=2)
    g.source(lambda: {(): 3})
    g.set(4)
    h.observe(0.05, "read")
    h.observe(0.5, "read")
    h.observe(5, "read")
    text = reg.render().decode()
    assert '# TYPE x_total counter' in text
    assert 'x_total{kind="a\\"b\\\\c\\nd"} 1' in text
    assert 'x_total{kind="plain"} 2' in text
    assert "y 7" in text  # the set value plus the source
    assert 'z_seconds_bucket{op="read",le="0.1"} 1' in text
    assert 'z_seconds_bucket{op="read",le="1.0"} 2' in text
    assert 'z_seconds_bucket{op="read",le="+Inf"} 3' in text
    assert 'z_seconds_count{op="read"} 3' in text and 'z_seconds_sum{op="read"} 5.55' in text


async def test_prometheus_scrapes_a_servingstart_worker(agentd_bin, tmp_path) -> None:
    """A real Prometheus scrapes /metrics (behind the listener's bearer) and sees
    a served run's step and end move the counters."""
    binary = prometheus_bin()
    book = write_book(tmp_path, [{"name": "quick", "match": "[quick]",
                             "turns": [{"content": "done",
                                        "usage": {"prompt_tokens": 4, "completion_tokens": 6}}]},
                            {"name": "worker", "turns": [{"content": "idle"}]}])
    port = free_port()
    worker = await start_worker(agentd_bin, book, port)
    try:
        await worker.wait_for_event("reactive.ready")
        base = f"http://127.0.0.1:{port}"
        assert http_get(base + "/metrics")[0] == 401  # same auth as the MCP endpoint
        status, text = http_get(base + "/metrics", bearer=TOKEN)
        assert status == 200 and "agentd_build_info" in text
        with Prometheus(binary, tmp_path / "prom", f"127.0.0.1:{port}", bearer=TOKEN) as prom:
            await prom.wait_value('up{job="agentd"}', 1)  # scraped and parsed
            await prom.wait_value('agentd_subagents_total{status="spawned"} or vector(0)', 0)
            body = await spawn_served(base + "/mcp", "[quick] answer")
            assert body["status"] == "completed"
            await prom.wait_value('agentd_subagents_total{status="completed"}', 1)
            await prom.wait_value("agentd_loop_steps_total", 1)
            await prom.wait_value('sum(agentd_tokens_total{model="playback"})', 10)
            await prom.wait_value("agentd_subagents_live", 0)
            await prom.wait_value('sum(agentd_control_frames_total) > bool 0', 1)
    finally:
        worker.signal(signal.SIGTERM)
        done = await worker.done()
    assert done.rc == 130, done.stderr
    assert TOKEN not in done.stderr


# ------------------------------------------------------------------ health

async def test_readyz_goes_false_at_the_start_of_a_drain(agentd_bin, tmp_path) -> None:
    """/readyz answers 503 "draining" from the first signal while the in-flight
    wake finishes; /healthz stays 200; the drain then ends with exit 130."""
    require_modules("mcp")
    book = write_book(tmp_path, [{"name": "worker", "repeat_last": True,
                             "turns": [{"delay": 6, "content": "woke"}]}])
    port = free_port()
    with python_peer("sdk_servers.py") as sdk:
        worker = await start_agentd(agentd_bin, [
            "--instruction", "[worker] watch", "--intelligence", f"playback:{book}",
            "--mcp", f"sdk={sdk.url}", "--mode", "reactive", "--subscribe", "mem://watched",
            "--serve-mcp", f"http://127.0.0.1:{port}", "--drain-timeout", "30"],
            env=agentd_env(OTEL_SDK_DISABLED="true"))
        try:
            await worker.wait_for_event("reactive.ready")
            base = f"http://127.0.0.1:{port}"
            # ready, and what it watches and how (docs/operations.md)
            assert http_get(base + "/readyz") == (200, "ready\nwatch subscribe sdk mem://watched\n")
            assert http_get(base + "/healthz") == (200, "ok\n")
            await asyncio.to_thread(urllib.request.urlopen, urllib.request.Request(
                sdk.url.removesuffix("/mcp") + "/update?value=v1", method="POST"), timeout=10)
            await worker.wait_for_event("reactive.wake")
            assert http_get(base + "/readyz")[0] == 200  # busy is still ready
            worker.signal(signal.SIGTERM)
            async def draining() -> str | None:
                status, text = await asyncio.to_thread(http_get, base + "/readyz")
                return text if status == 503 else None
            text = await until(draining, limit=30, what="/readyz answers 503")
            assert text.startswith("not ready: draining")
            assert text.endswith("\nwatch subscribe sdk mem://watched\n")
            assert http_get(base + "/healthz")[0] == 200  # alive while it drains
        finally:
            done = await worker.done()
    assert done.rc == 130, done.stderr
    assert done.events("reactive.draining")


async def test_metrics_listen_in_task_mode(agentd_bin, tmp_path) -> None:
    """`--metrics-listen`: a task run with no MCP listener still has /metrics and
    the probes on their own loopback listener, for the run's whole life."""
    book = write_book(tmp_path, [{"turns": [{"delay": 30, "content": "never"}]}])
    port = free_port()
    config = tmp_path / "agentd.toml"  # the /metrics bearer as a secret reference
    config.write_text('metrics_bearer = "{{secret:METRICS}}"\n')
    agent = await start_agentd(agentd_bin, [
        "--instruction", "think", "--intelligence", f"playback:{book}", "--config", str(config),
        "--metrics-listen", f"127.0.0.1:{port}"],
        env=agentd_env(OTEL_SDK_DISABLED="true", AGENTD_SECRET_METRICS=TOKEN))
    try:
        await agent.wait_for_event("obs.metrics.listening")
        base = f"http://127.0.0.1:{port}"
        assert http_get(base + "/metrics")[0] == 401
        status, text = http_get(base + "/metrics", bearer=TOKEN)
        assert status == 200 and 'agentd_build_info{version="' in text
        assert http_get(base + "/readyz") == (200, "ready\n")
        assert http_get(base + "/healthz") == (200, "ok\n")
    finally:
        agent.signal(signal.SIGTERM)
        done = await agent.done()
    assert done.rc == 130 and done.result["status"] == "interrupted"
    assert TOKEN not in done.stderr


@pytest.mark.parametrize(("argv", "needle"), [
    (["--metrics-listen", "nope"], "expected HOST:PORT"),
    (["--metrics-listen", "0.0.0.0:9464"], "needs --metrics-bearer"),
    (["--metrics-bearer", "t0ken-x"], "needs --metrics-listen"),
])
def test_metrics_listen_usage_errors(agentd_bin, argv, needle) -> None:
    proc = subprocess.run([agentd_bin, "--instruction", "x", "--intelligence",
                           "playback:/nonexistent", *argv], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and needle in proc.stderr and proc.stdout == ""

