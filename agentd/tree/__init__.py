"""Subagents: the supervisor, the spawners, the private control wire, the kill ladder.

The child's and the forkserver's own process code is `agentd.app` (`child`,
`childrt`, `forkserver`). Kept import-free: `agentd.child.boot` is read by
a freshly exec'd subagent that must answer its first control frame before
anything heavy is imported.
"""
