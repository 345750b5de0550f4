"""Frame codec (agentd_native.framing): table tests, run on both twins.

"python" is framing.py loaded explicitly from its file; "native" is the
compiled extension (skipped when not built, a failure under CI=true).
"""

from __future__ import annotations

import os
import pickle

import pytest
from native_twins import load_pure, twin

import agentd_native
from agentd_native import FrameTooLarge
from agentd_native import framing as imported_framing

IN_CI = os.environ.get("CI", "").lower() == "true"
MIB = 1024 * 1024


@pytest.fixture(params=["python", "native"])
def fm(request):
    return twin("framing", request.param)


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def feed_all(decoder, chunks) -> list[bytes]:
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out


# --- encode_frame -----------------------------------------------------------


def test_max_frame_constant(fm):
    assert fm.MAX_FRAME == 16 * 1024 * 1024 == agentd_native.MAX_FRAME


def test_encode_header_is_big_endian_length(fm):
    assert fm.encode_frame(b"hello") == b"\x00\x00\x00\x05hello"
    assert fm.encode_frame(b"") == b"\x00\x00\x00\x00"
    assert fm.encode_frame(b"x" * 258)[:4] == b"\x00\x00\x01\x02"


@pytest.mark.parametrize("body", [bytearray(b"abc"), memoryview(b"abc")])
def test_encode_accepts_bytes_like(fm, body):
    assert fm.encode_frame(body) == b"\x00\x00\x00\x03abc"


def test_encode_exactly_max_ok_and_max_plus_one_fails(fm):
    assert fm.encode_frame(b"x" * 10, 10) == frame(b"x" * 10)
    with pytest.raises(FrameTooLarge) as info:
        fm.encode_frame(b"x" * 11, max_frame=10)
    assert (info.value.size, info.value.limit) == (11, 10)
    assert str(info.value) == "frame of 11 bytes exceeds the maximum of 10 bytes"


def test_encode_default_max(fm):
    body = bytes(fm.MAX_FRAME + 1)
    with pytest.raises(
        FrameTooLarge, match="frame of 16777217 bytes exceeds the maximum of 16777216"
    ):
        fm.encode_frame(body)


def test_encode_rejects_str(fm):
    with pytest.raises(TypeError):
        fm.encode_frame("text")


# --- FrameDecoder -------------------------------------------------------------


def test_whole_frames_in_one_chunk(fm):
    d = fm.FrameDecoder()
    assert d.feed(frame(b"a") + frame(b"bc") + frame(b"")) == [b"a", b"bc", b""]
    assert d.pending == 0


def test_zero_length_frames(fm):
    d = fm.FrameDecoder()
    assert d.feed(frame(b"") * 3) == [b"", b"", b""]
    assert d.feed(b"\x00\x00") == []
    assert d.feed(b"\x00\x00") == [b""]


def test_one_byte_at_a_time(fm):
    bodies = [b"", b"{}", b'{"jsonrpc":"2.0","method":"x"}', bytes(range(256)) * 3]
    stream = b"".join(frame(b) for b in bodies)
    d = fm.FrameDecoder()
    got = []
    for i in range(len(stream)):
        got.extend(d.feed(stream[i : i + 1]))
        assert d.pending == (i + 1) - sum(4 + len(b) for b in got)
    assert got == bodies
    assert d.pending == 0


def test_big_frame_one_byte_at_a_time(fm):
    body = os.urandom(256 * 1024)
    stream = frame(body)
    d = fm.FrameDecoder()
    got = []
    for i in range(len(stream)):
        got.extend(d.feed(stream[i : i + 1]))
    assert got == [body]


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_header_split_across_chunks(fm, cut):
    stream = frame(b"payload") + frame(b"x")
    d = fm.FrameDecoder()
    assert d.feed(stream[:cut]) == []
    assert d.pending == cut
    assert d.feed(stream[cut:]) == [b"payload", b"x"]


def test_every_split_point(fm):
    stream = frame(b"one") + frame(b"") + frame(b"three33") + frame(b"z")
    for cut in range(len(stream) + 1):
        d = fm.FrameDecoder()
        assert feed_all(d, [stream[:cut], stream[cut:]]) == [b"one", b"", b"three33", b"z"]


def test_many_mib_in_one_chunk(fm):
    bodies = [os.urandom(5 * MIB), b"small", os.urandom(3 * MIB + 7), b""]
    stream = b"".join(frame(b) for b in bodies)
    d = fm.FrameDecoder()
    assert d.feed(stream) == bodies


def test_big_stream_in_16k_chunks(fm):
    bodies = [bytes([i % 251]) * (i * 997 % 70_000) for i in range(200)]
    stream = b"".join(frame(b) for b in bodies)
    d = fm.FrameDecoder()
    chunks = [stream[i : i + 16384] for i in range(0, len(stream), 16384)]
    assert feed_all(d, chunks) == bodies


def test_exactly_max_is_accepted(fm):
    d = fm.FrameDecoder()
    body = bytes(fm.MAX_FRAME)
    assert d.feed(frame(body)) == [body]


def test_max_plus_one_raises_naming_the_size(fm):
    d = fm.FrameDecoder()
    with pytest.raises(FrameTooLarge) as info:
        d.feed((fm.MAX_FRAME + 1).to_bytes(4, "big"))
    err = info.value
    assert err.size == 16 * MIB + 1 and err.limit == 16 * MIB
    assert "16777217" in str(err) and "16777216" in str(err)
    assert isinstance(err, ValueError)


def test_oversize_raised_from_header_before_body(fm):
    d = fm.FrameDecoder(max_frame=100)
    assert d.feed(b"\x00\x00") == []
    with pytest.raises(FrameTooLarge) as info:
        d.feed(b"\x00\x65")  # 101, no body byte has arrived
    assert info.value.size == 101


def test_huge_announced_length(fm):
    d = fm.FrameDecoder()
    with pytest.raises(FrameTooLarge) as info:
        d.feed(b"\xff\xff\xff\xff")
    assert info.value.size == 0xFFFFFFFF


def test_error_is_sticky(fm):
    d = fm.FrameDecoder(max_frame=4)
    with pytest.raises(FrameTooLarge):
        d.feed(frame(b"12345"))
    assert d.failed
    for data in (frame(b"ok"), b"", b"\x00"):
        with pytest.raises(FrameTooLarge) as info:
            d.feed(data)
        assert (info.value.size, info.value.limit, info.value.frames) == (5, 4, [])


def test_frames_before_the_bad_header_ride_on_the_error(fm):
    d = fm.FrameDecoder(max_frame=4)
    with pytest.raises(FrameTooLarge) as info:
        d.feed(frame(b"ok") + frame(b"") + frame(b"12345"))
    assert info.value.frames == [b"ok", b""]


def test_custom_max_exact_and_over(fm):
    d = fm.FrameDecoder(max_frame=3)
    assert d.max_frame == 3
    assert d.feed(frame(b"abc")) == [b"abc"]
    with pytest.raises(FrameTooLarge):
        d.feed(frame(b"abcd"))


def test_zero_max_allows_only_empty_frames(fm):
    d = fm.FrameDecoder(max_frame=0)
    assert d.feed(frame(b"")) == [b""]
    with pytest.raises(FrameTooLarge):
        d.feed(frame(b"x"))


@pytest.mark.parametrize("bad", [-1, 0x1_0000_0000])
def test_invalid_max_frame(fm, bad):
    with pytest.raises(ValueError, match="max_frame"):
        fm.FrameDecoder(max_frame=bad)


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_feed_accepts_bytes_like(fm, kind):
    d = fm.FrameDecoder()
    assert d.feed(kind(frame(b"hi"))) == [b"hi"]


def test_feed_rejects_str(fm):
    with pytest.raises(TypeError):
        fm.FrameDecoder().feed("text")


def test_empty_feed(fm):
    d = fm.FrameDecoder()
    assert d.feed(b"") == []
    assert d.pending == 0


def test_frames_are_bytes(fm):
    d = fm.FrameDecoder()
    out = d.feed(frame(b"ab") + frame(b"cd")[:3]) + d.feed(frame(b"cd")[3:])
    assert out == [b"ab", b"cd"]
    assert all(type(b) is bytes for b in out)


def test_one_exception_class_for_both_twins():
    assert load_pure("framing").FrameTooLarge is FrameTooLarge
    assert imported_framing.FrameTooLarge is FrameTooLarge


def test_exception_pickles():
    err = FrameTooLarge(20_000_000, 16 * MIB)
    assert str(err) == "frame of 20000000 bytes exceeds the maximum of 16777216 bytes"
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), back.size, back.limit, str(back)) == (
        FrameTooLarge,
        err.size,
        err.limit,
        str(err),
    )
