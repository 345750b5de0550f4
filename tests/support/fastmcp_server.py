"""A FastMCP 4 server (a real peer) with the interop surface of tests/ts_peers/.

    python tests/support/fastmcp_server.py PORT [--stateless] [--legacy-only] [--tls CERT KEY]
                                        [--bearer TOKEN]

Streamable HTTP at ``http://127.0.0.1:PORT/mcp``; prints ``listening PORT``
when started.  FastMCP 4 (on the official SDK 2.3) serves 2026-07-28 beside
2025-11-25 on one endpoint; ``--legacy-only`` hides the 2026 version header
from it, so it answers as a 2025-11-25 server and a client falls back to
``initialize`` (as tests/support/sdk_servers.py does).  ``--stateless``: FastMCP's
``stateless_http`` (no 2025 sessions).  ``--tls CERT KEY``: HTTPS (uvicorn's own TLS)
on the same port.  ``--bearer TOKEN``: every request without ``Authorization: Bearer
TOKEN`` gets a 401, as the reverse proxy in front of a deployed server answers it.

tools (``list_page_size=3``, so the catalogue spans pages)
    ``echo{text}``, ``fail{}`` (an ``isError`` result: a ``ToolError``),
    ``touch{uri}`` (changes the body; FastMCP 4 has no resource subscriptions,
    so there is no one to notify), ``pad_01`` .. ``pad_05``.
resources
    ``mem://notes/1``, ``mem://notes/2`` (text), template ``mem://item/{id}``;
    an unknown URI gets FastMCP's own answer (-32602 "Resource not found",
    ``data.uri``).
not supported by FastMCP 4
    ``resources/subscribe`` (the capability is not advertised).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import uvicorn
    from fastmcp import FastMCP
    from fastmcp.exceptions import ToolError

    port = int(argv[0])
    stateless = "--stateless" in argv
    legacy_only = "--legacy-only" in argv
    tls = argv[argv.index("--tls") + 1:argv.index("--tls") + 3] if "--tls" in argv else []
    bearer = argv[argv.index("--bearer") + 1] if "--bearer" in argv else None
    bodies = {"mem://notes/1": "note one", "mem://notes/2": "note two"}
    mcp = FastMCP("fastmcp-peer", version="4", list_page_size=3)

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

    app = mcp.http_app(path="/mcp", stateless_http=stateless)
    version_header = b"mcp-protocol-version"

    async def asgi(scope, receive, send):
        if bearer is not None and scope["type"] == "http" and (
                b"authorization", f"Bearer {bearer}".encode()) not in scope["headers"]:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": b'{"error":"invalid_token"}'})
            return
        if legacy_only and scope["type"] == "http":
            hdrs = scope["headers"]
            if any(k == version_header and v == b"2026-07-28" for k, v in hdrs):
                scope = dict(scope, headers=[(k, v) for k, v in hdrs if k != version_header])
        await app(scope, receive, send)

    print(f"listening {port}", flush=True)
    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning",
                ssl_certfile=tls[0] if tls else None, ssl_keyfile=tls[1] if tls else None)


if __name__ == "__main__":
    main(sys.argv[1:])
