"""W3C trace-context `traceparent` values: parsed to (trace id, parent id, sampled).

Why here: every inbound request that carries trace context (a self-MCP call's
`_meta.traceparent` or its HTTP header, a control-wire frame to a child) is
parsed on its request path while tracing is on; in Python the pattern match
and the two hex conversions are most of what a served request's span costs.

This file is one source for two twins (Cython "pure Python mode", see
``framing.py``): compiled with the C types in ``traceparent.pxd``, the usual
value (version 00, 55 characters) is checked and converted in one pass over
its characters; the interpreted twin, and the compiled one for anything
else, use the pattern. Both give the same answer for every string
(``tests/test_native_traceparent.py``).

The rules (https://www.w3.org/TR/trace-context/#traceparent-header): lowercase
hex fields `version-trace_id-parent_id-flags`; version ff is invalid; version
00 has exactly these four fields; a later version may append `-...` fields;
an all-zero trace id or parent id is invalid; the sampled flag is the lowest
bit of the flags. Around the value only HTTP's optional whitespace (RFC 9110
OWS: space and horizontal tab) is trimmed, as a header parser does; any other
character there (a vertical tab, a file separator, a no-break space...) makes
the value invalid, whichever twin parses it.
"""

from __future__ import annotations

import re
import types

__all__ = ["COMPILED", "parse_traceparent"]


def _probe() -> None:
    return None


#: True when this module is the compiled extension, False for the .py twin.
COMPILED: bool = type(_probe) is not types.FunctionType
_COMPILED = COMPILED  # a C bint in the extension (see traceparent.pxd)

_PATTERN = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_OWS = " \t"  # RFC 9110 optional whitespace: the only characters trimmed around a value
_ODD_HEX = frozenset("13579bdf")  # the last digit of the flags: the sampled bit


def _digit(c: int) -> int:
    """The value of a lowercase hex digit's code point, or -1."""
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    return -1


def _fast(value: str) -> tuple[int, int, bool] | None:
    """(Compiled twin only.) A version-00 value of exactly 55 one-byte characters,
    checked and converted in one pass over its bytes; None when it is anything
    else (then the pattern decides)."""
    p = _ucs1(value)  # type: ignore[name-defined]  # noqa: F821 - declared in the .pxd
    if not p or len(value) != 55 or p[0] != 48 or p[1] != 48 or p[2] != 45 \
            or p[35] != 45 or p[52] != 45:  # "00-", "-", "-"
        return None
    hi = lo = span = flags = 0  # the trace id's halves, the parent id, the flags
    for i in range(3, 55):
        if i == 35 or i == 52:
            continue
        d = _digit(p[i])
        if d < 0:
            return None
        if i < 19:
            hi = (hi << 4) | d
        elif i < 35:
            lo = (lo << 4) | d
        elif i < 52:
            span = (span << 4) | d
        else:
            flags = (flags << 4) | d
    trace_id = hi  # a Python int from here (C integers in the compiled twin)
    parent_id = span
    return (trace_id << 64) | lo, parent_id, (flags & 1) == 1


def parse_traceparent(value: object) -> tuple[int, int, bool] | None:
    """(trace id, parent span id, sampled) of a W3C traceparent, or None if invalid."""
    if not isinstance(value, str):
        return None
    if _COMPILED:
        fast = _fast(value)
        if fast is not None:
            if not fast[0] or not fast[1]:
                return None
            return fast
    if _PATTERN.fullmatch(value) is None:
        value = value.strip(_OWS)
        if _PATTERN.fullmatch(value) is None:
            return None
    version = value[:2]
    if version == "ff" or (version == "00" and len(value) != 55):  # 00 has no extra fields
        return None
    trace_id, span_id = int(value[3:35], 16), int(value[36:52], 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, value[54] in _ODD_HEX
