"""A session's `mcpServers` -> the MCP servers its runs declare, or a refusal.

* `http` entries become declared servers (`agentd.config.model.ServerSpec`) of that
  session, their `headers` sent on every request.  The header values are
  literal: a `{{secret:NAME}}` in one is refused (secret references are the
  operator's, in the config file; a client must not make agentd send its own
  secrets to a URL of the client's choosing), and each value is registered for
  redaction, so no log line carries it.  The endpoint rule is the `--mcp` one:
  `https://`, or `http://` on a loopback host.
* `sse` entries become declared servers on the HTTP+SSE transport of 2024-11-05
  (`transport = "sse"`, agentd.mcp.client.legacy_sse), under the same rules as
  `http` entries; a stdio entry (`command`) is refused because
  agentd runs no local code: the client can run the server and give agentd its
  URL instead.

Every refusal is an `RPCError` (-32602) naming the entry and the fix.  Bounds:
`MAX_SERVERS` entries, `MAX_HEADERS` headers per entry, `MAX_HEADER_BYTES` per
value (docs/harnesses.md).
"""

from __future__ import annotations

import re
from typing import Final

from agentd.config.endpoints import check_endpoint
from agentd.config.model import ServerSpec
from agentd.errors import ConfigError, RPCError
from agentd.log import register_secret
from agentd.secrets import SECRET_RE
from agentd.wire.jsonrpc import INVALID_PARAMS

from .schema import McpServer

MAX_SERVERS: Final = 32
MAX_HEADERS: Final = 64
MAX_HEADER_BYTES: Final = 8192
_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")


def _refuse(message: str) -> RPCError:
    return RPCError(INVALID_PARAMS, message, side="local")


def declared(entries: list[McpServer], taken: set[str]) -> list[ServerSpec]:
    """The servers `entries` declare (names must not clash with `taken`, the
    operator's own servers, nor with each other); raises RPCError otherwise."""
    if len(entries) > MAX_SERVERS:
        raise _refuse(f"mcpServers: {len(entries)} entries, at most {MAX_SERVERS}")
    names = set(taken)
    out: list[ServerSpec] = []
    for entry in entries:
        label = f"mcpServers entry {entry.name[:80]!r}"
        if entry.command or entry.type == "stdio":
            raise _refuse(f"{label}: a stdio MCP server is refused: agentd runs no local "
                          "code; start the server yourself and pass it as an http entry "
                          "(its URL)")
        if entry.type not in ("http", "sse") or not isinstance(entry.url, str):
            raise _refuse(f"{label}: expected type \"http\" (Streamable HTTP) or \"sse\" "
                          "(HTTP+SSE) with a url")
        name = _UNSAFE.sub("_", entry.name.strip())[:64]
        if not name or name in names:
            raise _refuse(f"{label}: the name is empty or names another server of this "
                          "session (or of the operator's --mcp); give each a distinct name")
        try:
            check_endpoint(entry.url, label)
        except ConfigError as exc:
            raise _refuse(str(exc)) from None
        names.add(name)
        out.append(ServerSpec(name=name, url=entry.url, headers=_headers(entry, label),
                              transport="sse" if entry.type == "sse" else "streamable-http"))
    return out


def _headers(entry: McpServer, label: str) -> dict[str, str]:
    if len(entry.headers) > MAX_HEADERS:
        raise _refuse(f"{label}: {len(entry.headers)} headers, at most {MAX_HEADERS}")
    out: dict[str, str] = {}
    for h in entry.headers:
        if not _TOKEN.fullmatch(h.name):
            raise _refuse(f"{label}: header name {h.name[:80]!r} is not an HTTP token")
        if len(h.value.encode()) > MAX_HEADER_BYTES or any(c in h.value for c in "\r\n\0"):
            raise _refuse(f"{label}: header {h.name!r}: the value is over "
                          f"{MAX_HEADER_BYTES} bytes or holds a line break")
        if SECRET_RE.search(h.value):
            raise _refuse(f"{label}: header {h.name!r}: {{{{secret:…}}}} references are "
                          "for the operator's --config file; send the literal value")
        register_secret(h.value)
        out[h.name] = h.value
    return out
