"""A brokered request in words: its span's attributes, its kind, what answers it,
and its line in the live view (`agentd top`): names, never arguments or content.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentd.child.control import IoCall, IoComplete, IoRead

__all__ = ["io_attrs", "io_event", "io_kind", "io_what"]


def io_attrs(handle: str, req: object) -> dict[str, Any]:
    """The `agentd.io` span's attributes (dotted names, so not keywords)."""
    return {"agentd.handle": handle, "agentd.io": type(req).__name__}


def io_kind(req: msgspec.Struct) -> str:
    """A brokered request's kind: its tag on the wire (`complete`, `call`, ...)."""
    tag = req.__struct_config__.tag
    return tag if isinstance(tag, str) and tag else type(req).__name__


def io_what(req: msgspec.Struct) -> str:
    """What answers a brokered request, in the words of an oversize's reason."""
    if isinstance(req, IoComplete):
        return "the model's answer"
    if isinstance(req, IoCall):
        return f"the result of tool {str(req.name)[:80]!r}"
    if isinstance(req, IoRead):
        return f"the read of resource {str(req.uri)[:200]!r}"
    return f"the answer to {io_kind(req)}"


def io_event(req: msgspec.Struct, steps: int) -> str:
    """A brokered request as a live-view event: the tool's name, never arguments."""
    kind = io_kind(req)
    if kind == "complete":
        return f"step {steps + 1}: thinking"
    if kind == "call":
        return f"tool {str(req.name)[:80]}"  # type: ignore[attr-defined]
    return {"read": "reading a resource", "subscribe": "subscribing",
            "unsubscribe": "unsubscribing"}.get(kind, str(kind))
