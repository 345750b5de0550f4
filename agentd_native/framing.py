"""Length-prefixed frames for the control wire (parent <-> subagent).

Wire format: a 4-byte big-endian unsigned length, then that many bytes of one
body (one JSON-RPC message).  Zero-length bodies are legal.

This file is one source for two twins (Cython "pure Python mode"):

* compiled by ``setup.py`` with the C types declared in ``framing.pxd`` into
  ``framing.<abi>.so``, which Python imports in preference to this file;
* run as-is by the interpreter when no extension was built (the fallback).

Keep it valid, dependency-free Python: nothing here may need Cython at run
time.  ``tests/test_native_twins.py`` checks that both twins agree.
"""

from __future__ import annotations

import types

from agentd_native.errors import FrameTooLarge

__all__ = ["COMPILED", "MAX_FRAME", "FrameDecoder", "FrameTooLarge", "encode_frame"]

#: Default maximum body length in bytes (16 MiB).
MAX_FRAME = 16 * 1024 * 1024

# Largest length a 4-byte header can announce.
_MAX_WIRE = 0xFFFFFFFF


def _probe() -> None:
    return None


#: True when this module is the compiled extension, False for the .py twin.
COMPILED: bool = type(_probe) is not types.FunctionType
_COMPILED = COMPILED  # a C bint in the extension (see framing.pxd)


def _slice(buf: bytes, start: int, end: int) -> bytes:
    """``buf[start:end]``; in C straight from the buffer, no slice object."""
    if _COMPILED:
        # declared in framing.pxd; C pointers once compiled (mypy reads the interpreted twin)
        return _bytes_from(_bytes_ptr(buf) + start, end - start)  # type: ignore[name-defined]  # noqa: F821
    return buf[start:end]


def _check_max(max_frame: int) -> int:
    if type(max_frame) is not int:
        max_frame = int(max_frame.__index__())
    if max_frame < 0 or max_frame > _MAX_WIRE:
        raise ValueError(f"max_frame must be between 0 and {_MAX_WIRE}, got {max_frame}")
    return max_frame


def encode_frame(body: bytes, max_frame: int = MAX_FRAME) -> bytes:
    """Return ``body`` prefixed with its 4-byte big-endian length.

    ``body`` may be any bytes-like object.  Raises :class:`FrameTooLarge` if
    ``len(body) > max_frame``.
    """
    if max_frame != MAX_FRAME:
        max_frame = _check_max(max_frame)
    size = len(body)
    if size > max_frame:
        raise FrameTooLarge(size, max_frame)
    return size.to_bytes(4, "big") + body


class FrameDecoder:
    """Incremental decoder: feed it bytes as they arrive, get whole bodies back.

    ``feed`` accepts any chunking, from one byte at a time to many MiB at once,
    and returns the bodies completed by that chunk (possibly none).  Work is
    linear in the bytes fed: frames inside a chunk are sliced straight out of
    it; a frame spanning chunks is kept as a list of pieces and joined once,
    when its last byte arrives.

    A header announcing more than ``max_frame`` bytes raises
    :class:`FrameTooLarge` at once, before any of that body is buffered; the
    exception's ``frames`` holds the bodies completed earlier in the same call.
    After that the decoder is failed for good: every further ``feed`` raises
    ``FrameTooLarge`` again (same ``size`` and ``limit``, empty ``frames``).
    The stream cannot be resynchronised, so the connection must be closed.
    """

    __slots__ = ("_chunks", "_error", "_need", "_pending", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = _check_max(max_frame)
        self._chunks = []  # type: list[bytes]
        self._pending = 0
        self._need = 4
        self._error = None  # type: FrameTooLarge | None

    @property
    def pending(self) -> int:
        """Bytes received but not yet returned as a body."""
        return self._pending

    @property
    def failed(self) -> bool:
        """True once an oversized header has been seen."""
        return self._error is not None

    def feed(self, data: bytes) -> list[bytes]:
        """Consume ``data``; return the complete bodies, in order."""
        if self._error is not None:
            raise FrameTooLarge(self._error.size, self._error.limit)
        if type(data) is not bytes:
            data = bytes(data)
        n = len(data)
        frames = []  # type: list[bytes]
        pos = 0
        while self._pending:
            # A header or body is in progress: complete it from the front of
            # ``data``, copying only the bytes it still needs, never the chunk.
            take = self._need - self._pending
            if take > n - pos:
                if pos < n:
                    self._chunks.append(_slice(data, pos, n) if pos else data)
                    self._pending += n - pos
                return frames
            self._chunks.append(_slice(data, pos, pos + take))
            pos += take
            head = b"".join(self._chunks)
            self._chunks = []
            self._pending = 0
            # ``head`` is exactly one header (then the body is awaited) or one frame.
            self._parse(head, 0, len(head), frames)
        if pos < n:
            self._parse(data, pos, n, frames)
        return frames

    def _parse(self, data: bytes, pos: int, n: int, frames: list[bytes]) -> int:
        """Append the frames in ``data[pos:n]`` to ``frames``; keep the rest."""
        p = data
        need = 4
        while n - pos >= 4:
            size = p[pos]
            size = (size << 8) | p[pos + 1]
            size = (size << 8) | p[pos + 2]
            size = (size << 8) | p[pos + 3]
            if size > self.max_frame:
                self._error = FrameTooLarge(size, self.max_frame)
                raise FrameTooLarge(size, self.max_frame, frames)
            end = pos + 4 + size
            if end > n:
                need = 4 + size
                break
            if _COMPILED:  # no slice object, no index boxing
                frames.append(_bytes_from(p + pos + 4, end - pos - 4))  # type: ignore[name-defined,operator]  # noqa: F821
            else:
                frames.append(data[pos + 4 : end])
            pos = end
        if pos < n:
            self._chunks.append(_slice(data, pos, n) if pos else data)
            self._pending = n - pos
        self._need = need
        return 0

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else f"pending={self._pending}"
        return f"<FrameDecoder max_frame={self.max_frame} {state}>"
