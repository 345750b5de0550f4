"""Traces of a running tree, and the OTLP exporter that sends them.

Real peers: an OTLP/HTTP receiver decoding the exported protobuf with the
official `opentelemetry-proto` types; an official-SDK MCP server that records the
`_meta.traceparent` of each call (tests/support/obs_servers.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
from agentd_proc import agentd_env, run_agentd
from logcapture import events
from obs_peers import OtlpReceiver
from obs_worker import http_get, write_book
from peers import ROOT, free_port, python_peer, require_modules

SECRET = "s3cret-obs-header-value-91d2"

TREE_SCRIPTS = [
    {"name": "grandchild", "match": "[grandchild]", "turns": [
        {"tool_calls": [{"name": "sdk__traced", "arguments": {}}],
         "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
        {"expect": "traced", "content": "grandchild done"}]},
    {"name": "child", "match": "[child]", "turns": [
        {"tool_calls": [{"name": "agentd__subagent_spawn",
                         "arguments": {"instruction": "[grandchild] call the server"}}]},
        {"expect": "grandchild done", "content": "child done"}]},
    {"name": "root", "match": "[root]", "turns": [
        {"tool_calls": [{"name": "agentd__subagent_spawn",
                         "arguments": {"instruction": "[child] delegate"}}],
         "usage": {"prompt_tokens": 11, "completion_tokens": 2}},
        {"expect": "child done", "content": "root done"}]},
]


# ------------------------------------------------------------------ traces

async def test_one_trace_from_the_root_to_an_mcp_server(agentd_bin, tmp_path) -> None:
    """root -> child -> grandchild -> an SDK MCP server: one trace id, and the
    server's `_meta.traceparent` names the span of the call that reached it."""
    require_modules("opentelemetry.proto", "mcp")
    book = write_book(tmp_path, TREE_SCRIPTS)
    config = tmp_path / "agentd.toml"
    with python_peer("obs_servers.py") as sdk:
        config.write_text(f'[[mcp_servers]]\nname = "sdk"\nurl = "{sdk.url}"\n'
                          'headers = { Authorization = "Bearer {{secret:OBS_TOKEN}}" }\n')
        async with OtlpReceiver() as otlp:
            env = agentd_env(OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint,
                             OTEL_BSP_SCHEDULE_DELAY="100", OTEL_SERVICE_NAME="agentd-test",
                             AGENTD_SECRET_OBS_TOKEN=SECRET)
            done = await run_agentd(agentd_bin, [
                "--instruction", "[root] go", "--intelligence", f"playback:{book}",
                "--config", str(config)], env=env)
            assert done.rc == 0, done.stderr
            await otlp.wait_for("agentd.run")
        status, text = await asyncio.to_thread(http_get, sdk.url.removesuffix("/mcp") + "/seen")
        assert status == 200
        seen = json.loads(text)

    run_id = done.result["run_id"]
    trace_id = hashlib.sha256(run_id.encode()).hexdigest()[:32]  # derived from the run id
    assert {s.trace_id for s in otlp.spans} == {trace_id}
    assert {s.service for s in otlp.spans} == {"agentd-test"}
    assert otlp.content_types == {"application/x-protobuf"}
    by_id = {s.span_id: s for s in otlp.spans}

    def chain(span):
        out = [span]
        while out[-1].parent_id:
            out.append(by_id[out[-1].parent_id])  # every parent was exported too
        return out

    # the SDK server got the live span's context in _meta (SEP-414) and the header
    assert len(seen) == 1
    meta = seen[0]["meta"]
    assert meta == seen[0]["header"]
    version, tid, sid, _flags = meta.split("-")
    assert version == "00" and tid == trace_id
    call = by_id[sid]
    assert call.name == "tools/call traced"
    assert call.attrs["agentd.mcp.server"] == "sdk"
    assert call.attrs["agentd.mcp.outcome"] == "ok"
    names = [(s.name, s.attrs.get("agentd.handle")) for s in chain(call)]
    # the call's ancestry: the grandchild's step, its run, its spawn (asked by the
    # child), the child's step, run and spawn, the root's step and run
    assert ("agentd.child.run", "0.1.1") in names
    assert ("agentd.spawn", "0.1.1") in names
    assert ("agentd.child.run", "0.1") in names
    assert ("agentd.spawn", "0.1") in names
    assert names[-1] == ("agentd.run", None)
    order = [n for n, _ in names]
    assert order.index("agentd.child.run") < order.index("agentd.spawn")

    steps = otlp.named("agent.step")
    assert {s.attrs.get("agentd.handle") for s in steps} == {None, "0.1", "0.1.1"}
    calls = otlp.named("intelligence.call")
    assert {(c.attrs["gen_ai.usage.input_tokens"], c.attrs["gen_ai.usage.output_tokens"])
            for c in calls} >= {(11, 2), (7, 3)}
    root = otlp.named("agentd.run")[0]
    assert root.attrs["agentd.run_id"] == run_id and root.attrs["agentd.status"] == "completed"
    spawns = {s.attrs["agentd.handle"]: s for s in otlp.named("agentd.spawn")}
    assert spawns["0.1.1"].attrs["agentd.depth"] == 3
    assert spawns["0.1.1"].attrs["agentd.status"] == "completed"
    # no secret in any attribute or name (the server's header held one)
    dump = json.dumps([[s.name, s.attrs] for s in otlp.spans], default=str)
    assert SECRET not in dump and "Bearer" not in dump


async def test_tracing_off_loads_nothing_and_exports_nothing(agentd_bin, tmp_path) -> None:
    """Without OTEL_EXPORTER_OTLP_* nothing is set up: no exporter (module or
    thread), no OpenTelemetry import, and a run sends nothing to a listening receiver."""
    code = ("import sys, threading\n"
            "from agentd.obs import trace\n"
            "import agentd.app.run, agentd.tree.supervisor, agentd.mcp.client.facade\n"
            "print(trace.setup('agentd'), trace.current_traceparent(),"
            " any(m.startswith('opentelemetry') for m in sys.modules)"
            " or 'agentd.obs.otlp' in sys.modules,"
            " any(t.name == 'agentd-otlp' for t in threading.enumerate()))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", code],
                                  capture_output=True, text=True, env=env, cwd=ROOT,
                                  timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "None", "False", "False"]

    book = write_book(tmp_path, [{"turns": [{"content": "ok"}]}])
    async with OtlpReceiver() as otlp:
        done = await run_agentd(agentd_bin, ["--instruction", "x", "--intelligence",
                                             f"playback:{book}"],
                                env=agentd_env(OTEL_SDK_DISABLED="true",
                                               OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint))
        assert done.rc == 0, done.stderr
    assert otlp.requests == 0 and not done.events("obs.tracing")


def test_traceparent_parsing() -> None:
    from agentd.obs.trace import parse_traceparent

    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert parse_traceparent(good) == (0x0af7651916cd43dd8448eb211c80319c,
                                       0xb7ad6b7169203331, True)
    assert parse_traceparent(good[:-2] + "00")[2] is False
    assert parse_traceparent("01" + good[2:] + "-future") is not None  # a later version
    for bad in ("", "garbage", good.upper(), "ff" + good[2:], good + "-x",
                "00-" + "0" * 32 + "-b7ad6b7169203331-01",
                "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01"):
        assert parse_traceparent(bad) is None, bad


def _no_otel_env(monkeypatch, **env: str) -> None:
    """No OTEL_* variable of the machine's environment reaches the test; `env` does."""
    for k in list(os.environ):
        if k.startswith("OTEL_"):
            monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


async def test_otlp_exporter_against_a_receiver(monkeypatch) -> None:
    """agentd's own OTLP encoder and exporter, decoded by the official types:
    headers and gzip from the standard environment, a parent chain, attribute
    types, a sampler that drops, and a dead collector that costs nothing."""
    require_modules("opentelemetry.proto")
    from agentd.log import register_secret
    from agentd.obs import trace

    async with OtlpReceiver() as otlp:
        _no_otel_env(monkeypatch)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=blue%20team,x-key=k1")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
        register_secret("hunter2-secret-value")
        assert trace.setup("agentd-unit")
        try:
            with trace.run_span("agentd.run", "run-1") as root:
                with trace.span("tools/call x", kind="client", **{
                        "n": 3, "f": 0.5, "ok": True, "names": ("a", "b"),
                        "note": "token hunter2-secret-value here", "none": None}) as call:
                    tp = trace.current_traceparent()
                    assert trace.headers() == [("traceparent", tp)]
                    assert trace.meta(b'{"a":1}') == json.dumps(
                        {"a": 1, "traceparent": tp}, separators=(",", ":")).encode()
                with pytest.raises(RuntimeError), trace.span("fails"):
                    raise RuntimeError("boom")
            with trace.span("remote child", parent=tp, kind="server"):
                pass
            await asyncio.to_thread(trace.flush)
        finally:
            await asyncio.to_thread(trace.shutdown)
        await otlp.wait_for("remote child")
    assert trace.current_traceparent() is None  # off again after shutdown
    spans = {s.name: s for s in otlp.spans}
    assert set(spans) == {"agentd.run", "tools/call x", "fails", "remote child"}
    run = spans["agentd.run"]
    assert run.trace_id == hashlib.sha256(b"run-1").hexdigest()[:32] and run.parent_id == ""
    x = spans["tools/call x"]
    assert x.parent_id == run.span_id and tp == f"00-{x.trace_id}-{x.span_id}-01"
    assert x.attrs == {"n": 3, "f": 0.5, "ok": True, "names": ["a", "b"],
                       "note": "token *** here"}
    assert spans["fails"].attrs["error.type"] == "RuntimeError"
    assert spans["remote child"].parent_id == x.span_id
    assert {s.service for s in otlp.spans} == {"agentd-unit"}
    h = otlp.headers[0]
    assert h["x-tenant"] == "blue team" and h["x-key"] == "k1"
    assert h["content-encoding"] == "gzip" and h["content-type"] == "application/x-protobuf"
    _ = root, call


def _dead_collector_env(monkeypatch, timeout_ms: str) -> None:
    """No OTEL_* but an OTLP endpoint where nobody listens, and a short timeout."""
    _no_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                       f"http://127.0.0.1:{free_port()}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", timeout_ms)


async def test_otlp_sampler_off_and_a_dead_collector(monkeypatch, logs) -> None:
    from agentd.obs import metrics, trace

    _dead_collector_env(monkeypatch, "300")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    assert trace.setup("x")
    try:
        with trace.span("a"):
            assert trace.current_traceparent().endswith("-00")  # propagated, not sampled
        with trace.span("b", parent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"):
            pass  # a sampled parent is followed
        dropped = metrics.SPANS_DROPPED.get("export_failed")
        await asyncio.to_thread(trace.flush, 5.0)
        # b was tried, and dropped; a was never sampled, so never sent
        assert [e["spans"] for e in events(logs, "obs.otel.export_failed")] == [1]
        assert metrics.SPANS_DROPPED.get("export_failed") == dropped + 1
    finally:
        await asyncio.to_thread(trace.shutdown)


async def test_an_inbound_self_mcp_request_continues_its_callers_trace(monkeypatch) -> None:
    """A request to a served self-MCP is handled in a server span that continues the
    caller's `_meta.traceparent` (SEP-414), or its W3C header when `_meta` has none."""
    require_modules("opentelemetry.proto")
    import aiohttp

    from agentd.agent.subagents import Unavailable
    from agentd.app.serving import serve_self_mcp
    from agentd.config.model import ServeSpec
    from agentd.obs import trace

    t1, p1 = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    t2, p2 = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    async with OtlpReceiver() as otlp:
        _no_otel_env(monkeypatch)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        assert trace.setup("agentd-serve")
        port = free_port()
        runner = await serve_self_mcp(ServeSpec(url=f"http://127.0.0.1:{port}", host="127.0.0.1",
                                                port=port, scheme="http"), Unavailable(),
                                      run_id="served")
        url = f"http://127.0.0.1:{port}/mcp"
        hdrs = {"Content-Type": "application/json",
                "Accept": "application/json, text/event-stream"}
        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(url, json={
                        "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                            "protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "t", "version": "1"}}},
                        headers=hdrs) as r:
                    hdrs = {**hdrs, "Mcp-Session-Id": r.headers["Mcp-Session-Id"],
                            "MCP-Protocol-Version": "2025-11-25"}
                    await r.read()
                async with http.post(url, json={"jsonrpc": "2.0",
                                                "method": "notifications/initialized"},
                                     headers=hdrs):
                    pass
                for i, (meta, extra) in enumerate([
                        ({"traceparent": f"00-{t1}-{p1}-01"}, {}),
                        ({}, {"traceparent": f"00-{t2}-{p2}-01"})]):
                    async with http.post(url, json={
                            "jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {
                                "name": "status", "arguments": {}, "_meta": meta}},
                            headers={**hdrs, **extra}) as r:
                        assert r.status == 200
                        await r.read()
            await asyncio.to_thread(trace.flush)
        finally:
            await runner.stop()
            await asyncio.to_thread(trace.shutdown)
        await otlp.wait_for("mcp.server tools/call", count=2)
    calls = {s.trace_id: s for s in otlp.named("mcp.server tools/call")}
    assert calls[t1].parent_id == p1 and calls[t2].parent_id == p2
    assert calls[t1].attrs == {"mcp.method.name": "tools/call", "gen_ai.tool.name": "status"}
    assert otlp.named("mcp.server initialize")  # a request without context: a new trace


async def test_the_a2a_endpoint_beside_the_self_mcp_continues_a_trace_too(monkeypatch) -> None:
    """The MCP endpoint makes its server spans itself; the other POST route of the
    listener (`--serve-a2a`) is wrapped at start-up and continues a W3C header."""
    import aiohttp

    from agentd.agent.subagents import Unavailable
    from agentd.app.serving import serve_self_mcp
    from agentd.config.model import ServeSpec
    from agentd.obs import trace
    from agentd.served.a2a import PATH

    got: list[tuple] = []  # finished spans, as a subagent hands them up (shutdown flushes)
    assert trace.setup("agentd-serve", mode="relay", relay=got.extend)
    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    port = free_port()
    runner = await serve_self_mcp(ServeSpec(url=f"http://127.0.0.1:{port}", host="127.0.0.1",
                                            port=port, scheme="http"), Unavailable(),
                                  run_id="served", a2a=True)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{port}{PATH}", json={
                    "jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "t"}},
                    headers={"traceparent": f"00-{tid}-00f067aa0ba902b7-01"}) as r:
                await r.read()
            async with http.post(f"http://127.0.0.1:{port}/mcp", json={
                    "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                        "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}},
                    headers={"Accept": "application/json, text/event-stream"}) as r:
                assert r.status == 200
    finally:
        await runner.stop()
        trace.shutdown()
    assert sorted(rec[0] for rec in got) == ["mcp.server initialize", "mcp.server tasks/get"]
    spans = {rec[0]: rec for rec in got}  # one span per request, the MCP one not wrapped twice
    assert spans["mcp.server tasks/get"][1] == tid
    assert spans["mcp.server initialize"][7] == {"mcp.method.name": "initialize"}


async def test_the_loop_exports_full_batches_and_late_spans_without_a_flush(
        monkeypatch) -> None:
    """No thread and no flush: a full batch is POSTed by the event loop that put its
    last span, and a partial one once the schedule delay has passed."""
    require_modules("opentelemetry.proto")
    from agentd.obs.otlp import Exporter

    async with OtlpReceiver() as otlp:
        _no_otel_env(monkeypatch, OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint,
                     OTEL_BSP_MAX_EXPORT_BATCH_SIZE="4", OTEL_BSP_SCHEDULE_DELAY="300")
        threads = {t.name for t in threading.enumerate()}
        exporter = Exporter({"service.name": "x"}, ("agentd", "0"))
        try:
            for i in range(4):
                exporter.put((f"s{i}", 1, i + 1, 0, "internal", 1, 2, {}, None))
            await otlp.wait_for("s3")
            assert otlp.requests == 1 and [s.name for s in otlp.spans] == ["s0", "s1", "s2", "s3"]
            exporter.put(("late", 1, 9, 0, "internal", 1, 2, {}, None))
            await otlp.wait_for("late")
            await exporter.aflush()  # nothing left to send; waits for the answer in flight
            assert otlp.requests == 2 and exporter.exported == 5
            assert {t.name for t in threading.enumerate()} == threads
        finally:
            await exporter.astop()


async def test_a_span_put_while_a_post_is_in_flight_is_sent_without_another_put(
        monkeypatch) -> None:
    """`put` does not call the exporter back while a POST is in flight (its sink
    is the queue's, in C when compiled): when that POST ends, the spans put
    meanwhile get their timer, and go out with no further put nor a flush.

    The collector holds its answer (the POST stays in flight) and the test
    fires the schedule delay's first timer itself, during that POST.
    """
    require_modules("opentelemetry.proto")
    from agentd.obs.otlp import Exporter, SpanQueue

    timers: list[Callable[[], object]] = []

    def timer(loop: asyncio.AbstractEventLoop, delay: float,
              due: Callable[[], object]) -> asyncio.TimerHandle:
        """The loop's timer, but the first is cancelled at once: the test fires it."""
        handle = loop.call_later(delay, due)
        if not timers:
            handle.cancel()
        timers.append(due)
        return handle

    async with OtlpReceiver() as otlp:
        _no_otel_env(monkeypatch, OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint,
                     OTEL_BSP_MAX_EXPORT_BATCH_SIZE="2", OTEL_BSP_SCHEDULE_DELAY="200")
        otlp.answer = asyncio.Event()
        exporter = Exporter({"service.name": "x"}, ("agentd", "0"), timer=timer)
        assert isinstance(exporter.put.__self__, SpanQueue)  # the sink, no Python between
        try:
            for i in range(2):  # the first starts the timer, the second fills the batch
                exporter.put((f"s{i}", 1, i + 1, 0, "internal", 1, 2, {}, None))
            await otlp.wait_for("s1")  # the batch's POST is in flight, its answer held
            assert len(timers) == 1
            timers[0]()  # the timer fires while the POST is in flight: a no-op
            exporter.put(("meanwhile", 1, 9, 0, "internal", 1, 2, {}, None))
            assert len(timers) == 1 and otlp.requests == 1  # nothing woken by the put
            otlp.answer.set()  # the POST ends: it starts the timer of the span put meanwhile
            await otlp.wait_for("meanwhile", limit=10)
            assert otlp.requests == 2 and len(timers) == 2
        finally:
            otlp.answer.set()
            await exporter.astop()


async def test_a_collector_answer_that_never_ends_is_read_to_a_bound(monkeypatch) -> None:
    """A collector that misbehaves on purpose (a 200 whose chunked body never
    ends): the exporter reads at most a bounded head of it, the batch counts as
    taken, and the flood stops when agentd closes the connection."""
    from aiohttp import web

    from agentd.obs.otlp import Exporter

    sent = [0]
    dropped = asyncio.Event()

    async def flood(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "application/x-protobuf"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            while True:
                await resp.write(b"x" * 65536)
                sent[0] += 65536
        except (ConnectionError, RuntimeError):
            pass
        dropped.set()
        return resp

    app = web.Application()
    app.router.add_post("/v1/traces", flood)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]  # the port the OS gave
    try:
        _no_otel_env(monkeypatch, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                     OTEL_BSP_SCHEDULE_DELAY="60000")
        exporter = Exporter({"service.name": "x"}, ("agentd", "0"))
        exporter.put(("s", 1, 1, 0, "internal", 1, 2, {}, None))
        await exporter.astop()
        assert exporter.exported == 1
        await asyncio.wait_for(dropped.wait(), 60)  # hang guard
        assert sent[0] < 8 << 20
    finally:
        await runner.cleanup()


def test_a_full_queue_drops_new_spans_and_counts_them(monkeypatch) -> None:
    """Past OTEL_BSP_MAX_QUEUE_SIZE spans waiting, a span that ends is dropped (never
    waited for, as the OTel SDK drops it) and counted in
    agentd_trace_spans_dropped_total; the spans kept are sent at a flush."""
    from agentd.obs import metrics
    from agentd.obs.otlp import Exporter

    _dead_collector_env(monkeypatch, "200")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "3")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    before = metrics.SPANS_DROPPED.get("queue_full")
    failed_before = metrics.SPANS_DROPPED.get("export_failed")
    exporter = Exporter({"service.name": "x"}, ("agentd", "0"))
    try:
        for i in range(5):
            exporter.put((f"s{i}", 1, i + 1, 0, "internal", 1, 2, {}, None))
        assert exporter.dropped == 2
        assert metrics.SPANS_DROPPED.get("queue_full") - before == 2
        exporter.flush(5.0)  # the three kept go to the dead collector: failed, counted
        assert exporter.failures == 1
        assert metrics.SPANS_DROPPED.get("export_failed") - failed_before == 3
    finally:
        exporter.stop()


async def test_the_exporter_speaks_http_with_collectors_of_every_answer_shape(
        monkeypatch) -> None:
    """The exporter's POSTs, from the event loop, against an aiohttp
    collector answering, in turn: 503 with a chunked body (retried), 200 chunked,
    200 after an interim 100 Continue, 200 closing the connection (the next POST
    reconnects), 200 with a Content-Length. Every span arrives once."""
    require_modules("opentelemetry.proto")
    from aiohttp import web
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from agentd.obs.otlp import Exporter

    names: list[str] = []
    answers = ["503-chunked", "chunked", "continue", "close", "plain"]
    peers: set[int] = set()

    async def traces(request: web.Request) -> web.StreamResponse:
        msg = ExportTraceServiceRequest.FromString(await request.read())
        shape = answers.pop(0) if answers else "plain"
        peers.add(request.transport.get_extra_info("peername")[1])
        if shape == "continue":
            request.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if shape.endswith("chunked"):
            resp = web.StreamResponse(status=503 if shape.startswith("503") else 200)
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            await resp.write(b"part one;")
            await resp.write(b"part two")
            await resp.write_eof()
            if resp.status == 503:
                return resp
        else:
            resp = web.Response(body=b"ok", content_type="application/x-protobuf")
            if shape == "close":
                resp.force_close()
        names.extend(sp.name for rs in msg.resource_spans for ss in rs.scope_spans
                     for sp in ss.spans)
        return resp

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    _no_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    exporter = Exporter({"service.name": "x"}, ("agentd", "0"))
    try:
        for i in range(4):
            exporter.put((f"s{i}", 1, i + 1, 0, "internal", 1, 2, {}, None))
            await exporter.aflush()
        assert names == ["s0", "s1", "s2", "s3"]
        assert exporter.exported == 4 and exporter.failures == 0
        assert len(peers) == 2  # one kept-alive connection, and one after the close
    finally:
        await exporter.astop()
        await runner.cleanup()


def test_the_encoder_scrubs_a_secret_registered_after_a_value_was_cached() -> None:
    """String attributes are encoded once and cached; a secret registered later
    still never reaches the wire (the cache is emptied when the set changes)."""
    require_modules("opentelemetry.proto")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from agentd.obs.otlp import SpanEncoder

    secrets: set[str] = set()
    enc = SpanEncoder({"service.name": "x"}, ("agentd", "0"), lambda: secrets)
    rec = ("s", 1, 2, 0, "client", 1, 2, {"note": "key late-secret-77", "n": None}, None)
    first = ExportTraceServiceRequest.FromString(enc.request([rec]))
    secrets.add("late-secret-77")
    second = ExportTraceServiceRequest.FromString(enc.request([rec]))
    attrs = [{a.key: a.value.string_value for a in m.resource_spans[0].scope_spans[0]
              .spans[0].attributes} for m in (first, second)]
    assert attrs == [{"note": "key late-secret-77"}, {"note": "key ***"}]


def test_relay_in_skips_malformed_records_and_scrubs(monkeypatch) -> None:
    """What a subagent relays is checked again in the root: malformed records are
    skipped, ids bounded, names and errors cut, secrets scrubbed."""
    from agentd.child.control import SpanRecord
    from agentd.log import register_secret
    from agentd.obs import trace

    got: list[tuple] = []

    class Sink:
        def put(self, rec: tuple) -> None:
            got.append(rec)

    monkeypatch.setattr(trace, "_exporter", Sink())
    register_secret("relay-secret-4242")
    tid, sid = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    ok = SpanRecord("agent.step", tid, sid, None, "internal", 1, 2,
                    {"note": "relay-secret-4242"}, None)
    taken = trace.relay_in([
        ok,
        ("x", "zz", sid, None, "internal", 1, 2, {}, None),  # not hex
        ("x", "0" * 32, sid, None, "internal", 1, 2, {}, None),  # zero trace id
        ("x", tid + "00", sid, None, "internal", 1, 2, {}, None),  # > 128 bits
        ("x", tid, sid),  # short
        ("n" * 1000, tid, sid, sid, "weird-kind", 1, 2, "not a dict", "e" * 1000),
    ], **{"agentd.handle": "0.3"})
    assert taken == 2 and len(got) == 2
    assert got[0][7] == {"note": "***", "agentd.handle": "0.3"}
    name, _, _, parent, kind, _, _, attrs, error = got[1]
    assert len(name) == 256 and parent == int(sid, 16) and kind == "internal"
    assert attrs == {"agentd.handle": "0.3"} and len(error) == 256

