"""A tool call's arguments as the wire will carry them, or why they cannot be.

The arguments come from the model (through the gateway and the loop) or a
brokered child: untrusted bytes or the object decoded from them. Before
anything is sent they must be a JSON object that the wire's encoder can write
(orjson: nesting at most 255 levels, integers within 64 bits; docs/security.md,
the limits table). A refusal is text for the model — an error observation,
nothing sent — never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from agentd.wire.guard import PEER_FAULTS, fault_text

__all__ = ["wire_arguments"]


def wire_arguments(name: str, arguments: Mapping[str, Any] | str | bytes | None
                   ) -> tuple[dict[str, Any], bytes] | str:
    """``(arguments as a dict, their JSON bytes)`` for tool ``name``, or the text
    of the refusal. A JSON string is sent as it came (spliced, not re-encoded)."""
    if arguments is None:
        return {}, b"{}"
    args: Any
    if isinstance(arguments, (str, bytes)):
        try:
            args = orjson.loads(arguments)
        except PEER_FAULTS as exc:
            return f"arguments for tool {name} are not valid JSON: {fault_text(exc)}"
        args_json = arguments.encode() if isinstance(arguments, str) else arguments
    else:
        args = arguments
        try:  # the wire's bounds: nesting <= 255, integers within 64 bits
            args_json = orjson.dumps(arguments)
        except PEER_FAULTS as exc:
            return f"arguments for tool {name} cannot be sent: {fault_text(exc)}"
    if not isinstance(args, dict):
        return f"arguments for tool {name} must be a JSON object"
    return args, args_json
