"""The one guarded entry for decoding a peer's bytes.

A peer controls every byte it sends, so a decoder of those bytes can fail in
more ways than "not JSON": msgspec and the interpreter raise
``RecursionError`` for deep nesting (msgspec's nesting guard is the
interpreter's recursion limit, so what passes one decoder can trip the next,
called a few frames deeper), orjson raises ``JSONDecodeError`` /
``TypeError`` (depth beyond its own limit, integers beyond 64 bits),
jsonschema-rs ``ValueError`` ("Recursion limit reached"), ``urllib``
``ValueError`` (``https://[x``, port 99999), ``email.utils`` ``OverflowError``
for a date beyond the platform's range, and bytes that are not UTF-8
``UnicodeDecodeError``.  None of those may escape as a crash or an internal
error: each surface turns them into its own error of :mod:`agentd.errors`.

:data:`PEER_FAULTS` is that set of classes (``msgspec.DecodeError`` /
``ValidationError``, ``orjson.JSONDecodeError`` and ``UnicodeDecodeError``
are all ``ValueError`` subclasses), :func:`fault_text` the one wording of
each, and :func:`decode_peer` / :func:`loads_peer` / :func:`convert_peer` the
guarded calls: the existing decode in a ``try``, no second parse.  Hot paths
that cannot afford the extra call (the codec) write the same ``except
PEER_FAULTS`` inline.  See ``docs/messages.md`` and the limits table of
``docs/security.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NoReturn, TypeVar

import msgspec
import orjson

__all__ = [
    "FAULT_TEXT_MAX",
    "PEER_FAULTS",
    "convert_peer",
    "decode_peer",
    "fault_text",
    "loads_peer",
    "raise_peer",
]

T = TypeVar("T")

PEER_FAULTS: Final = (RecursionError, OverflowError, TypeError, ValueError)
"""What a decoder of peer input raises for input it refuses (never a bug of ours
to propagate: the input is the peer's fault)."""

FAULT_TEXT_MAX: Final = 200
"""The most characters of a decoder's own message carried into the error (the
message may quote the peer's input)."""

Fail = Callable[[str], BaseException]


def fault_text(exc: BaseException) -> str:
    """One short wording per failure kind, naming the problem and never more
    than :data:`FAULT_TEXT_MAX` characters of the decoder's message."""
    text = str(exc)
    if isinstance(exc, RecursionError) or "ecursion limit" in text:
        return "nested too deeply"
    if isinstance(exc, UnicodeDecodeError):
        return "not valid UTF-8"
    if isinstance(exc, OverflowError) or "64-bit" in text:
        return "a number out of range"
    return text[:FAULT_TEXT_MAX] or type(exc).__name__


def raise_peer(exc: BaseException, fail: Fail) -> NoReturn:
    """Raise ``fail(fault_text(exc))`` with the decoder's exception suppressed."""
    raise fail(fault_text(exc)) from None


def decode_peer(decode: Callable[[Any], T], data: Any, fail: Fail) -> T:
    """``decode(data)`` (a msgspec ``Decoder.decode``, a parser), every refusal
    raised as ``fail(text)``: the caller's own error type."""
    try:
        return decode(data)
    except PEER_FAULTS as exc:
        raise_peer(exc, fail)


def loads_peer(data: bytes | bytearray | memoryview | str, fail: Fail) -> Any:
    """``orjson.loads(data)`` guarded like :func:`decode_peer`."""
    try:
        return orjson.loads(data)
    except PEER_FAULTS as exc:
        raise_peer(exc, fail)


def convert_peer(obj: Any, type_: type[T], fail: Fail, **kw: Any) -> T:
    """``msgspec.convert(obj, type_, **kw)`` guarded like :func:`decode_peer`."""
    try:
        return msgspec.convert(obj, type_, **kw)
    except PEER_FAULTS as exc:
        raise_peer(exc, fail)
