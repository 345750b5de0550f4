"""`agentd batch --trajectories DIR`: one ATIF trajectory per sample (docs/batch.md).

Each sample (handle `0.k`) and each of its subagents records its own run in
its own process (`ChildConfig.trajectory`) and sends it up with its result;
the batch root's Supervisor keeps them by handle (`Supervisor.trajectories`).
When the sample's result line is written, its runs are taken out of that
store, its subagents nested under it (agentd.trajectory.recorder.nest), the
document scrubbed of secrets like a cassette and written to
`DIR/<id>.json` (agentd.trajectory.files). A replay drives the same loop, so
it writes the same document (only the timestamps and the `session_id`, the
result line's `run_id`, differ). A sample whose own run sent no trajectory (it
was refused, cancelled or died) still gets a file: its instruction as the one
step, and how it ended. A file that cannot be written is logged
(`trajectory.write_failed`) and does not change the sample's result.
"""

from __future__ import annotations

from agentd.log import log
from agentd.trajectory.atif import SCHEMA_VERSION, Agent, Step, Trajectory
from agentd.trajectory.files import sample_file, write_document
from agentd.trajectory.recorder import (
    AGENT_NAME,
    agent_version,
    nest,
    scrubbed,
    totals,
)


class SampleTrajectories:
    """Writes each sample's document as it ends (see the module doc)."""

    def __init__(self, directory: str, runs: dict[str, Trajectory], *,
                 model: str | None) -> None:
        self.directory = directory
        self.runs = runs  # the Supervisor's store: handle -> that run's trajectory
        self.model = model

    def _take(self, handle: str) -> dict[str, Trajectory]:
        """The sample's runs, out of the store (its handle and every one under it)."""
        mine = [h for h in self.runs if h == handle or h.startswith(handle + ".")]
        return {h: self.runs.pop(h) for h in mine}

    def drop(self, handle: str) -> None:
        """A sample that is not written (interrupted: --resume runs it again)."""
        self._take(handle)

    def write(self, sample_id: str, instruction: str, handle: str | None, *,
              session_id: str, status: str, error: str | None) -> None:
        runs = self._take(handle) if handle is not None else {}
        own = runs.pop(handle, None) if handle is not None else None
        if own is None:  # no run of its own reported one: what is known of the sample
            own = Trajectory(schema_version=SCHEMA_VERSION,
                             agent=Agent(name=AGENT_NAME, version=agent_version()),
                             steps=[Step(step_id=1, source="user", message=instruction)])
            own.final_metrics = totals(own)
        own.session_id = session_id
        own.agent.model_name = own.agent.model_name or self.model
        own.extra = {**(own.extra or {}), "sample_id": sample_id, "status": status}
        if error:
            own.extra["error"] = error
        if handle is not None:
            nest(own, runs, handle)
        path = sample_file(self.directory, sample_id)
        try:
            write_document(path, scrubbed(own))
        except OSError as exc:
            log.error("trajectory.write_failed", id=sample_id, path=path,
                      error=exc.strerror or str(exc),
                      fix="--trajectories: a writable directory")
