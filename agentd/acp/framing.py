"""Newline-delimited frames, bounded (sans-IO): bytes in, lines or refusals out.

ACP over stdio is one JSON-RPC message per line.  A client controls every byte
on our stdin, so a line has a bound (`DEFAULT_MAX_LINE`, `agentd acp
--max-line-bytes`): the bytes of a longer line are dropped as they arrive (the
framer never holds more than the bound) and the line is reported as
`Oversized`, which the agent answers with a JSON-RPC error; the next line is
read as usual.  Empty lines (and a `\\r` before the `\\n`) are ignored.
"""

from __future__ import annotations

from typing import Final

from msgspec import Struct

DEFAULT_MAX_LINE: Final = 16 * 1024 * 1024
"""The longest ACP line accepted (16 MiB): a prompt with embedded context fits;
a runaway or hostile writer does not grow the process."""


class Oversized(Struct, frozen=True):
    """A line over the bound (its bytes were dropped)."""

    size: int


class LineFramer:
    """Feed it what stdin gave; it returns the complete lines and the refusals."""

    __slots__ = ("_buf", "_dropped", "_dropping", "max_line")

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._dropping = False  # inside a line already over the bound
        self._dropped = 0

    def feed(self, data: bytes) -> list[bytes | Oversized]:
        out: list[bytes | Oversized] = []
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            start = len(data) if end < 0 else end + 1
            if self._dropping:
                self._dropped += len(piece)
            elif len(self._buf) + len(piece) > self.max_line:
                self._dropping, self._dropped = True, len(self._buf) + len(piece)
                self._buf.clear()
            else:
                self._buf += piece
            if end < 0:
                break
            if self._dropping:
                out.append(Oversized(self._dropped))
                self._dropping, self._dropped = False, 0
                continue
            line = bytes(self._buf).rstrip(b"\r")
            self._buf.clear()
            if line.strip():
                out.append(line)
        return out

    def pending(self) -> bool:
        """Whether a line was begun and not ended (at end of input: a truncated frame)."""
        return bool(self._buf) or self._dropping
