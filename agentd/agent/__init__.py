"""The agent layer: the loop between an intelligence and the toolbox.

* `agentd.agent.loop` — the loop, its budgets and observations;
* `agentd.agent.prompt` — the prompt, with untrusted server text fenced;
* `agentd.agent.selftools` — the `agentd__*` self-tools.

The whole run that composes it (`run`, `run_child`) is `agentd.app.run`.
See docs/agent.md. Nothing heavy is imported here.
"""
