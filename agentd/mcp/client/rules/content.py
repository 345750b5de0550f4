"""What the model sees of content: one text for content blocks and resource items.

Content blocks arrive as the wire Structs (or, for a kind this version does
not know, as plain dicts); the rendering is one line per block, binary
payloads described by kind, MIME type and size, never inlined.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentd.wire import mcp_types as mt

__all__ = ["render_content", "render_item"]


def render_content(blocks: list, image: Callable[[mt.ImageContent], str | None] | None = None
                   ) -> str:
    """One text for the model from content blocks (Structs, UnknownContent or dicts).

    `image`, when given, words each image block (the loop sends the image itself
    as a part and writes where it went); None from it keeps the placeholder."""
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, mt.TextContent):
            parts.append(b.text)
        elif image is not None and isinstance(b, mt.ImageContent) \
                and (said := image(b)) is not None:
            parts.append(said)
        elif isinstance(b, (mt.ImageContent, mt.AudioContent)):
            kind = "image" if isinstance(b, mt.ImageContent) else "audio"
            parts.append(f"[{kind} {b.mimeType}, {len(b.data) * 3 // 4} bytes]")
        elif isinstance(b, mt.ResourceLink):
            parts.append(f"[resource link {b.uri}" + (f" ({b.name})" if b.name else "") + "]")
        elif isinstance(b, mt.EmbeddedResource):
            parts.append(render_item(b.resource))
        elif isinstance(b, dict):
            t = b.get("type")
            parts.append(b["text"] if t == "text" and isinstance(b.get("text"), str)
                         else f"[{t} content]")
    return "\n".join(parts)


def render_item(item: Any) -> str:
    """One resource item: its text, or a one-line description of a blob."""
    if isinstance(item, mt.TextResourceContents):
        return item.text
    if isinstance(item, mt.BlobResourceContents):
        mime = item.mimeType or "application/octet-stream"
        return f"[binary {mime}, {len(item.blob) * 3 // 4} bytes, {item.uri}]"
    return ""
