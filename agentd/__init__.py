"""agentd: an agent runtime whose whole action space arrives over MCP.

The package imports nothing heavy at top level: a re-exec'd subagent must be
able to answer its first control frame before asyncio and aiohttp load. Even
`__version__` is computed lazily (importlib.metadata costs ~15-20 ms).
"""

from functools import cache


@cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentd")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+source"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'agentd' has no attribute {name!r}")
