"""Recording one run as an ATIF trajectory, from the loop's own hooks.

`TrajectoryRecorder` is a `Tracer` (agentd.agent.loop): give it to a run as
its tracer and it keeps, as they happen,

* each user message (`Tracer.prompt`: the instruction, a warm session's next
  message) as a `user` step;
* each answer of the intelligence (`Tracer.turn`) as an `agent` step: its text
  as `message`, its tool calls with their arguments (decoded from the model's
  JSON text; text that is not a JSON object is kept under
  `extra.raw_arguments` with `arguments` empty), and its token counts as
  `metrics` (prompt and completion tokens as the gateway reported them; ATIF's
  `cached_tokens` is left out: agentd's usage does not carry it);
* each tool result (`Tracer.result`) as an observation result of the step
  whose call it answers (`source_call_id`): the tool's own text, or agentd's
  `[agentd] ...` note for a call that was refused or failed as a protocol
  fault (`extra.agentd_note`), and `extra.is_error`.

Bound: each observation's text, and each tool call's argument text, is kept up
to `ITEM_BYTES` (32 KiB) of UTF-8; past that it is cut with the marker
`[agentd] trajectory: cut at 32768 of N bytes`. Nothing else of a step is
outside input agentd did not already bound (the model's answer is bounded by
`--intelligence-max-bytes`).

`dump()` gives the ATIF document at any moment (a run in progress too), with
every registered secret scrubbed by the same redaction cassettes and log lines
go through (`agentd.log.redact`); `snapshot()` the unscrubbed Struct, which is
what a subagent sends its parent (`RunOutcome.trajectory`): a child holds no
secret, and the root scrubs the whole document when it writes it.

Subagents: the runs a tree spawned are recorded in their own processes by
their own recorders and reach the root with their results; the root keeps them
in `subagents` (by tree handle: the Supervisor's sink) and `snapshot` nests
them, each under its parent, as `subagent_trajectories` (see `nest`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson

from agentd.agent.loop import Tracer
from agentd.agent.prompt import cut_utf8
from agentd.intelligence.base import Completion
from agentd.log import redact
from agentd.trajectory.atif import (
    SCHEMA_VERSION,
    Agent,
    FinalMetrics,
    Metrics,
    Observation,
    ObservationResult,
    Step,
    SubagentTrajectoryRef,
    ToolCall,
    Trajectory,
)
from agentd.wire.guard import PEER_FAULTS

AGENT_NAME = "agentd"
ITEM_BYTES = 32 * 1024  # one observation's (or one call's arguments') text in a trajectory
SPAWN_TOOL = "agentd__subagent_spawn"  # its result names the handle it spawned

_encode = msgspec.json.Encoder().encode


def agent_version() -> str:
    """agentd's version, as a trajectory's `agent.version` names it."""
    from agentd import __version__

    return str(__version__)


def bounded(text: str, limit: int = ITEM_BYTES) -> str:
    """`text` cut to `limit` UTF-8 bytes, with the marker when it was cut."""
    cut, size = cut_utf8(text, limit)
    if size <= limit:
        return text
    return f"{cut}\n[agentd] trajectory: cut at {limit} of {size} bytes"


def _arguments(raw: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A tool call's arguments as ATIF wants them (an object), else the raw text."""
    if not raw.strip():
        return {}, None
    if len(raw) <= ITEM_BYTES:
        try:
            value = orjson.loads(raw)
        except PEER_FAULTS:  # the model's text: kept as text
            value = None
        if isinstance(value, dict):
            return value, None
    return {}, {"raw_arguments": bounded(raw)}


class TrajectoryRecorder(Tracer):
    """One run's trajectory, fed by the loop's hooks (see the module doc).

    `session_id` names the run (the result line's `run_id` in a batch, the run
    id of a CLI run); `model` is the agent's default model, if known; `clock`
    gives the steps' timestamps (seconds since the epoch)."""

    def __init__(self, *, session_id: str | None = None, model: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.session_id = session_id
        self.model = model
        self.clock = clock
        self.steps: list[Step] = []
        self.extra: dict[str, Any] = {}
        self.subagents: dict[str, Trajectory] = {}  # tree handle -> its run's trajectory
        self._by_loop_step: dict[int, Step] = {}

    def _stamp(self) -> str:
        return datetime.fromtimestamp(self.clock(), UTC).isoformat()

    # --- the loop's hooks -------------------------------------------------------
    def prompt(self, text: str) -> None:
        self.steps.append(Step(step_id=len(self.steps) + 1, source="user", message=text,
                               timestamp=self._stamp()))

    def turn(self, step: int, completion: Completion) -> None:
        calls = []
        for c in completion.tool_calls:
            arguments, extra = _arguments(c.function.arguments)
            calls.append(ToolCall(tool_call_id=c.id, function_name=c.function.name,
                                  arguments=arguments, extra=extra))
        u = completion.usage
        entry = Step(step_id=len(self.steps) + 1, source="agent",
                     message=completion.content or "", timestamp=self._stamp(),
                     tool_calls=calls or None, llm_call_count=1,
                     metrics=Metrics(prompt_tokens=u.prompt_tokens,
                                     completion_tokens=u.completion_tokens),
                     extra={"finish_reason": completion.finish_reason}
                     if completion.finish_reason else None)
        self.steps.append(entry)
        self._by_loop_step[step] = entry

    def result(self, step: int, name: str, text: str, is_error: bool, size: int,
               duration_ms: float, note: str | None, *, call_id: str = "") -> None:
        entry = self._by_loop_step.get(step)
        if entry is None:
            return
        if entry.observation is None:
            entry.observation = Observation(results=[])
        known = {c.tool_call_id for c in entry.tool_calls or ()}
        extra: dict[str, Any] = {"is_error": is_error}
        if note is not None:
            extra["agentd_note"] = True
        entry.observation.results.append(ObservationResult(
            source_call_id=call_id if call_id in known else None,
            content=bounded(f"[agentd] {note}" if note is not None else text), extra=extra))

    # --- the document -----------------------------------------------------------
    def end(self, status: str, *, reason: str | None = None) -> None:
        """How the run ended (`extra.status`, `extra.reason`): also a partial run's."""
        self.extra["status"] = status
        if reason:
            self.extra["reason"] = reason

    def snapshot(self, *, handle: str | None = None) -> Trajectory:
        """The trajectory so far, its subagents nested under it (`handle`: this
        run's tree handle, which `subagents` are keyed under; the root's, `"0"`,
        unless given)."""
        doc = Trajectory(
            schema_version=SCHEMA_VERSION, session_id=self.session_id,
            agent=Agent(name=AGENT_NAME, version=agent_version(), model_name=self.model),
            steps=[msgspec.structs.replace(s) for s in self.steps] or [
                Step(step_id=1, source="system", message="(the run recorded no step)")],
            extra=dict(self.extra) or None)
        doc.final_metrics = totals(doc)
        if self.subagents:
            nest(doc, self.subagents, handle or "0")
        return doc

    def dump(self, *, handle: str | None = None) -> bytes:
        """The ATIF document as JSON, secrets scrubbed (see the module doc)."""
        return scrubbed(self.snapshot(handle=handle))


def scrubbed(doc: Trajectory) -> bytes:
    """A document's JSON with every registered secret redacted (as a cassette's lines)."""
    return redact(_encode(doc).decode()).encode()


def totals(doc: Trajectory) -> FinalMetrics:
    """The document's own token counts and agent steps (not its subagents')."""
    agent = [s for s in doc.steps if s.source == "agent"]
    return FinalMetrics(
        total_prompt_tokens=sum((s.metrics.prompt_tokens or 0) for s in agent if s.metrics),
        total_completion_tokens=sum((s.metrics.completion_tokens or 0)
                                    for s in agent if s.metrics),
        total_steps=len(agent))


def _spawned(content: str | None) -> str | None:
    """The handle a spawn tool's result names (its JSON body), if any."""
    if not content or not content.startswith("{"):
        return None
    try:
        body = orjson.loads(content)
    except PEER_FAULTS:
        return None
    handle = body.get("handle") if isinstance(body, dict) else None
    return handle if isinstance(handle, str) else None


def nest(doc: Trajectory, runs: Mapping[str, Trajectory], handle: str) -> Trajectory:
    """Attach to `doc` (the run of tree handle `handle`) the runs of its direct
    subagents among `runs` (keyed by handle), each with theirs, recursively.

    A subagent's `trajectory_id` is `subagent` and its handle relative to the
    document's root (`subagent.1`, `subagent.1.2`): stable between a run and its
    replay, unique among siblings. The spawn call that started it gets a
    `subagent_trajectory_ref` to it in its observation result."""
    return _nest(doc, runs, handle, handle)


def _nest(doc: Trajectory, runs: Mapping[str, Trajectory], handle: str,
          base: str) -> Trajectory:
    prefix = handle + "."
    kids = sorted((h for h in runs if h.startswith(prefix) and "." not in h[len(prefix):]),
                  key=lambda h: int(h[len(prefix):]) if h[len(prefix):].isdigit() else 0)
    if not kids:
        return doc
    ids = {h: "subagent" + h[len(base):] for h in kids}
    spawn_calls = {c.tool_call_id for s in doc.steps for c in s.tool_calls or ()
                   if c.function_name == SPAWN_TOOL}
    for s in doc.steps:
        for r in (s.observation.results if s.observation is not None else ()):
            if r.source_call_id in spawn_calls and (h := _spawned(r.content)) in ids:
                r.subagent_trajectory_ref = [SubagentTrajectoryRef(trajectory_id=ids[h])]
    doc.subagent_trajectories = [
        _nest(msgspec.structs.replace(runs[h], trajectory_id=ids[h]), runs, h, base)
        for h in kids]
    return doc
