"""agentd: an agent runtime whose whole action space arrives over MCP.

The package imports nothing heavy at top level: a re-exec'd subagent must be
able to answer its first control frame before asyncio and aiohttp load.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("agentd")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
