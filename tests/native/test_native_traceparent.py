"""Both twins of `agentd_native.traceparent` against a reference written from the
W3C trace-context rules: the same answer for every string, valid or not.

The compiled twin converts the usual value (version 00, 55 one-byte
characters) in one pass of its own; everything else takes the pattern path
both twins share. Hypothesis mutates valid values one character at a time
(uppercase, non-hex, non-ASCII of every string width, whitespace, lengths
around 55, other versions and extra fields), so the fast path's checks are
exercised at every position.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from native_twins import twin

SETTINGS = settings(max_examples=600, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
GOOD = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
_FIELDS = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


def reference(value: object) -> tuple[int, int, bool] | None:
    """https://www.w3.org/TR/trace-context/#traceparent-header, as plainly as it reads."""
    if not isinstance(value, str):
        return None
    # RFC 9110 5.5: a field value excludes leading and trailing OWS (SP, HTAB), nothing else
    m = _FIELDS.fullmatch(value) or _FIELDS.fullmatch(value.strip(" \t"))
    if m is None:
        return None
    version, trace_id, parent_id, flags, extra = m.groups()
    if version == "ff" or (version == "00" and extra is not None):
        return None
    if int(trace_id, 16) == 0 or int(parent_id, 16) == 0:
        return None
    return int(trace_id, 16), int(parent_id, 16), bool(int(flags, 16) & 1)


@pytest.fixture(params=["python", "native"])
def tp(request):
    return twin("traceparent", request.param)


@pytest.mark.parametrize("around", ["\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0",
                                    "\u2028", "\u3000", "\n", "\r", "\r\n", " \n"])
def test_only_ows_is_trimmed(tp, around) -> None:
    """Anything around the value but SP and HTAB (str.strip's other whitespace:
    vertical tab, separators, NEL, no-break and ideographic spaces...) is invalid."""
    parse = tp.parse_traceparent
    assert parse(around + GOOD) is None
    assert parse(GOOD + around) is None
    assert parse(" " + around + GOOD + "\t") is None


def test_known_values(tp) -> None:
    parse = tp.parse_traceparent
    assert parse(GOOD) == (0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331, True)
    assert parse(GOOD[:-2] + "00")[2] is False
    assert parse(GOOD[:-2] + "ff")[2] is True
    assert parse(" " + GOOD + "\t") == parse(GOOD)  # surrounding OWS is tolerated
    assert parse(" \t " + GOOD + "\t\t") == parse(GOOD)
    assert parse("01" + GOOD[2:] + "-future") is not None  # a later version may add fields
    top = "00-" + "f" * 32 + "-" + "f" * 16 + "-01"  # ids whose top bit is set
    assert parse(top) == ((1 << 128) - 1, (1 << 64) - 1, True)
    for bad in ("", "garbage", GOOD.upper(), "ff" + GOOD[2:], GOOD + "-x", GOOD + "\n-",
                "00-" + "0" * 32 + "-b7ad6b7169203331-01",
                "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
                GOOD[:10] + "\u00e9" + GOOD[11:], GOOD[:10] + "\u4e00" + GOOD[11:],
                GOOD[:10] + "\U0001f600" + GOOD[11:], GOOD.replace("-", "_"),
                None, b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", 55):
        assert parse(bad) is None, bad


_ALPHABET = "0123456789abcdefABCDEF-_ g\t\n\u00e9\u4e00\U0001f600"


@st.composite
def near_valid(draw) -> str:
    value = draw(st.sampled_from([GOOD, "00-" + "f" * 32 + "-" + "0" * 15 + "1-00",
                                  "01" + GOOD[2:] + "-x"]))
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.integers(0, 2))
        i = draw(st.integers(0, len(value)))
        if op == 0 and i < len(value):  # replace one character
            value = value[:i] + draw(st.sampled_from(_ALPHABET)) + value[i + 1:]
        elif op == 1:  # insert one
            value = value[:i] + draw(st.sampled_from(_ALPHABET)) + value[i:]
        elif i < len(value):  # delete one
            value = value[:i] + value[i + 1:]
    return value


@SETTINGS
@given(st.one_of(near_valid(), st.text(alphabet=_ALPHABET, max_size=60)))
@example("00-" + "0" * 32 + "-" + "0" * 15 + "1-01")
@example("00-" + "0" * 31 + "1-" + "0" * 16 + "-01")
def test_both_twins_agree_with_the_reference(value: str) -> None:
    expected = reference(value)
    assert twin("traceparent", "python").parse_traceparent(value) == expected
    native = twin("traceparent", "native")
    assert native.parse_traceparent(value) == expected
