"""The application layer: process entry points and composition roots.

* `run` — the root run (`run(config) -> exit code`, `execute`), and the one
  turn of a subagent (`run_child`): wires intelligence, toolbox, self-tools,
  the tree and the reactive daemon together;
* `child` — a subagent process from its first frame (stdlib only until the
  first answer), then `childrt.serve`, the child's runtime;
* `forkserver` — the forkserver process (`--forkserver`): preload, warm up,
  fork children on request.

Kept import-free, like `agentd.tree`: `agentd.child.entry` runs in a freshly
exec'd subagent that must answer its first control frame before anything heavy
is imported.
"""
