"""The batch folder's fixture: `sdk`, the official SDK's MCP server
(tests/support/sdk_servers.py) as a batch's MCP side, one per test module."""

from __future__ import annotations

import pytest
from peers import python_peer, require_modules


@pytest.fixture(scope="module")
def sdk():
    require_modules("mcp", "uvicorn", "starlette")
    with python_peer("sdk_servers.py") as peer:
        yield peer
