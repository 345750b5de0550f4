"""agentd/child."""
