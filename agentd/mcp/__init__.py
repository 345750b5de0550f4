"""agentd's MCP: the client (per server and across servers) and the server engine.

Names are imported lazily so that importing one side (e.g. the server engine)
never loads the other's dependencies.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "MCPClient": "agentd.mcp.client.facade",
    "Observation": "agentd.wire.shapes",
    "ToolFault": "agentd.mcp.client.facade",
    "ToolInfo": "agentd.wire.shapes",
    "ResourceInfo": "agentd.wire.shapes",
    "HandshakeError": "agentd.errors",
    "Capabilities": "agentd.mcp.client.rules.session",
    "Toolbox": "agentd.mcp.client.toolbox",
    "ToolEntry": "agentd.wire.shapes",
    "RequiredServerLost": "agentd.mcp.client.rules.faults",
    "qualify": "agentd.mcp.client.toolbox",
    "RetryPolicy": "agentd.mcp.client.rules.faults",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentd.mcp' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
