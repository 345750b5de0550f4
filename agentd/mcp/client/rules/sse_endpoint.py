"""The ``endpoint`` event of the HTTP+SSE transport (MCP 2024-11-05), as a URL.

A legacy server's GET stream opens with an ``endpoint`` event whose data is the
URL to POST the session's messages to, relative or absolute.  That text is the
server's, so it is resolved against the stream's URL and refused unless it
stays on the stream's origin (scheme, host, port): a peer must not turn agentd
into a client of some other host, with the declared server's headers (and
credentials) on every request (design: untrusted text never becomes a URL
elsewhere).  Bound: :data:`MAX_ENDPOINT_CHARS`.  Sans-IO.
"""

from __future__ import annotations

from typing import Final

from yarl import URL

from agentd.mcp.client.rules.faults import TransportError

__all__ = ["MAX_ENDPOINT_CHARS", "endpoint_url"]

MAX_ENDPOINT_CHARS: Final = 2048


def endpoint_url(stream: URL, data: str) -> URL:
    """The POST URL an ``endpoint`` event names, or :class:`TransportError`
    (``sent=False``: nothing was sent yet) naming why it was refused."""
    text = data.strip()
    if not text or len(text) > MAX_ENDPOINT_CHARS or not text.isprintable():
        raise TransportError(
            f"{stream}: the SSE stream's endpoint event is empty, over {MAX_ENDPOINT_CHARS} "
            "characters or not printable; refused (is the server's transport really "
            "\"sse\"? else set transport = \"streamable-http\")", sent=False)
    try:
        target = stream.join(URL(text))
    except ValueError:
        raise TransportError(f"{stream}: the SSE stream's endpoint event is not a URL; refused",
                             sent=False) from None
    if target.origin() != stream.origin() or target.user is not None:
        raise TransportError(
            f"{stream}: the SSE stream's endpoint event names another origin "
            f"({target.scheme}://{target.host}:{target.port}); refused: agentd posts only to "
            "the origin of the declared url", sent=False)
    return target.with_fragment(None)
