"""A FastMCP 4 server for the reactive tests: FastMCP never offers resource
subscriptions (at either revision), so agentd must poll what it watches here.

    python tests/reactive_fastmcp.py PORT

Streamable HTTP at http://127.0.0.1:PORT/mcp; resource `mem://notes/1` (text,
starts "first"); tool `edit {text}` replaces its body (and sends nothing: no
subscriber could be told). Prints `listening PORT` before it serves.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    from fastmcp import FastMCP

    port = int(argv[0])
    notes = {"1": "first"}
    mcp = FastMCP("notes")

    @mcp.resource("mem://notes/1", mime_type="text/plain")
    def note() -> str:
        return notes["1"]

    @mcp.tool
    def edit(text: str) -> str:
        """Replace the body of mem://notes/1."""
        notes["1"] = text
        return "ok"

    print(f"listening {port}", flush=True)
    mcp.run(transport="http", host="127.0.0.1", port=port, path="/mcp", show_banner=False,
            log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
