"""Process exit codes: a contract with operators and scripts (README, --help)."""

from enum import IntEnum


class ExitCode(IntEnum):
    COMPLETED = 0  # the run completed
    FAILED = 1  # the run failed
    USAGE = 2  # bad usage or config, detected before any side effect
    BUDGET = 3  # step or token budget exhausted; a partial result is printed
    DEADLINE = 4  # --deadline passed
    INTELLIGENCE = 5  # the intelligence gateway is unreachable or keeps failing
    MCP_REQUIRED = 6  # a required MCP server failed its handshake (or a watch is refused)
    INTERRUPTED = 130  # SIGINT/SIGTERM; drained


# A run's exit code by its result's status (the root's run and a subagent's turn).
EXIT_BY_STATUS = {
    "completed": ExitCode.COMPLETED,
    "budget_exhausted": ExitCode.BUDGET,
    "deadline": ExitCode.DEADLINE,
    "interrupted": ExitCode.INTERRUPTED,
    "failed": ExitCode.FAILED,
}


EXIT_CODE_HELP = """\
Exit codes:
  0    completed
  1    failed
  2    bad usage or config (before any side effect)
  3    budget exhausted (steps/tokens; partial result printed)
  4    deadline passed
  5    intelligence unreachable or failing
  6    a required MCP server failed its handshake, or a --subscribe URI
       cannot be watched (--poll-interval 0)
  130  interrupted (drained)"""
