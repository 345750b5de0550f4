"""Subagents, the parent's side: the supervisor, admission, the registry, the
spawners and processes, the kill ladder and the broker of the children's I/O.

The child's own side, and the control wire's contract both sides use (boot,
control messages, the framed channel), is `agentd.child`, ranked below: the
tree imports that contract, the child never imports the tree.
"""
