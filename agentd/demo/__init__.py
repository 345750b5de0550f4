"""`agentd demo` — the embedded default: the whole mission, offline, in seconds.

`await main()` (the CLI runs it on uvloop) starts the sample MCP servers of
`agentd.demo.servers` on free loopback ports, then runs a real agentd run —
the same `agentd.app.run.execute` as `agentd --instruction ...` — whose
intelligence is the playback script shipped as package data
(`agentd/demo/demo.json`). The scripted agent:

1. calls two tools at once (list the notes; 19 + 23),
2. reads a resource from the catalogue on demand (`agentd__read_resource`),
3. divides by zero, gets the tool's `isError` back as an observation, adapts,
4. delegates to a sync subagent (a real child process, scoped to one server),
5. saves a note, and answers in the JSON of its output contract.

Then the acts of `ACT_MODULES` run with the same servers; each registers
itself with `register_act()` (add a module to the tuple to extend the demo).
`composition_act`: a worker agentd in reactive mode serving its self-MCP wakes
on a resource update; a parent agentd drives it over MCP (a sync spawn, a
refused one); agentd's MCP client does an async spawn collected by
subscribe / `updated` / read; the worker is drained.

A readable trace goes to stderr, the one result object (the main run's) to
stdout; the exit code is the main run's (1 if an act failed). Logs are quiet (errors only) so the trace reads well; set
--log-level info (or AGENTD_LOG_LEVEL=info) to see every log line too.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.resources
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import orjson

from agentd.agent.loop import Tracer
from agentd.config.model import Config, ServerSpec
from agentd.exitcodes import ExitCode
from agentd.intelligence.base import Completion
from agentd.log import configure, log
from agentd.output import print_result

ROOT_INSTRUCTION = ("[demo root] Take stock of the notes, do the demo arithmetic, "
                    "delegate the note count to a subagent and save the answer.")
OUTPUT_CONTRACT = ('JSON: {"sum": number, "half": number, "lemons": number, '
                   '"divide_by_zero": string, "subagent": string, "saved": string}')
ACT_MODULES = ("agentd.demo.composition_act", "agentd.demo.tree_act", "agentd.demo.reactive_act")


class DemoContext:
    """What an act gets: the running sample servers, the script, the trace."""

    def __init__(self, servers: dict[str, Any], script: str, trace: Trace,
                 log_level: str | None = None) -> None:
        self.servers = servers  # name -> Runner (.url, .handler)
        self.script = script  # path of the playback file
        self.trace = trace
        self.log_level = log_level  # --log-level, for the demo's runs and their subagents

    def spec(self, *names: str) -> tuple[ServerSpec, ...]:
        return tuple(ServerSpec(name=n, url=self.servers[n].url) for n in names)

    def config(self, instruction: str, *servers: str, **kw: Any) -> Config:
        """A Config for a demo run (playback intelligence, the named servers)."""
        kw.setdefault("max_steps", 20)
        kw.setdefault("deadline", 60.0)
        kw.setdefault("drain_timeout", 10.0)
        return Config(instruction=instruction, intelligence=f"playback:{self.script}",
                      mcp=self.spec(*servers), log_format="text", log_level=self.log_level,
                      **kw)


Act = Callable[[DemoContext], Awaitable[None]]
ACTS: list[tuple[str, Act]] = []


def register_act(title: str, act: Act) -> None:
    """Add an act to the demo (called by the modules in ACT_MODULES)."""
    ACTS.append((title, act))


def _preview(text: str, limit: int = 96) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


class Trace(Tracer):
    """The readable trace on stderr."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.t0 = time.perf_counter()

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def turn(self, step: int, completion: Completion) -> None:
        calls = completion.tool_calls
        what = (f"asks for {len(calls)} tool call{'s' if len(calls) != 1 else ''}" if calls
                else "answers")
        self.line(f"\nstep {step}  the model {what}")
        if completion.content:
            self.line(f"  · {_preview(completion.content, 200)}")

    def call(self, step: int, name: str, arguments: str, *, call_id: str = "") -> None:
        self.line(f"  → {name} {_preview(arguments)}")

    def result(self, step: int, name: str, text: str, is_error: bool, size: int,
               duration_ms: float, note: str | None, *, call_id: str = "") -> None:
        if note is not None:
            self.line(f"  ← {name}  [agentd] {_preview(note)}")
            return
        status = "isError" if is_error else "ok"
        self.line(f"  ← {name}  {status}  {size} B  {duration_ms:.1f} ms  {_preview(text)}")


def _script_path(stack: contextlib.ExitStack) -> str:
    ref = importlib.resources.files("agentd.demo") / "demo.json"
    return str(stack.enter_context(importlib.resources.as_file(ref)))


async def main(*, out: TextIO | None = None, stdout: TextIO | None = None,
               level: str | None = None) -> int:
    """Run the demo; returns the main run's exit code. `level`: --log-level
    (validated; None: error, so the trace is what a person reads)."""
    from agentd.app.run import execute, new_run_id
    from agentd.demo import servers as samples

    err = out or sys.stderr
    run_id = new_run_id()
    configure(fmt="text", run_id=run_id, level=level or "error")
    trace = Trace(err)
    trace.line("agentd demo — offline: a scripted (playback) intelligence and sample MCP "
               "servers on loopback")
    with contextlib.ExitStack() as files:
        script = _script_path(files)
        async with contextlib.AsyncExitStack() as stack:
            running: dict[str, Any] = {}
            for name in ("notes", "calc"):
                runner = await samples.start(name)
                stack.push_async_callback(runner.stop)
                running[name] = runner
                trace.line(f"  server {name:6} {runner.url}  tools: "
                           f"{', '.join(runner.handler.tool_names())}")
            ctx = DemoContext(running, script, trace, level)
            config = ctx.config(ROOT_INSTRUCTION, "notes", "calc",
                                output_contract=OUTPUT_CONTRACT)
            trace.line(f"\nthe instruction: {ROOT_INSTRUCTION}")
            result, code, _state = await execute(config, run_id=run_id, tracer=trace)
            trace.line(f"\nresult: status={result.status} steps={result.steps} "
                       f"exit={int(code)}")
            trace.line("  " + orjson.dumps(result.result).decode())
            for modname in ACT_MODULES:
                with contextlib.suppress(ModuleNotFoundError):
                    importlib.import_module(modname)
            for title, act in ACTS:
                trace.line(f"\n— {title}")
                try:
                    await act(ctx)
                except Exception as exc:  # an act's failure is reported, not fatal
                    log.error("demo.act_failed", act=title, error=repr(exc))
                    trace.line(f"  act failed: {exc!r}")
                    code = code or ExitCode.FAILED
            trace.line(f"\ndone in {time.perf_counter() - trace.t0:.1f} s; the result object "
                       "is on stdout")
    print_result(result, stdout)
    return int(code)
