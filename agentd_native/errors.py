"""Exceptions shared by the compiled and the pure-Python twins.

This module is never compiled: both ``framing.py`` (interpreted) and the
``framing`` extension import these classes from here, so ``except
FrameTooLarge`` catches the error whichever twin raised it (and likewise
``SSEEventTooLarge`` for the two ``sse`` twins).
"""

from __future__ import annotations

__all__ = ["FrameTooLarge", "SSEEventTooLarge", "SpanRecordInvalid"]


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


class SSEEventTooLarge(ValueError):
    """An SSE event grew past the parser's ``max_event`` bytes.

    Why a dedicated error raised by the parser itself: the bound then holds
    for every consumer (none can forget the check) and the event's bytes are
    never held beyond it.  ``size`` is what the event had reached when the
    bound was crossed (its data lines as received plus the incomplete line),
    ``limit`` the bound in force, and ``events`` the complete events the same
    ``feed`` call dispatched *before* the oversized one (deliver them: the
    stream was fine up to there).  The parser stays failed, raising again
    (with empty ``events``) on every ``feed`` until ``close()`` ends the stream.
    """

    def __init__(self, size: int, limit: int, events: list | None = None) -> None:
        super().__init__(f"SSE event of more than {limit} bytes "
                         f"({size} bytes before its end)")
        self.size = size
        self.limit = limit
        self.events: list = events if events is not None else []

    def __reduce__(self):  # keep pickling working despite the custom __init__
        return (type(self), (self.size, self.limit, self.events))


class SpanRecordInvalid(ValueError):
    """A span record's id or time is not an int in its protobuf range.

    Why one class: the two ``otlp`` twins must fail alike on a bad record (a
    relayed span is a child's data); without this check the compiled one would
    convert a float or wrap nothing and the interpreted one raise
    ``struct.error``.  ``field`` names the offending field.
    """

    def __init__(self, field: str, value: object) -> None:
        super().__init__(f"span record: {field}={value!r:.60} is not an int in its range")
        self.field = field
