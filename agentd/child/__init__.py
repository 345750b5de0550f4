"""Everything that runs inside a subagent process: its entry (`entry`: the first
control frame answered with the stdlib only), its runtime and turns (`runtime`,
`turn`: the agent loop built here, not by the root's composition), the
forkserver's own side (`forkserver`), the brokered provider and toolbox
(`brokered`) and the remote subagent backend (`remote`); and the control wire's
contract the parent shares (`boot`, `control`, `channel`). It imports nothing
of `agentd.tree` or `agentd.app`.
"""
