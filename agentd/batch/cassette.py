"""Batch cassettes: one sample's brokered I/O, recorded and replayed (docs/batch.md).

A cassette is one JSON Lines file per sample (format version
`CASSETTE_VERSION`, stable: a new member or meaning is a new version):

* line 1, the header: `{"cassette": 1, "sample": ID, "scope": [...],
  "catalogue": {...}}`: the servers the sample may use and what it was
  offered of them (tools, resources, instructions), as its first frame
  carried it;
* then one line per request of the sample's subtree, in the order answered:
  `{"handle": H, "step": K, "request": {...}, "response": {...}}`, or
  `"error": {"code", "message"}` in place of `response`. `handle` is
  relative to the sample (`""` the sample itself, `".1"` its first
  subagent, `".1.2"` …), `step` the K-th request of that handle;
  `request` and `response` are the control wire's `io/request` and its
  answer (`kind`: complete/call/read/subscribe/unsubscribe/a2a; completion/
  observation/done) without the trace context, which differs per run;
* and, since version 2, one line per resource update delivered to a handle
  of the subtree: `{"handle": H, "after": K, "update": {"server", "uri"}}`,
  routed to H once the response of H's K-th request had been sent (K >= 1:
  only a handle that subscribed gets one, and subscribing is a request).
  Replay sends it to H right after it answered H's K-th request, so it
  reaches H at the same point of H's sequence as in the recording.
  Version-1 cassettes (no update lines) still replay.

Every line goes through the log's redaction (registered secrets: resolved
`{{secret:…}}` values, gateway keys, OAuth tokens, bearers) before it is
written: `scrubbed_line`, the results file's scrubber too. A cassette is
written to a fresh temporary file beside it and renamed into place when the
sample ends (never through a link planted at its predictable name), and read
only if it is a regular file, not a link, within `--cassette-bytes` whatever
`stat` says (agentd.batch.files). A recorded answer larger than the live
bound of its kind (`AnswerBounds`) is not replayed: that sample fails naming
the bound, as a live answer past it would. Replay looks a request up by `(handle, step)`: every handle's
requests are sequential, so the lookup does not depend on how the subtree's
handles interleaved. A request that differs from the recorded one, a request
the recording does not have, or a recording with requests the run never made
is a divergence (an update recorded after a step the run never reached is
reported as that step): its `Divergence` names the sample, the handle's step and the
first difference (a JSON path and both values).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any

import msgspec

from agentd.batch.files import lines_within, open_regular, scrubbed_line
from agentd.child.control import (
    Catalogue,
    IoCompletion,
    IoRequest,
    IoResult,
)
from agentd.config.model import DEFAULT_CASSETTE_BYTES
from agentd.errors import TreeError
from agentd.journal.exchange import (
    AnswerBounds,
    ErrorBody,
    decode_result,
    first_difference,
    request_json,
)
from agentd.output import Usage
from agentd.wire.guard import PEER_FAULTS, fault_text

CASSETTE_VERSION = 3
# a version-2 cassette is a version 3 without `model`/`sampling` in its header, a
# version 1 a version 2 without update lines
READABLE_VERSIONS = (1, 2, 3)
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class Divergence:
    """A replayed sample asked for something its cassette does not hold: an
    expected outcome of a replay (the sample fails), so a value, not an error."""

    text: str

    def __str__(self) -> str:
        return self.text


class Header(msgspec.Struct, forbid_unknown_fields=True):
    cassette: int
    sample: str
    scope: list[str]
    catalogue: Catalogue | None = None
    # what the recording asked the gateway with, besides the messages: the model and
    # the sampling fields every request's body carried (--temperature ... --model-param)
    model: str | None = None
    sampling: dict[str, Any] | None = None


class Entry(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A request and its answer. The response stays the recorded JSON (`Raw`):
    its size is checked against its kind's bound before anything decodes it."""

    handle: str
    step: int
    request: dict[str, Any]
    response: msgspec.Raw = msgspec.Raw()
    error: ErrorBody | None = None


class UpdateBody(msgspec.Struct, forbid_unknown_fields=True):
    server: str
    uri: str


class UpdateLine(msgspec.Struct, forbid_unknown_fields=True):
    """A `notifications/resources/updated` routed to `handle` after its step `after`."""

    handle: str
    after: int
    update: UpdateBody


class _Peek(msgspec.Struct):
    """Which kind a line is (nothing else of it is built)."""

    update: msgspec.Raw = msgspec.Raw()


_peek = msgspec.json.Decoder(_Peek)
_entry = msgspec.json.Decoder(Entry)
_update = msgspec.json.Decoder(UpdateLine)


def _decode_line(line: bytes) -> Entry | UpdateLine:
    if _peek.decode(line).update:
        upd = _update.decode(line)
        if upd.after < 1:
            raise msgspec.ValidationError("an update line's `after` is at least 1")
        return upd
    return _entry.decode(line)


def cassette_path(directory: str, sample_id: str) -> str:
    """The file of a sample: a readable slug and a hash of the id (an id is
    untrusted text: it never becomes a path of its own)."""
    digest = hashlib.sha256(sample_id.encode()).hexdigest()[:16]
    slug = _SLUG.sub("_", sample_id)[:64].strip("._") or "sample"
    return os.path.join(directory, f"{slug}-{digest}.jsonl")


class Recorder:
    """Writes one sample's cassette as its requests are answered.

    The lines go to a new file of a random name beside the cassette (created
    exclusively, mode 0600), renamed onto the cassette's name by `close` (what
    was written, as before a failed line): a link planted at that predictable
    name is replaced, never followed. The cassette is bounded by ``max_bytes``
    (``--cassette-bytes``, the bound replay reads it with): a line that would
    cross it is not written and raises ``OSError(EFBIG)``, which fails the
    sample as unrecorded, the same as a full disk, so a peer flooding updates
    cannot fill the disk."""

    def __init__(self, directory: str, sample_id: str, scope: list[str],
                 catalogue: Catalogue | None, *,
                 max_bytes: int = DEFAULT_CASSETTE_BYTES, model: str | None = None,
                 sampling: dict[str, Any] | None = None) -> None:
        self.sample = sample_id
        self.path = cassette_path(directory, sample_id)
        self.max_bytes = max_bytes
        self._written = 0
        fd, self._tmp = tempfile.mkstemp(dir=directory, suffix=".tmp",
                                         prefix=f".{os.path.basename(self.path)}.")
        self._f = os.fdopen(fd, "wb")
        self._line(Header(CASSETTE_VERSION, sample_id, scope, catalogue, model,
                          sampling or None))

    def _line(self, obj: Any) -> None:
        line = scrubbed_line(obj)
        if self._written + len(line) > self.max_bytes:
            raise OSError(errno.EFBIG, f"past --cassette-bytes={self.max_bytes}")
        self._f.write(line)
        self._f.flush()
        self._written += len(line)

    def add(self, handle: str, step: int, req: IoRequest, result: IoResult | None = None,
            error: ErrorBody | None = None) -> None:
        response = msgspec.Raw(msgspec.json.encode(result)) if result is not None \
            else msgspec.Raw()
        self._line(Entry(handle, step, request_json(req), response, error))

    def update(self, handle: str, after: int, server: str, uri: str) -> None:
        self._line(UpdateLine(handle, after, UpdateBody(server, uri)))

    def close(self) -> None:
        """Put the cassette in place; raises the OSError of a rename that fails
        (the temporary file is removed then)."""
        if self._f.closed:
            return
        try:
            self._f.close()
            os.replace(self._tmp, self.path)
        finally:
            if os.path.lexists(self._tmp):
                os.unlink(self._tmp)


class Replay:
    """One sample's cassette, answering its requests (see the module doc).

    Built from the file (blocking reads: `SampleBroker.load` runs it off the
    event loop); a TreeError names a cassette that is missing, not a regular
    file, larger than ``max_bytes`` or not in the format."""

    def __init__(self, directory: str, sample_id: str, *,
                 max_bytes: int = DEFAULT_CASSETTE_BYTES,
                 bounds: AnswerBounds = AnswerBounds()) -> None:
        self.sample = sample_id
        self.path = path = cassette_path(directory, sample_id)
        self.bounds = bounds
        self.spent = Usage()  # the recorded usage of the answers replayed so far
        try:
            fd = open_regular(path, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise TreeError(f"no cassette for sample {sample_id!r}: {path}: "
                            f"{exc.strerror or exc}") from None
        except OSError as exc:
            raise TreeError(f"cassette {path}: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "rb") as f:
                lines = lines_within(f, max_bytes)
        except OSError as exc:
            raise TreeError(f"cassette {path}: {exc.strerror or exc}") from None
        if lines is None:
            raise TreeError(f"cassette {path}: larger than --cassette-bytes={max_bytes}")
        try:
            self.header = msgspec.json.decode(lines[0] if lines else b"", type=Header)
            body = [_decode_line(ln) for ln in lines[1:] if ln.strip()]
        except PEER_FAULTS as exc:  # an edited file is input like any other
            raise TreeError(f"cassette {path}: not a version-{CASSETTE_VERSION} "
                            f"cassette: {fault_text(exc)}") from None
        if self.header.cassette not in READABLE_VERSIONS or self.header.sample != sample_id:
            raise TreeError(f"cassette {path}: version {self.header.cassette} of sample "
                                f"{self.header.sample!r}, expected version "
                                f"{CASSETTE_VERSION} (or 1, 2) of {sample_id!r}")
        updates = [u for u in body if isinstance(u, UpdateLine)]
        if updates and self.header.cassette < 2:
            raise TreeError(f"cassette {path}: an update line in a version-1 cassette")
        self._entries = {(e.handle, e.step): e for e in body if isinstance(e, Entry)}
        self._used: set[tuple[str, int]] = set()
        self._updates: dict[tuple[str, int], list[UpdateBody]] = {}
        for u in updates:
            self._updates.setdefault((u.handle, u.after), []).append(u.update)
        self._delivered: set[tuple[str, int]] = set()

    def updates_after(self, handle: str, step: int) -> list[UpdateBody]:
        """The updates recorded for `handle` right after its `step`-th response
        (in the order routed); each is handed out once."""
        key = (handle, step)
        if key in self._delivered:
            return []
        self._delivered.add(key)
        return self._updates.get(key, [])

    def _diverged(self, handle: str, step: int, what: str) -> Divergence:
        who = "the sample" if not handle else f"subagent {handle}"
        return Divergence(f"replay diverged at sample {self.sample!r} step {step} of "
                          f"{who}: {what}")

    def _refused(self, handle: str, step: int, what: str) -> Divergence:
        who = "the sample" if not handle else f"subagent {handle}"
        return Divergence(f"cassette {self.path}: step {step} of {who}: {what}")

    def answer(self, handle: str, step: int,
               req: IoRequest) -> IoResult | ErrorBody | Divergence:
        """The recorded answer of this request, or the Divergence if it is not the
        one (or if the recorded answer is past its kind's live bound, or not one)."""
        entry = self._entries.get((handle, step))
        now = request_json(req)
        if entry is None:
            return self._diverged(handle, step, f"a {now.get('kind')} request the recording "
                                                "does not have")
        diff = first_difference(entry.request, now, "request")
        if diff is not None:
            return self._diverged(handle, step, diff)
        self._used.add((handle, step))
        if entry.error is not None:
            limit, name = self.bounds.of(now.get("kind"))
            if len(entry.error.message) > limit:
                return self._refused(handle, step, f"a recorded answer of "
                                     f"{len(entry.error.message)} bytes, past {name}: "
                                     "not replayed")
            return entry.error
        result = decode_result(entry.response, now.get("kind"), self.bounds)
        if isinstance(result, str):
            return self._refused(handle, step, result)
        if isinstance(result, IoCompletion):  # it keeps its recorded usage: the sample's
            self.spent.add(result.completion.usage)  # loop counts it as it did, the line
        return result                                 # reports what the recording spent

    def unplayed(self) -> Divergence | None:
        """After the sample ended: the first recorded request it never made (first
        in the recording's order: where the run fell behind it earliest)."""
        rest = [k for k in self._entries if k not in self._used]
        if not rest:  # (an update is delivered with its step: none can be left)
            return None
        handle, step = rest[0]
        kind = self._entries[rest[0]].request.get("kind")
        return self._diverged(handle, step, f"the run ended; the recording goes on with a "
                                            f"{kind} request")
