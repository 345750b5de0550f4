"""Trajectories in ATIF v1.8 (Harbor's Agent Trajectory Interchange Format).

`atif` holds the format's Structs (light: the control wire carries them, and a
subagent loads that before its runtime); `recorder` the `TrajectoryRecorder`
a run's loop feeds (docs/batch.md, docs/cli.md: what maps to what, the bounds);
`files` writes a document to disk without following a planted link. Nothing
here is imported at package level: import the module you need.
"""
