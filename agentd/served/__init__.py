"""The endpoints agentd serves over the tree: their logic, not their assembly.

`selfmcp` is the self-MCP handler (spec §2), `a2a` the served A2A agent
(`--serve-a2a`), `pool` the pool's served side (pool handles, relay routing and
placement wrapped around the backend).  The four subagent operations they call
are the one table of `agentd.agent.spawn_tools`; who may touch a handle is the
backend's one rule (`agentd.tree.ownership`).  Building the HTTP app, TLS,
mounting A2A, metrics and the relay routes is the composition layer's
(`agentd.app.serving`).  Imports: the tree and below; imported by `agentd.app`.
"""
