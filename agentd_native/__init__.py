"""agentd's byte layer: frames, an SSE parser, and tracing's hot path (OTLP bytes,
W3C traceparent values, the live span).

Each module exists as a compiled Cython extension and as its pure-Python
source twin (the same file; see ``docs/native.md``).  Python imports the
extension when it was built and the ``.py`` otherwise.  ``NATIVE`` says which
one is in use; this package never logs -- the CLI reports ``native.fallback``.

Importing this package is cheap: it pulls in nothing but its own framing and
SSE modules. `traceparent` and `span` are imported with `agentd.obs.trace`,
`otlp` only by a process that exports (a subagent never does).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util

from agentd_native import framing as _framing
from agentd_native import sse as _sse
from agentd_native.errors import FrameTooLarge, SSEEventTooLarge
from agentd_native.framing import MAX_FRAME, FrameDecoder, encode_frame
from agentd_native.sse import SSEEvent, SSEParser

__all__ = [
    "MAX_FRAME",
    "NATIVE",
    "FrameDecoder",
    "FrameTooLarge",
    "SSEEvent",
    "SSEEventTooLarge",
    "SSEParser",
    "encode_frame",
]



def _built(name: str) -> bool:
    """Is agentd_native.<name> the compiled extension (found, not imported)?"""
    spec = importlib.util.find_spec(f"agentd_native.{name}")
    origin = (spec.origin if spec is not None else None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


#: True iff every module with a compiled twin (framing, sse, otlp, traceparent, span)
#: is the compiled one.
NATIVE: bool = bool(_framing.COMPILED and _sse.COMPILED and _built("otlp")
                    and _built("traceparent") and _built("span"))
