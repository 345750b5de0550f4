"""A hostile MCP server (official SDK `MCPServer`) whose answers are too big for a
subagent's control wire, for the oversize tests (tests/tree/test_tree_oversize.py).

    python tests/support/oversize_server.py PORT [BYTES]

Streamable HTTP at http://127.0.0.1:PORT/mcp. `blob{}` answers a text of BYTES
(default 20 MiB) and `blob://huge` reads as one; both stay under agentd's
64 MiB `--mcp-max-bytes` and `--sse-event-bytes`, so agentd accepts them from
the server and must refuse them at the next hop (a child's 16 MiB frame).
`echo{text}` is a small tool that answers its text.
"""

from __future__ import annotations

import sys

DEFAULT_BYTES = 20 * 1024 * 1024


def main(argv: list[str]) -> None:
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    port = int(argv[0])
    size = int(argv[1]) if len(argv) > 1 else DEFAULT_BYTES
    server = MCPServer("oversize")

    @server.tool(description="Answers a text far larger than a subagent can be given.")
    def blob() -> str:
        return "x" * size

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    @server.resource("blob://huge", mime_type="text/plain")
    def huge() -> str:
        return "y" * size

    app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
