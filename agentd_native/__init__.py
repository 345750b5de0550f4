"""agentd's byte layer: length-prefixed frames and an incremental SSE parser.

Each module exists as a compiled Cython extension and as its pure-Python
source twin (the same file; see ``docs/native.md``).  Python imports the
extension when it was built and the ``.py`` otherwise.  ``NATIVE`` says which
one is in use; this package never logs -- the CLI reports ``native.fallback``.

Importing this package is cheap: it pulls in nothing but its own modules.
"""

from __future__ import annotations

from agentd_native import framing as _framing
from agentd_native import sse as _sse
from agentd_native.errors import FrameTooLarge
from agentd_native.framing import MAX_FRAME, FrameDecoder, encode_frame
from agentd_native.sse import SSEEvent, SSEParser

__all__ = [
    "MAX_FRAME",
    "NATIVE",
    "FrameDecoder",
    "FrameTooLarge",
    "SSEEvent",
    "SSEParser",
    "encode_frame",
]

#: True iff both modules were loaded as compiled extensions.
NATIVE: bool = bool(_framing.COMPILED and _sse.COMPILED)
