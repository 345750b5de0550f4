"""The child's boot contract: what parent and child agree on before any wire exists.

The private argv flag that turns `python -m agentd` into a subagent, the
forkserver's flags and fd, the test-only fault variable, and the
parent-death signal both kinds of child arm.  A leaf (stdlib `os`/`sys` only):
`agentd.__main__` and `agentd.child.entry` import it before anything heavy, and
the tree's spawners (`procs`, `forkserver`, `supervisor`) import it to build
argv and environments, so neither side has to import the other.
"""

import sys

CHILD_FLAG = "--agentd-control-child"
FORKSERVER_FLAG = "--forkserver"
# Test-only, operator env: makes a child misbehave on purpose (`crash`,
# `malformed`, `oversized`, `ignore_term`, `hang`, `linger:FIFO`: slow to exit
# after its result, until the FIFO is opened for writing).
FAULT_ENV = "AGENTD_TEST_CHILD_FAULT"
LINGER = "linger:"

FS_FD = 3  # the forkserver's end of its SOCK_SEQPACKET socket
FS_MSG_MAX = 65536  # largest message on that socket


def flag_value(argv: list[str], name: str) -> str | None:
    """The value after `name` in `argv`, or None."""
    if name in argv:
        i = argv.index(name)
        if i + 1 < len(argv):
            return argv[i + 1]
    return None


_prctl = None  # libc's prctl, looked up once (a forked child finds it in the template)


def set_pdeathsig() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): die with the parent (Linux)."""
    global _prctl
    if not sys.platform.startswith("linux"):
        return
    if _prctl is None:
        import ctypes

        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1
    _prctl(pr_set_pdeathsig, 9, 0, 0, 0)


def ppid_of(argv: list[str]) -> int | None:
    """`--ppid N`: the parent the child must still have once its death signal is armed."""
    value = flag_value(argv, "--ppid")
    return int(value) if value and value.isdigit() else None
