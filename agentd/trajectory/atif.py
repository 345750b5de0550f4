"""The Agent Trajectory Interchange Format, version 1.8 (Harbor's `harbor.models.trajectories`).

One msgspec Struct per ATIF object, holding only the members agentd fills;
each keeps ATIF's member names and optionality, so a document encoded from
these Structs is what Harbor's own Pydantic models accept (the tests load every
file agentd writes with `Trajectory.model_validate_json` of Harbor itself).
ATIF's rules that the Structs cannot say are kept by the recorder
(agentd.trajectory.recorder): step ids run 1, 2, ... in each document;
`tool_calls`, `metrics` and `model_name` appear on agent steps only; an
observation result's `source_call_id` names a tool call of its own step; every
embedded subagent has a `trajectory_id`, unique among its siblings.

The Structs also carry a child's trajectory up the control wire
(`RunOutcome.trajectory`, agentd.child.control), so they refuse unknown members
like every Struct decoded there.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

SCHEMA_VERSION = "ATIF-v1.8"


class _Atif(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """ATIF omits what is unknown rather than writing nulls."""


class Metrics(_Atif):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


class FinalMetrics(_Atif):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_steps: int | None = None


class ToolCall(_Atif):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]  # required, even empty (a default would be omitted)
    extra: dict[str, Any] | None = None


class SubagentTrajectoryRef(_Atif):
    trajectory_id: str | None = None
    session_id: str | None = None
    trajectory_path: str | None = None


class ObservationResult(_Atif):
    source_call_id: str | None = None
    content: str | None = None
    subagent_trajectory_ref: list[SubagentTrajectoryRef] | None = None
    extra: dict[str, Any] | None = None


class Observation(_Atif):
    results: list[ObservationResult]  # required, even empty


class Step(_Atif):
    step_id: int
    source: Literal["system", "user", "agent"]
    message: str
    timestamp: str | None = None
    model_name: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    llm_call_count: int | None = None
    extra: dict[str, Any] | None = None


class Agent(_Atif):
    name: str
    version: str
    model_name: str | None = None
    extra: dict[str, Any] | None = None


class Trajectory(_Atif):
    agent: Agent
    steps: list[Step]
    schema_version: str  # always written (a default would be omitted): SCHEMA_VERSION
    session_id: str | None = None
    trajectory_id: str | None = None
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[Trajectory] | None = None
