"""A official SDK 2.3 `MCPServer` (a real peer) with the interop surface of tests/ts_peers/.

    python tests/support/sdk_mcpserver.py PORT [--stateless] [--legacy-only] [--sse]

Streamable HTTP at ``http://127.0.0.1:PORT/mcp``; prints ``listening PORT``
when started.  ``MCPServer`` (the SDK's high-level server; tests/support/sdk_servers.py
is its low-level ``Server``) serves 2026-07-28 beside 2025-11-25 on one
endpoint; ``--legacy-only`` hides the 2026 version header from it, so it
answers as a 2025-11-25 server and a client falls back to ``initialize``.
``--stateless``: the SDK's ``stateless_http`` (no 2025 sessions).  ``--sse``: the
SDK's ``sse_app()`` instead, the HTTP+SSE transport of 2024-11-05 (GET
``/sse``, POSTs to the ``/messages/`` endpoint it names).

tools (``MCPServer`` does not paginate ``tools/list``: one page)
    ``echo{text}``, ``fail{}`` (an ``isError`` result: a ``ToolError``),
    ``touch{uri}`` (changes the body), ``pad_01`` .. ``pad_05``.
resources
    ``mem://notes/1``, ``mem://notes/2`` (text), template ``mem://item/{id}``;
    an unknown URI gets the SDK's own answer (-32602 with ``data.uri``).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import uvicorn
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    port = int(argv[0])
    stateless = "--stateless" in argv
    legacy_only = "--legacy-only" in argv
    bodies = {"mem://notes/1": "note one", "mem://notes/2": "note two"}
    mcp = MCPServer("sdk-mcpserver-peer", version="2.3")

    @mcp.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    @mcp.tool(description="Always reports a tool error.")
    def fail() -> str:
        raise ToolError("this tool always fails")

    @mcp.tool(description="Change a resource's body.")
    def touch(uri: str) -> str:
        head, _, count = bodies.get(uri, "").rpartition("#")
        n = (int(count) if head and count.isdigit() else 0) + 1  # "note one" has no count
        bodies[uri] = f"{uri} body #{n}"
        return f"touched {uri}"

    for i in range(1, 6):
        mcp.tool(name=f"pad_0{i}", description=f"Trivial tool {i}.")(lambda: "pad")

    @mcp.resource("mem://notes/1", mime_type="text/plain")
    def note_1() -> str:
        return bodies["mem://notes/1"]

    @mcp.resource("mem://notes/2", mime_type="text/plain")
    def note_2() -> str:
        return bodies["mem://notes/2"]

    @mcp.resource("mem://item/{id}", mime_type="text/plain")
    def item(id: str) -> str:
        return bodies.get(f"mem://item/{id}", f"item {id}")

    app = mcp.sse_app() if "--sse" in argv else mcp.streamable_http_app(stateless_http=stateless)
    version_header = b"mcp-protocol-version"

    async def asgi(scope, receive, send):
        if legacy_only and scope["type"] == "http":
            hdrs = scope["headers"]
            if any(k == version_header and v == b"2026-07-28" for k, v in hdrs):
                scope = dict(scope, headers=[(k, v) for k, v in hdrs if k != version_header])
        await app(scope, receive, send)

    print(f"listening {port}", flush=True)
    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
