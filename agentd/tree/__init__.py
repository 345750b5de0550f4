"""Subagents: the supervisor, the private control wire, the child entry, the kill ladder.

Kept import-free: `agentd.tree.child` runs in a freshly exec'd subagent that
must answer its first control frame before anything heavy is imported.
"""
