"""2026-07-28 requests as a conforming client sends them, decoded, with their
routing headers: the input of the server's sans-IO rules in the tests that
drive them without a transport.
"""

from __future__ import annotations

import json
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from agentd.wire import codec

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"}}


def request(i: Any, method: str, params: dict[str, Any] | None = None,
            meta: dict[str, Any] | None = META) -> Any:
    p = dict(params or {})
    if meta is not None:
        p["_meta"] = meta
    return codec.decode(json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                                    "params": p}).encode())


def headers(req: Any, *pairs: tuple[str, str], name: str | None = None) -> CIMultiDictProxy[str]:
    """The routing headers a conforming client sends for ``req``, plus ``pairs``."""
    d: CIMultiDict[str] = CIMultiDict([("MCP-Protocol-Version", V), ("Mcp-Method", req.method)])
    if name is not None:
        d.add("Mcp-Name", name)
    for k, v in pairs:
        d.add(k, v)
    return CIMultiDictProxy(d)
