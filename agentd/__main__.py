"""`python -m agentd` is `agentd`.

A subagent is this same module re-exec'd with the private flag CHILD_FLAG; it
dispatches before click or aiohttp are imported so the child can answer its first
control frame as early as possible.
"""

import sys

from agentd.child.boot import CHILD_FLAG, FORKSERVER_FLAG


def _main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD_FLAG:
        if FORKSERVER_FLAG in sys.argv:
            from agentd.child.forkserver import serve

            sys.exit(serve(sys.argv[2:]))
        from agentd.child.entry import main as child_main

        sys.exit(child_main(sys.argv[2:]))
    from agentd.cli.main import main

    main()


if __name__ == "__main__":
    _main()
