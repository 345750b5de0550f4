"""Incremental parser for ``text/event-stream`` (Server-Sent Events).

Implements the WHATWG HTML "event stream interpretation" rules for a single
stream, fed as raw bytes in any chunking:

* UTF-8 with U+FFFD replacement, decoded per complete line (a multi-byte
  character split across chunks is fine); one leading BOM on the stream is
  dropped;
* lines end with CRLF, LF or CR -- also a CR ending one chunk and the LF
  starting the next, which together are one line end;
* a blank line dispatches the event; ``:`` starts a comment; ``name:value``
  loses one space after the colon; a line without colon is a name with an
  empty value;
* ``event`` sets the type (default ``"message"``); ``data`` lines are joined
  with ``\\n``; ``id`` sets the last event ID unless the value contains NUL;
  ``retry`` is taken only if it is ASCII digits; other names are ignored;
* a dispatch with no ``data`` line produces no event, but still commits the
  ID and resets the type.

Two bounds a peer cannot talk its way past (``docs/security.md``):

* ``max_event``: the bytes one event may hold before its blank line -- all
  its lines as received (comments and fields alike, one byte for each line
  end, so a CRLF counts alike in every chunking) plus the incomplete line
  waiting for its end.  Counting every line makes crossing it independent of
  the chunking, and bounds what is held: the data lines and the open line.  Crossing it raises
  :class:`~agentd_native.errors.SSEEventTooLarge` at once, before more is
  buffered; the stream is then failed until ``close()``.
* ``retry`` is clamped to ``[retry_min, retry_max]`` milliseconds: a digit
  string of any length is a valid ``retry`` (the stream asked for "very
  long") and becomes ``retry_max``; it never raises and never sleeps a
  geological age.

It works on the undecoded bytes (field names compared bytewise, values decoded
one line at a time), which is equivalent to decoding first: every byte the
rules look at (CR, LF, ``:``, space, NUL, digits) is ASCII and can never be
part of, or produced by, a multi-byte sequence or a replacement.

One source, two twins (Cython pure Python mode): ``setup.py`` compiles it with
the C types of ``sse.pxd`` into an extension that shadows this file; without
it the interpreter runs this file unchanged.  The only divergence is
``_find``: ``memchr`` when compiled, ``bytes.find`` when interpreted.
"""

from __future__ import annotations

import types

from agentd_native.errors import SSEEventTooLarge

__all__ = ["COMPILED", "MAX_EVENT", "RETRY_MAX_MS", "RETRY_MIN_MS", "SSEEvent", "SSEEventTooLarge",
           "SSEParser"]

_BOM = b"\xef\xbb\xbf"

#: Default ``max_event``: the bytes of one event (its data lines plus the incomplete line).
MAX_EVENT = 64 * 1024 * 1024
#: Default clamp of ``retry`` in milliseconds: a parser with no policy of its own
#: takes the stream's value as low as it goes, and never above a minute.
RETRY_MIN_MS = 0
RETRY_MAX_MS = 60_000
_RETRY_DIGITS = 18  # more significant digits than this are past any clamp (and a C long long)
_BOUND_MAX = (1 << 62) - 1  # what a bound may be, in both twins (a C integer in one)


def _probe() -> None:
    return None


#: True when this module is the compiled extension, False for the .py twin.
COMPILED: bool = type(_probe) is not types.FunctionType
_COMPILED = COMPILED  # a C bint in the extension (see sse.pxd)


def _find(buf: bytes, byte: int, start: int, end: int) -> int:
    """Index of the first ``byte`` in ``buf[start:end]``, or -1."""
    if _COMPILED:
        p = buf
        # cimported in sse.pxd; C pointers once compiled (mypy reads the interpreted twin)
        q = _memchr(p + start, byte, end - start)  # type: ignore[name-defined,operator]  # noqa: F821
        if not q:
            return -1
        return q - p
    return buf.find(byte, start, end)


class SSEEvent:
    """One dispatched event: ``event`` type, ``data`` and ``id``.

    ``id`` is the parser's last event ID when the event was dispatched (it
    persists across events until the stream sets another).  Compare with
    ``==``; treat as immutable.
    """

    __slots__ = ("data", "event", "id")

    def __init__(self, event: str = "message", data: str = "", id: str = "") -> None:
        self.event = event
        self.data = data
        self.id = id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SSEEvent):
            return NotImplemented
        return self.event == other.event and self.data == other.data and self.id == other.id

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, SSEEvent):
            return NotImplemented
        return not (self.event == other.event and self.data == other.data and self.id == other.id)

    def __hash__(self) -> int:
        return hash((self.event, self.data, self.id))

    def __repr__(self) -> str:
        return f"SSEEvent(event={self.event!r}, data={self.data!r}, id={self.id!r})"


def _make_event(event: str, data: str, id_: str) -> SSEEvent:
    ev = SSEEvent.__new__(SSEEvent)
    ev.event = event
    ev.data = data
    ev.id = id_
    return ev


class SSEParser:
    """Feed bytes, get :class:`SSEEvent` objects.

    ``last_event_id`` is the stream's last event ID string: it starts ``""``
    and is updated at every dispatch (blank line) to the value of the latest
    valid ``id`` field -- also when no event is dispatched because there was
    no ``data``.  An ``id`` line is therefore not reflected until the blank
    line ending its event arrives, so an event cut off by a disconnect never
    advances the ID sent back in ``Last-Event-ID``.

    ``retry`` is the reconnection time in milliseconds from the latest valid
    ``retry`` field (``None`` until one arrives), clamped to ``[retry_min,
    retry_max]``; it takes effect at once.

    ``max_event`` bounds one event (see the module docstring): crossing it
    raises :class:`SSEEventTooLarge` carrying the events completed before it
    in the same ``feed``; every later ``feed`` raises it again (with no
    events) until ``close()``.

    ``close()`` marks the end of the stream: an unterminated event or line is
    discarded (never dispatched) and ``[]`` is returned.  The parser may then
    be fed a new stream (a reconnection): ``last_event_id`` and ``retry`` are
    kept, everything else starts afresh, as for a new EventSource connection.
    """

    __slots__ = (
        "_bom",
        "_chunks",
        "_data",
        "_data_more",
        "_event",
        "_failed",
        "_id",
        "_pending",
        "_size",
        "_skip_lf",
        "last_event_id",
        "max_event",
        "retry",
        "retry_max",
        "retry_min",
    )

    def __init__(self, max_event: int = MAX_EVENT, retry_min: int = RETRY_MIN_MS,
                 retry_max: int = RETRY_MAX_MS) -> None:
        if not (isinstance(max_event, int) and isinstance(retry_min, int)
                and isinstance(retry_max, int)):
            raise TypeError("SSEParser bounds must be ints")
        if not (0 <= max_event <= _BOUND_MAX and 0 <= retry_min <= retry_max <= _BOUND_MAX):
            raise ValueError(f"SSEParser bounds: expected 0 <= max_event={max_event} and "
                             f"0 <= retry_min={retry_min} <= retry_max={retry_max}, "
                             f"each at most {_BOUND_MAX}")
        self.max_event = max_event
        self.retry_min = retry_min
        self.retry_max = retry_max
        self.last_event_id = ""
        self.retry = None  # type: int | None
        self._chunks = []  # type: list[bytes]
        self._pending = 0
        self._size = 0  # bytes of the current event's data lines
        self._failed = None  # type: SSEEventTooLarge | None
        self._skip_lf = False
        self._bom = True
        self._data = None  # type: str | None  # first data line (most events have exactly one)
        self._data_more = None  # type: list[str] | None  # all data lines, once there is a second
        self._event = ""
        self._id = ""

    @property
    def pending(self) -> int:
        """Bytes of an incomplete line held until its line end arrives."""
        return self._pending

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Consume ``data``; return the events it completes, in order.

        Raises :class:`SSEEventTooLarge` when the event being read crosses
        ``max_event`` (and again on every call after, until ``close()``).
        """
        if self._failed is not None:
            raise SSEEventTooLarge(self._failed.size, self._failed.limit)
        if type(data) is not bytes:
            data = bytes(data)
        n = len(data)
        if n == 0:
            return []
        if self._pending:
            # An incomplete line is waiting: join only once a line end arrives,
            # so a long line fed in small chunks is copied once, not per chunk.
            # (Not while a leading BOM is undecided: its bytes are not the event's.)
            if not self._bom and _find(data, 10, 0, n) < 0 and _find(data, 13, 0, n) < 0:
                if self._size + self._pending + n > self.max_event:
                    self._fail(self._size + self._pending + n, [], self.last_event_id)
                self._chunks.append(data)
                self._pending += n
                return []
            self._chunks.append(data)
            buf = b"".join(self._chunks)
            n = len(buf)
            self._chunks = []
            self._pending = 0
        else:
            buf = data
        p = buf
        pos = 0
        if self._skip_lf:
            # The previous chunk ended with CR: an LF here completes that CRLF.
            self._skip_lf = False
            if p[0] == 10:
                pos = 1
        if self._bom:
            if n < 3 and _BOM.startswith(buf):
                self._chunks.append(buf)
                self._pending = n
                return []
            self._bom = False
            if buf.startswith(_BOM):
                pos = 3

        events = []
        first = self._data
        data_more = self._data_more
        event_type = self._event
        id_buf = self._id
        last_id = self.last_event_id
        retry = self.retry
        size = self._size
        max_event = self.max_event
        lf = -1
        cr = -1
        while pos < n:
            # Next line end: LF and CR positions are each found once and cached.
            if lf < pos:
                lf = _find(buf, 10, pos, n)
                if lf < 0:
                    lf = n
            if cr < pos:
                cr = _find(buf, 13, pos, n)
                if cr < 0:
                    cr = n
            if lf < cr:
                eol = lf
                nxt = lf + 1
            elif cr < n:
                eol = cr
                nxt = cr + 1
                if nxt < n:
                    if p[nxt] == 10:
                        nxt += 1
                else:
                    self._skip_lf = True
            else:
                break  # incomplete line

            if eol == pos:
                # Blank line: dispatch.
                last_id = id_buf
                size = 0
                if first is not None:
                    if data_more is not None:
                        first = "\n".join(data_more)
                        data_more = None
                    events.append(_make_event(event_type or "message", first, id_buf))
                    first = None
                event_type = ""
            else:
                # every line of the event counts, one byte for its line end (a CRLF
                # split across chunks or not): then whether the bound is crossed
                # never depends on how the stream was chunked
                size += eol - pos + 1
                if size > max_event:
                    self.retry = retry
                    self._fail(size, events, last_id)
                if p[pos] != 58:  # a field line, not a ':' comment
                    colon = _find(buf, 58, pos, eol)
                    if colon < 0:
                        name_end = eol
                        vs = eol
                    else:
                        name_end = colon
                        vs = colon + 1
                        if vs < eol and p[vs] == 32:
                            vs += 1
                    nl = name_end - pos
                    if nl == 4:
                        if buf.startswith(b"data", pos):
                            text = buf[vs:eol].decode("utf-8", "replace")
                            if first is None:
                                first = text
                            elif data_more is None:
                                data_more = [first, text]
                            else:
                                data_more.append(text)
                    elif nl == 5:
                        if buf.startswith(b"event", pos):
                            if eol - vs == 7 and buf.startswith(b"message", vs):
                                event_type = "message"  # the usual value: no decode, no new str
                            else:
                                event_type = buf[vs:eol].decode("utf-8", "replace")
                        elif buf.startswith(b"retry", pos):
                            value = buf[vs:eol]
                            if value.isdigit():
                                value = value.lstrip(b"0")
                                if len(value) > _RETRY_DIGITS:
                                    retry = self.retry_max
                                else:
                                    ms = int(value) if value else 0
                                    retry = (self.retry_min if ms < self.retry_min
                                             else self.retry_max if ms > self.retry_max else ms)
                    elif nl == 2:
                        if buf.startswith(b"id", pos) and _find(buf, 0, vs, eol) < 0:
                            id_buf = buf[vs:eol].decode("utf-8", "replace")
            pos = nxt

        if pos < n:
            if size + n - pos > max_event:
                self.retry = retry
                self._fail(size + n - pos, events, last_id)
            self._chunks.append(buf[pos:] if pos else buf)
            self._pending = n - pos
        self._size = size
        self._data = first
        self._data_more = data_more
        self._event = event_type
        self._id = id_buf
        self.last_event_id = last_id
        self.retry = retry
        return events

    def _fail(self, size: int, events: list[SSEEvent], last_id: str) -> None:
        """The event crossed ``max_event``: drop it, fail the stream, raise."""
        self.close()
        self.last_event_id = last_id  # the dispatches before it stand
        err = SSEEventTooLarge(size, self.max_event, events)
        self._failed = err
        raise err

    def close(self) -> list[SSEEvent]:
        """End of stream: drop any unterminated line or event; return ``[]``."""
        self._failed = None
        self._chunks = []
        self._pending = 0
        self._size = 0
        self._skip_lf = False
        self._bom = True
        self._data = None
        self._data_more = None
        self._event = ""
        self._id = ""
        return []

    def __repr__(self) -> str:
        return (
            f"<SSEParser last_event_id={self.last_event_id!r} retry={self.retry!r} "
            f"pending={self._pending}>"
        )
