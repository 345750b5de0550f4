"""Exceptions shared by the compiled and the pure-Python twins.

This module is never compiled: both ``framing.py`` (interpreted) and the
``framing`` extension import these classes from here, so ``except
FrameTooLarge`` catches the error whichever twin raised it.
"""

from __future__ import annotations

__all__ = ["FrameTooLarge"]


class FrameTooLarge(ValueError):
    """A frame's length exceeds the configured maximum.

    ``size`` is the announced (or attempted) body length in bytes and
    ``limit`` the maximum in force.  ``frames`` holds the complete bodies a
    :class:`~agentd_native.FrameDecoder` decoded in the same ``feed`` call
    *before* the offending header (empty when raised by ``encode_frame`` or
    when re-raised by a failed decoder).
    """

    def __init__(self, size: int, limit: int, frames: list[bytes] | None = None) -> None:
        super().__init__(f"frame of {size} bytes exceeds the maximum of {limit} bytes")
        self.size = size
        self.limit = limit
        self.frames: list[bytes] = frames if frames is not None else []

    def __reduce__(self):  # keep pickling working despite the custom __init__
        return (type(self), (self.size, self.limit, self.frames))
