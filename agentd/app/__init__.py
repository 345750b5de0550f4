"""The application layer: composition roots.

* `run` — the root run (`run(config) -> exit code`, `execute`): wires the
  intelligence, the toolbox, the self-tools, the tree, the served endpoints and
  the reactive daemon together;
* `compose` — the tree's composition (provider, toolbox, broker, Supervisor);
* `serving` — the served endpoints' HTTP app, TLS, A2A, metrics and pool routes.

A subagent's own process is `agentd.child`, which never imports this package.
"""
