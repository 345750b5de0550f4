"""The agent layer: the loop between an intelligence and the toolbox.

* `agentd.agent.run` — `run(config) -> exit code` (a whole run: connect, serve,
  loop, print one result object, drain on signals) and `run_child(...)` (one
  turn of a subagent process);
* `agentd.agent.loop` — the loop, its budgets and observations;
* `agentd.agent.prompt` — the prompt, with untrusted server text fenced;
* `agentd.agent.selftools` — the `agentd__*` self-tools.

See docs/agent.md. Nothing heavy is imported here.
"""
