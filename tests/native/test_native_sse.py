"""SSE parser (agentd_native.sse): one table test per WHATWG rule, on both twins.

Every case is fed whole, one byte at a time, and split at every offset; all
chunkings must give the same events and state.
"""

from __future__ import annotations

import os
import sys

import pytest
from native_twins import twin

import agentd_native

IN_CI = os.environ.get("CI", "").lower() == "true"
BOM = b"\xef\xbb\xbf"


@pytest.fixture(params=["python", "native"])
def sm(request):
    return twin("sse", request.param)


def run(sm, chunks):
    p = sm.SSEParser()
    events = []
    for chunk in chunks:
        events.extend((e.event, e.data, e.id) for e in p.feed(chunk))
    return events, p.last_event_id, p.retry


def parse(sm, stream: bytes):
    """Parse ``stream`` under every chunking; assert they agree; return the result."""
    whole = run(sm, [stream])
    assert run(sm, [stream[i : i + 1] for i in range(len(stream))]) == whole
    for cut in range(1, len(stream)):
        assert run(sm, [stream[:cut], stream[cut:]]) == whole, cut
    return whole


def events_of(sm, stream: bytes):
    return parse(sm, stream)[0]


# --- dispatch and fields -------------------------------------------------------


def test_simple_message(sm):
    assert events_of(sm, b"data: hello\n\n") == [("message", "hello", "")]


def test_event_type(sm):
    assert events_of(sm, b"event: update\ndata: x\n\n") == [("update", "x", "")]


def test_event_type_resets_after_dispatch(sm):
    assert events_of(sm, b"event: a\ndata: 1\n\ndata: 2\n\n") == [
        ("a", "1", ""),
        ("message", "2", ""),
    ]


def test_empty_event_type_means_message(sm):
    assert events_of(sm, b"event:\ndata: x\n\n") == [("message", "x", "")]


def test_multiline_data_joined_with_lf(sm):
    assert events_of(sm, b"data: a\ndata: b\ndata: c\n\n") == [("message", "a\nb\nc", "")]


def test_only_final_lf_removed(sm):
    assert events_of(sm, b"data: a\ndata:\n\n") == [("message", "a\n", "")]
    assert events_of(sm, b"data\ndata\n\n") == [("message", "\n", "")]


def test_empty_data_line_dispatches_empty_string(sm):
    assert events_of(sm, b"data:\n\n") == [("message", "", "")]


def test_one_leading_space_stripped(sm):
    assert events_of(sm, b"data:x\n\n") == [("message", "x", "")]
    assert events_of(sm, b"data: x\n\n") == [("message", "x", "")]
    assert events_of(sm, b"data:  x \n\n") == [("message", " x ", "")]
    assert events_of(sm, b"data:\tx\n\n") == [("message", "\tx", "")]


def test_colon_in_value_kept(sm):
    assert events_of(sm, b'data: {"a": "b:c"}\n\n') == [("message", '{"a": "b:c"}', "")]


def test_line_without_colon_is_field_with_empty_value(sm):
    assert events_of(sm, b"data\n\n") == [("message", "", "")]
    assert events_of(sm, b"event\ndata: x\n\n") == [("message", "x", "")]


def test_comments_ignored(sm):
    assert events_of(sm, b": keep-alive\n:\ndata: x\n: mid\n\n") == [("message", "x", "")]


def test_comment_only_block_dispatches_nothing(sm):
    assert events_of(sm, b": ping\n\n") == []


def test_unknown_and_misspelt_fields_ignored(sm):
    stream = b"foo: bar\nData: no\ndata : no\n data: no\nevent : no\ndata: yes\n\n"
    assert events_of(sm, stream) == [("message", "yes", "")]


def test_no_data_no_event_but_type_reset(sm):
    assert events_of(sm, b"event: lost\n\ndata: x\n\n") == [("message", "x", "")]


def test_blank_lines_alone(sm):
    assert events_of(sm, b"\n\n\r\n\r") == []


# --- line ends -----------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_each_line_end(sm, eol):
    stream = b"event: e" + eol + b"data: a" + eol + b"data: b" + eol + eol
    assert events_of(sm, stream) == [("e", "a\nb", "")]


def test_mixed_line_ends(sm):
    stream = b"data: a\rdata: b\r\ndata: c\n\r\ndata: d\r\r"
    assert events_of(sm, stream) == [("message", "a\nb\nc", ""), ("message", "d", "")]


def test_cr_cr_is_blank_line(sm):
    assert events_of(sm, b"data: x\r\r") == [("message", "x", "")]


def test_lf_cr_is_two_line_ends(sm):
    assert events_of(sm, b"data: x\n\rdata: y\n\n") == [("message", "x", ""), ("message", "y", "")]


def test_crlf_split_across_chunks_is_one_line_end(sm):
    p = sm.SSEParser()
    assert p.feed(b"data: a\r") == []
    # if this LF were a second line end it would be a blank line and dispatch "a"
    assert [(e.event, e.data) for e in p.feed(b"\ndata: b\r")] == []
    assert [(e.event, e.data) for e in p.feed(b"\n\r")] == [("message", "a\nb")]
    assert p.feed(b"\n") == []


def test_cr_at_chunk_end_dispatches_without_waiting(sm):
    p = sm.SSEParser()
    assert p.feed(b"data: a\n") == []
    assert [e.data for e in p.feed(b"\r")] == ["a"]


# --- decoding ------------------------------------------------------------------


def test_utf8_split_across_chunks(sm):
    stream = "data: é数据😀\nevent: ünï\n\n".encode()
    assert events_of(sm, stream) == [("ünï", "é数据😀", "")]


def test_invalid_utf8_replaced(sm):
    stream = b"data: a\xffb\xe2\x82\n\n"
    assert events_of(sm, stream) == [("message", "a\ufffdb\ufffd", "")]


def test_truncated_sequence_at_line_end(sm):
    assert events_of(sm, b"data: \xe6\x95\ndata: \x8d\n\n") == [("message", "\ufffd\n\ufffd", "")]


def test_leading_bom_stripped(sm):
    assert events_of(sm, BOM + b"data: x\n\n") == [("message", "x", "")]


def test_bom_stripped_once_only(sm):
    # a second BOM makes the field name "\ufeffdata": unknown, ignored
    assert events_of(sm, BOM + BOM + b"data: x\n\ndata: y\n\n") == [("message", "y", "")]


def test_bom_on_later_line_not_stripped(sm):
    assert events_of(sm, b"\n" + BOM + b"data: x\n\ndata: y\n\n") == [("message", "y", "")]


def test_bom_inside_value_kept(sm):
    assert events_of(sm, b"data: " + BOM + b"x\n\n") == [("message", "\ufeffx", "")]


def test_bom_then_blank_line(sm):
    assert events_of(sm, BOM + b"\ndata: x\n\n") == [("message", "x", "")]


def test_partial_bom_then_other_bytes(sm):
    assert events_of(sm, b"\xef\xbbdata: x\n\ndata: y\n\n") == [("message", "y", "")]


def test_nul_in_data_kept(sm):
    assert events_of(sm, b"data: a\x00b\n\n") == [("message", "a\x00b", "")]


# --- id ------------------------------------------------------------------------


def test_id_attached_and_persists(sm):
    stream = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\n"
    events, last_id, _ = parse(sm, stream)
    assert events == [("message", "a", "1"), ("message", "b", "1"), ("message", "c", "2")]
    assert last_id == "2"


def test_id_with_nul_ignored(sm):
    events, last_id, _ = parse(sm, b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n")
    assert events == [("message", "a", "1"), ("message", "b", "1")]
    assert last_id == "1"


def test_empty_id_resets(sm):
    events, last_id, _ = parse(sm, b"id: 1\ndata: a\n\nid\ndata: b\n\n")
    assert events == [("message", "a", "1"), ("message", "b", "")]
    assert last_id == ""


def test_id_without_data_still_commits(sm):
    events, last_id, _ = parse(sm, b"id: 7\n\n")
    assert events == [] and last_id == "7"


def test_id_committed_only_at_dispatch(sm):
    p = sm.SSEParser()
    p.feed(b"id: 1\ndata: a\n\nid: 2\ndata: b\n")
    assert p.last_event_id == "1"  # event 2 is not complete
    assert p.close() == []
    assert p.last_event_id == "1"


def test_id_decoded_utf8(sm):
    events, last_id, _ = parse(sm, "id: ключ\ndata: x\n\n".encode())
    assert events == [("message", "x", "ключ")] and last_id == "ключ"


def test_id_last_one_wins(sm):
    assert events_of(sm, b"id: 1\nid: 2\ndata: x\n\n") == [("message", "x", "2")]


# --- retry ---------------------------------------------------------------------


def test_retry_digits(sm):
    assert parse(sm, b"retry: 1500\n")[2] == 1500  # takes effect without dispatch


def test_retry_latest_valid_wins(sm):
    assert parse(sm, b"retry: 10\nretry: 20\n\nretry: x\n\n")[2] == 20


@pytest.mark.parametrize(
    "line",
    [
        b"retry: 12a",
        b"retry: -1",
        b"retry:  12",
        b"retry: 1.5",
        b"retry:",
        b"retry",
        b"retry: \xd9\xa3",
    ],
)
def test_retry_invalid_ignored(sm, line):
    assert parse(sm, line + b"\n\n")[2] is None


def test_retry_leading_zeros(sm):
    assert parse(sm, b"retry: 007\n")[2] == 7


def test_retry_of_any_length_is_clamped(sm):
    assert parse(sm, b"retry: " + b"9" * 5000 + b"\nretry: 3\n")[2] == 3
    for digits in (b"100000000000000000000", b"9" * 400, b"9" * 5000, b"60001"):
        p = sm.SSEParser()
        p.feed(b"retry: " + digits + b"\n")
        assert p.retry == sm.RETRY_MAX_MS  # the default clamp: never an OverflowError
    assert parse(sm, b"retry: " + b"0" * 400 + b"12\n")[2] == 12  # leading zeros are no size


def test_retry_clamp_bounds(sm):
    p = sm.SSEParser(retry_min=100, retry_max=250)
    p.feed(b"retry: 0\n")
    assert p.retry == 100
    p.feed(b"retry: 200\n")
    assert p.retry == 200
    p.feed(b"retry: 100000000000000000000\n")
    assert p.retry == 250
    with pytest.raises(ValueError):
        sm.SSEParser(retry_min=10, retry_max=5)
    with pytest.raises(ValueError):
        sm.SSEParser(max_event=-1)
    for huge in ({"max_event": 1 << 70}, {"retry_max": 1 << 64}):  # both twins: ValueError
        with pytest.raises(ValueError):
            sm.SSEParser(**huge)
    with pytest.raises(TypeError):
        sm.SSEParser(max_event=1.5)


# --- the event bound -----------------------------------------------------------------


def test_an_endless_event_raises_at_the_bound(sm):
    """data lines with no blank line: the parser raises once they pass max_event,
    holding no more than that, and stays failed until close()."""
    p = sm.SSEParser(max_event=1000)
    line = b"data: " + b"x" * 94 + b"\n"  # 101 bytes a line
    fed = 0
    with pytest.raises(agentd_native.SSEEventTooLarge) as info:
        while True:
            assert p.feed(line) == []
            fed += 1
            assert fed < 20
    assert fed == 9 and info.value.limit == 1000 and info.value.size == 1010
    with pytest.raises(agentd_native.SSEEventTooLarge) as again:
        p.feed(b"\n")
    assert again.value.events == [] and again.value.limit == 1000
    p.close()
    assert [e.data for e in p.feed(b"data: ok\n\n")] == ["ok"]


def test_an_endless_line_raises_at_the_bound(sm):
    p = sm.SSEParser(max_event=1000)
    assert p.feed(b"data: " + b"y" * 900) == []
    with pytest.raises(agentd_native.SSEEventTooLarge) as info:
        p.feed(b"y" * 200)
    assert info.value.size == 1106
    assert p.pending == 0  # nothing of it is kept


def test_events_before_the_oversized_one_are_handed_over(sm):
    p = sm.SSEParser(max_event=50)
    with pytest.raises(agentd_native.SSEEventTooLarge) as info:
        p.feed(b"id: 7\ndata: first\n\ndata: " + b"z" * 60 + b"\n")
    assert [(e.data, e.id) for e in info.value.events] == [("first", "7")]
    assert p.last_event_id == "7"  # the dispatched event's id stands


def test_events_within_the_bound_are_unaffected(sm):
    p = sm.SSEParser(max_event=20)
    events = p.feed(b"data: 0123456789\n\n" * 50)
    assert len(events) == 50
    # every line of an event counts (a comment too): chunking never moves the verdict
    stream = b":" + b"c" * 15 + b"\n" + b"data: ok\n\n"
    with pytest.raises(agentd_native.SSEEventTooLarge):
        p.feed(stream)
    p.close()
    assert p.feed(b": keep-alive\n\ndata: ok\n\n")[0].data == "ok"  # each event on its own


def test_retry_does_not_create_event(sm):
    assert events_of(sm, b"retry: 5\n\n") == []


# --- end of stream -----------------------------------------------------------------


def test_close_discards_unterminated_event(sm):
    p = sm.SSEParser()
    assert p.feed(b"data: a\n") == []
    assert p.close() == []


def test_close_discards_partial_line(sm):
    p = sm.SSEParser()
    assert p.feed(b"data: a\n\ndata: b") != []
    assert p.pending == len(b"data: b")
    assert p.close() == []
    assert p.pending == 0


def test_new_stream_after_close(sm):
    p = sm.SSEParser()
    p.feed(b"retry: 9\nid: 1\ndata: a\n\nevent: x\ndata: partial\n")
    p.close()
    assert (p.last_event_id, p.retry) == ("1", 9)
    # fresh buffers (and a fresh id buffer, as for a new connection), BOM re-armed
    got = [(e.event, e.data, e.id) for e in p.feed(BOM + b"data: b\n\n")]
    assert got == [("message", "b", "")]
    assert p.last_event_id == ""


def test_initial_state(sm):
    p = sm.SSEParser()
    assert (p.last_event_id, p.retry, p.pending) == ("", None, 0)


# --- chunking and inputs ---------------------------------------------------------


def test_large_data_line_in_small_chunks(sm):
    payload = b"x" * (1024 * 1024)
    stream = b"id: big\ndata: " + payload + b"\n\n"
    p = sm.SSEParser()
    out = []
    for i in range(0, len(stream), 16384):
        out.extend(p.feed(stream[i : i + 16384]))
    assert [(e.id, len(e.data)) for e in out] == [("big", len(payload))]


def test_many_events_one_chunk(sm):
    stream = b"".join(b'id: %d\ndata: {"n": %d}\n\n' % (i, i) for i in range(1000))
    out = sm.SSEParser().feed(stream)
    assert [e.id for e in out] == [str(i) for i in range(1000)]
    assert out[-1].data == '{"n": 999}'


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_feed_accepts_bytes_like(sm, kind):
    assert [e.data for e in sm.SSEParser().feed(kind(b"data: x\n\n"))] == ["x"]


def test_feed_rejects_str(sm):
    with pytest.raises(TypeError):
        sm.SSEParser().feed("data: x\n\n")


def test_empty_feed(sm):
    assert sm.SSEParser().feed(b"") == []


# --- SSEEvent ------------------------------------------------------------------


def test_event_value_semantics(sm):
    a = sm.SSEEvent("message", "x", "1")
    assert a == sm.SSEEvent("message", "x", "1")
    assert a != sm.SSEEvent("message", "y", "1")
    assert hash(a) == hash(sm.SSEEvent("message", "x", "1"))
    assert repr(a) == "SSEEvent(event='message', data='x', id='1')"
    assert sm.SSEEvent() == sm.SSEEvent("message", "", "")
    assert sm.SSEEvent(data="d").event == "message"
    assert a != ("message", "x", "1")


def test_parser_returns_comparable_events(sm):
    (event,) = sm.SSEParser().feed(b"event: e\nid: 3\ndata: d\n\n")
    assert event == sm.SSEEvent(event="e", data="d", id="3")


def test_package_exports():
    assert set(agentd_native.__all__) == {
        "MAX_FRAME",
        "NATIVE",
        "FrameDecoder",
        "FrameTooLarge",
        "SSEEvent",
        "SSEEventTooLarge",
        "SSEParser",
        "encode_frame",
    }
    from agentd_native import otlp, span, traceparent

    assert agentd_native.NATIVE == (agentd_native.framing.COMPILED and agentd_native.sse.COMPILED
                                    and otlp.COMPILED and traceparent.COMPILED and span.COMPILED)
    if IN_CI:
        assert agentd_native.NATIVE, "CI=true requires the compiled agentd_native"


def test_import_is_cheap():
    import subprocess

    code = (
        "import sys, agentd_native; "
        "bad = [m for m in ('asyncio', 'aiohttp', 'logging', 'Cython', 'cython') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert out.stderr == ""
