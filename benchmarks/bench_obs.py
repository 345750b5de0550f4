"""What tracing costs: the loop step and self-MCP calls/s, tracing off / on / exporting.

    python benchmarks/bench_obs.py [--steps N] [--calls N] [--spans N] [--rounds R]
                                   [--only mcp,inproc,selfmcp,spans]

Four modes, measured in one run and one process, R rounds; within a round
each benchmark runs in the four modes one after the other, and the order
rotates from round to round (so no mode always runs first, or right after an
export):

* `baseline`: the tree with its tracing call sites compiled out: every
  function of the modules on the measured path (`_SITES`) that refers to
  `agentd.obs.trace` is recompiled from its source without them (`with
  trace.span(...)` becomes its body, `if trace.enabled:` its `else`, a
  `trace.meta(x)` is `x`, the statements about a span are dropped), and put in
  place of the original for this mode. This is "today's figures" without
  tracing, measured in the same sitting as the rest;
* `off`: no `OTEL_EXPORTER_OTLP_*` environment: the facade's no-op path;
* `record`: spans are made and dropped, no exporter (the cost of tracing
  itself);
* `export`: spans are made and exported over OTLP/HTTP by the event loop to
  a local receiver (an aiohttp server in its own process that reads and
  discards each body), with the OpenTelemetry default batching.

The benchmarks, each printed as one JSON line:

* `obs_loop_step_mcp`: one step of the real `Loop` (playback intelligence, one
  tool call of a no-op MCP tool on a real server over loopback HTTP, through
  the real Toolbox and MCP client): the `agent.step`, `intelligence.call` and
  `tools/call` spans, the `_meta.traceparent` and the W3C headers;
* `obs_loop_step_inproc`: the same loop with an in-process no-op self-tool
  (no network: the loop's own cost, where tracing weighs most);
* `obs_selfmcp_calls`: `tools/call status` requests a second against a
  self-MCP served in this process (started after the mode is set, so it has
  the `mcp.server` span that continues the request's `_meta.traceparent`),
  one client, sequential;
* `obs_span_cost`: CPU per span of a step's three nested spans alone, made and
  exported by agentd (`record`, `export`) and, when `opentelemetry-sdk` is
  installed, by the OpenTelemetry SDK (a `TracerProvider` alone, and with a
  `BatchSpanProcessor` and the SDK's OTLP/HTTP protobuf exporter to the same
  receiver): the figure behind agentd keeping its own recorder and encoder.

Each time covers the work and the flush of what it exported (`trace.aflush()`
waits for the POST in flight and sends the rest), wall and CPU (this process). A figure is the median over rounds, with its spread (min, max);
`vs_off_pct` is the median over rounds of each round's mode/off ratio, minus
one (paired within the round, so a burst of load on the shared machine
cancels out; for calls/s the slowdown, off/mode minus one, so that a positive
figure is always a cost); `off_vs_baseline_pct` is the same for off against
the baseline.
`--only` runs some of the benchmarks (a comma list; the lines of the others
are left out). Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MODES = ("baseline", "off", "record", "export")
BENCHES = ("mcp", "inproc", "selfmcp", "spans")
# the modules whose tracing call sites the measured paths run through
_SITES = ("agentd.agent.loop", "agentd.obs.calls", "agentd.mcp.client.facade",
          "agentd.mcp.client.transport")


# ------------------------------------------------------------------ the baseline

class _Strip(ast.NodeTransformer):
    """A function's source without its tracing: what "the recorder bypassed" is.

    A statement is about tracing when it names `trace`, a `_span`/`_steps`
    attribute, or a local that was bound from such an expression (a `with ...
    as call_span`, `span = self._span`). Anything else naming them raises: the
    baseline must not silently keep a call site.
    """

    _ATTRS = frozenset({"_span", "_steps"})

    def __init__(self) -> None:
        self.tainted: set[str] = {"trace"}

    def mentions(self, node: ast.AST) -> bool:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in self.tainted:
                return True
            if isinstance(n, ast.Attribute) and n.attr in self._ATTRS:
                return True
        return False

    def _taint(self, target: ast.AST) -> None:
        if isinstance(target, ast.Name):  # a local; an attribute target taints nothing
            self.tainted.add(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for t in target.elts:
                self._taint(t)

    def _block(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for s in stmts:
            r = self.visit(s)
            if r is None:
                continue
            out.extend(r if isinstance(r, list) else [r])
        return out

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                new = self._block(stmts)
                setattr(node, field, new or ([ast.Pass()] if field == "body" else []))
        if isinstance(node, ast.Try):
            node.handlers = [self.visit(h) for h in node.handlers]
        return node

    def visit_If(self, node: ast.If) -> Any:
        if self.mentions(node.test):
            return self._block(node.orelse)
        return self.generic_visit(node)

    def visit_With(self, node: ast.With | ast.AsyncWith) -> Any:
        if any(self.mentions(i.context_expr) for i in node.items):
            if len(node.items) != 1:
                raise ValueError("a with statement mixing tracing and other contexts")
            if node.items[0].optional_vars is not None:
                self._taint(node.items[0].optional_vars)
            return self._block(node.body)
        return self.generic_visit(node)

    visit_AsyncWith = visit_With

    def visit_Expr(self, node: ast.Expr) -> Any:
        return None if self.mentions(node) else node

    def visit_Assign(self, node: ast.Assign) -> Any:
        v = node.value
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) \
                and isinstance(v.func.value, ast.Name) and v.func.value.id == "trace" \
                and v.func.attr == "meta" and len(v.args) == 1:
            node.value = v.args[0]  # `_meta` as it was before tracing
            return node
        if self.mentions(node):
            for t in node.targets:
                self._taint(t)
            return None
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        if self.mentions(node):
            self._taint(node.target)
            return None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Any:
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef


def _uses_trace(code: types.CodeType) -> bool:
    return not {"trace", "_span", "_steps"}.isdisjoint(code.co_names) or any(
        isinstance(c, types.CodeType) and _uses_trace(c) for c in code.co_consts)


def _stripped(fn: types.FunctionType) -> types.FunctionType:
    if fn.__code__.co_freevars:
        raise ValueError(f"{fn.__qualname__}: a closure, not recompiled")
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    node.decorator_list = []
    strip = _Strip()
    strip.visit(node)
    if strip.mentions(node):
        raise ValueError(f"{fn.__qualname__}: a tracing call site the baseline cannot remove")
    ast.fix_missing_locations(tree)
    ns: dict[str, Any] = {}
    exec(compile(tree, f"<baseline {fn.__qualname__}>", "exec"), fn.__globals__, ns)
    new = ns[node.name]
    new.__qualname__ = fn.__qualname__
    return new


def baseline_patches() -> list[tuple[Any, str, Any, Any]]:
    """(owner, name, original, stripped) for every function on the measured path
    that refers to the tracing facade."""
    import importlib

    out = []
    for modname in _SITES:
        mod = importlib.import_module(modname)
        owners: list[Any] = [mod]
        owners += [c for c in vars(mod).values()
                   if isinstance(c, type) and c.__module__ == modname]
        for owner in owners:
            for name, fn in list(vars(owner).items()):
                if isinstance(fn, types.FunctionType) and fn.__module__ == modname \
                        and _uses_trace(fn.__code__):
                    out.append((owner, name, fn, _stripped(fn)))
    return out


def _install(patches: list, which: int) -> None:
    for owner, name, *fns in patches:
        setattr(owner, name, fns[which])


# ------------------------------------------------------------------ measuring

async def _selfmcp_client(url: str):
    """An initialized raw session to the self-MCP; returns (http, once)."""
    import aiohttp

    http = aiohttp.ClientSession()
    hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}}
    async with http.post(url, json=init, headers=hdrs) as r:
        sid = r.headers["Mcp-Session-Id"]
        await r.read()
    hdrs = {**hdrs, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
    async with http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                         headers=hdrs):
        pass
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "status", "arguments": {}, "_meta": {"traceparent": tp}}}).encode()

    async def once() -> None:
        async with http.post(url, data=body, headers=hdrs) as r:
            await r.read()
            assert r.status == 200

    return http, once


async def _steps(intelligence: Any, actions: Any, steps: int) -> tuple[float, float]:
    """Wall and CPU seconds per loop step, the flush of its spans included."""
    from agentd.agent.loop import Budgets, Loop, LoopState
    from agentd.obs import trace

    loop = Loop(intelligence, actions, budgets=Budgets(max_steps=steps), state=LoopState())
    messages = loop.conversation("benchmark", toolbox=actions.toolbox)
    c0, t0 = time.process_time(), time.perf_counter()
    with trace.run_span("agentd.run", "bench"):
        outcome = await loop.run(messages)
    await trace.aflush()
    t1, c1 = time.perf_counter(), time.process_time()
    assert outcome.status == "budget_exhausted" and loop.state.steps == steps
    return (t1 - t0) / steps, (c1 - c0) / steps


async def _selfmcp(calls: int) -> tuple[float, float]:
    """Calls a second and CPU seconds per call against a self-MCP started now."""
    from bench_server import free_port

    from agentd.agent.subagents import Unavailable
    from agentd.app.serving import serve_self_mcp
    from agentd.config.model import ServeSpec
    from agentd.obs import trace

    port = free_port()
    runner = await serve_self_mcp(ServeSpec(url=f"http://127.0.0.1:{port}", host="127.0.0.1",
                                            port=port, scheme="http"), Unavailable(),
                                  run_id="bench")
    http, once = await _selfmcp_client(f"http://127.0.0.1:{port}/mcp")
    try:
        for _ in range(100):
            await once()
        await trace.aflush()
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await once()
        await trace.aflush()
        t1, c1 = time.perf_counter(), time.process_time()
    finally:
        await http.close()
        await runner.stop()
    return calls / (t1 - t0), (c1 - c0) / calls


_STEP_ATTRS = {"gen_ai.request.model": "playback"}
_CALL_ATTRS = {"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo",
               "mcp.protocol.version": "2025-11-25", "agentd.mcp.server": "noop"}


def _agentd_spans(n: int) -> float:
    """CPU seconds per span: a step's three nested spans, n/3 times, then the flush."""
    from agentd.obs import trace

    c0 = time.process_time()
    with trace.run_span("agentd.run", "bench"):
        for i in range(n // 3):
            with trace.span("agent.step", **{"agentd.step": i}):
                with trace.span("intelligence.call", kind="client", **_STEP_ATTRS) as s:
                    s.set(**{"gen_ai.usage.input_tokens": 100 + i,
                             "gen_ai.usage.output_tokens": 5, "agentd.tool_calls": 1})
                with trace.span("tools/call echo", kind="client", **_CALL_ATTRS) as s:
                    s.set(**{"agentd.mcp.outcome": "ok"})
    trace.flush()
    return (time.process_time() - c0) / (n // 3 * 3)


def _otel_sdk_spans(n: int, export: bool) -> float | None:
    """The same spans made by the OpenTelemetry SDK (and exported by its batch
    processor and OTLP/HTTP exporter); None when the SDK is not installed."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind
    except ImportError:
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    if export:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("bench")
    client = SpanKind.CLIENT
    c0 = time.process_time()
    with tracer.start_as_current_span("agentd.run"):
        for i in range(n // 3):
            with tracer.start_as_current_span("agent.step", attributes={"agentd.step": i}):
                with tracer.start_as_current_span("intelligence.call", kind=client,
                                                  attributes=_STEP_ATTRS) as s:
                    s.set_attributes({"gen_ai.usage.input_tokens": 100 + i,
                                      "gen_ai.usage.output_tokens": 5,
                                      "agentd.tool_calls": 1})
                with tracer.start_as_current_span("tools/call echo", kind=client,
                                                  attributes=_CALL_ATTRS) as s:
                    s.set_attribute("agentd.mcp.outcome", "ok")
    provider.force_flush()
    took = (time.process_time() - c0) / (n // 3 * 3)
    provider.shutdown()
    return took


async def _run(echo_url: str, steps: int, calls: int, spans: int, rounds: int,
               only: frozenset[str] = frozenset(BENCHES)
               ) -> tuple[dict[str, dict[str, list[float]]], dict[str, list]]:
    from bench_loop import direct_calls, script

    from agentd import log as logmod
    from agentd.agent.loop import Actions
    from agentd.agent.selftools import SelfTools
    from agentd.config.model import ServerSpec
    from agentd.mcp.client.toolbox import Toolbox
    from agentd.mcp.selftool import SelfTool, ok
    from agentd.obs import trace

    devnull = open(os.devnull, "w")  # noqa: ASYNC230 - set-up, outside the timing
    logmod.configure(stream=devnull, level="info", fmt="json", run_id="bench")
    patches = baseline_patches()
    res: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    span_cost: dict[str, list] = {k: [] for k in ("agentd_record", "agentd_export",
                                                  "otel_sdk_record", "otel_sdk_export")}

    def add(mode: str, key: str, value: float) -> None:
        res[mode].setdefault(key, []).append(value)

    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with Toolbox([ServerSpec(name="noop", url=echo_url)], run_id="bench",
                               ping_interval=None) as toolbox:
                selftools = SelfTools(resources=toolbox)

                async def noop(args: dict) -> object:
                    return ok("x")

                selftools.add(SelfTool("noop", "no-op", {"type": "object"}, noop))
                actions = Actions(toolbox, selftools)
                pb_mcp = script(Path(tmp) / "mcp.json", "noop__echo")
                pb_self = script(Path(tmp) / "self.json", "agentd__noop")
                await direct_calls(toolbox, "noop__echo", 200)  # warm up
                kinds = [k for k in ("mcp", "inproc", "selfmcp") if k in only]
                for mode in MODES:
                    for kind in kinds:
                        await _one(mode, kind, patches, pb_mcp, pb_self, actions, 100, 100,
                                   lambda *a: None)
                for r in range(rounds):
                    order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
                    for kind in kinds:
                        for mode in order:
                            await _one(mode, kind, patches, pb_mcp, pb_self, actions, steps,
                                       calls, add)
                    if "spans" not in only:
                        continue
                    for mode in ("record", "export"):
                        assert trace.setup("agentd-bench", mode=mode)
                        try:
                            span_cost[f"agentd_{mode}"].append(_agentd_spans(spans))
                        finally:
                            trace.shutdown()
                    span_cost["otel_sdk_record"].append(_otel_sdk_spans(spans, False))
                    span_cost["otel_sdk_export"].append(_otel_sdk_spans(spans, True))
    finally:
        _install(patches, 0)
        logmod.configure(stream=sys.stderr)
        devnull.close()
    return res, span_cost


async def _one(mode: str, kind: str, patches: list, pb_mcp: Any, pb_self: Any,
               actions: Any, steps: int, calls: int,
               add: Callable[[str, str, float], None]) -> None:
    """One sample of one benchmark in one mode (the modes of a benchmark follow each
    other closely, so that a round's ratios compare like with like)."""
    from agentd.obs import trace

    if mode == "baseline":
        _install(patches, 1)
    elif mode != "off":
        assert trace.setup("agentd-bench", mode=mode)
    try:
        if kind == "selfmcp":
            rate, cpu = await _selfmcp(calls)
            add(mode, "calls_per_s", rate)
            add(mode, "cpu_us_per_call", cpu * 1e6)
        else:
            wall, cpu = await _steps(pb_mcp if kind == "mcp" else pb_self, actions, steps)
            pre = "step" if kind == "mcp" else "inproc_step"
            add(mode, f"{pre}_us", wall * 1e6)
            add(mode, f"{pre}_cpu_us", cpu * 1e6)
    finally:
        trace.shutdown()
        _install(patches, 0)


def _receiver(port: int) -> None:
    """The local OTLP/HTTP receiver (its own process): reads and discards."""
    from aiohttp import web

    async def traces(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _r(x: float) -> float:
    return round(x, 1) if abs(x) >= 10 else round(x, 2)


def _paired_pct(a: list[float], b: list[float], higher_is_better: bool = False) -> float:
    """Median over rounds of a/b - 1 (b/a - 1 for a rate), in percent."""
    ratios = [(y / x if higher_is_better else x / y) for x, y in zip(a, b, strict=True)]
    return _r((statistics.median(ratios) - 1) * 100)


def _line(bench: str, res: dict, keys: dict[str, str], higher: set[str], common: dict) -> dict:
    out: dict[str, Any] = {"bench": bench}
    for key, label in keys.items():
        out[label] = {m: _r(statistics.median(res[m][key])) for m in MODES}
        out[f"{label}_spread"] = {m: [_r(min(res[m][key])), _r(max(res[m][key]))]
                                  for m in MODES}
        hb = key in higher
        out[f"{label}_vs_off_pct"] = {m: _paired_pct(res[m][key], res["off"][key], hb)
                                      for m in MODES if m != "off"}
        out[f"{label}_off_vs_baseline_pct"] = _paired_pct(res["off"][key],
                                                          res["baseline"][key], hb)
    return {**out, **common}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--calls", type=int, default=600)
    ap.add_argument("--spans", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--only", default=",".join(BENCHES),
                    help="the benchmarks to run, a comma list of " + ", ".join(BENCHES))
    a = ap.parse_args()
    only = frozenset(b.strip() for b in a.only.split(",") if b.strip())
    if not only or not only <= set(BENCHES):
        ap.error(f"--only: a comma list of {', '.join(BENCHES)}")
    import uvloop
    from bench_loop import start_server
    from bench_server import free_port

    from tests.peers import PeerProcess

    for k in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[k]
    peer, engine, _tool = start_server()
    rport = free_port()
    receiver = PeerProcess([sys.executable, "-c",
                            "import sys; sys.path.insert(0, sys.argv[1]); "
                            "import bench_obs; bench_obs._receiver(int(sys.argv[2]))",
                            str(ROOT / "benchmarks"), str(rport)], rport, cwd=ROOT).start()
    # read by the export mode (and the OTel SDK's exporter) only
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{rport}"
    load0 = os.getloadavg()[0]
    try:
        res, span_cost = uvloop.run(_run(peer.url, a.steps, a.calls, a.spans, a.rounds,
                                               only))
    finally:
        receiver.stop()
        peer.stop()
    common = {"rounds": a.rounds, "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}
    if "mcp" in only:
        print(json.dumps(_line("obs_loop_step_mcp", res, {"step_us": "wall_us",
                                                          "step_cpu_us": "cpu_us"}, set(),
                               {"steps": a.steps, "server": engine, **common})))
    if "inproc" in only:
        print(json.dumps(_line("obs_loop_step_inproc", res, {"inproc_step_us": "wall_us",
                                                             "inproc_step_cpu_us": "cpu_us"},
                               set(), {"steps": a.steps, **common})))
    if "selfmcp" in only:
        print(json.dumps(_line("obs_selfmcp_calls", res,
                               {"calls_per_s": "calls_per_s",
                                "cpu_us_per_call": "cpu_us_per_call"},
                               {"calls_per_s"}, {"calls": a.calls, **common})))
    if "spans" not in only:
        return
    cost: dict[str, Any] = {"bench": "obs_span_cost", "unit": "cpu_us_per_span",
                            "spans": a.spans // 3 * 3}
    for k, v in span_cost.items():
        if v and all(x is not None for x in v):
            cost[k] = _r(statistics.median(v) * 1e6)
            cost[f"{k}_spread"] = [_r(min(v) * 1e6), _r(max(v) * 1e6)]
        else:
            cost[k] = None  # opentelemetry-sdk is not installed
    if cost.get("otel_sdk_export") and cost.get("agentd_export"):
        cost["otel_sdk_export_over_agentd"] = _r(cost["otel_sdk_export"] / cost["agentd_export"])
    print(json.dumps({**cost, **common}))


if __name__ == "__main__":
    main()
