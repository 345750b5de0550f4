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
written. Replay looks a request up by `(handle, step)`: every handle's
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
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from agentd.config import DEFAULT_CASSETTE_BYTES
from agentd.errors import TreeError
from agentd.log import redact
from agentd.tree.control import Catalogue, IoRequest, IoResult
from agentd.wire.guard import PEER_FAULTS

CASSETTE_VERSION = 2
READABLE_VERSIONS = (1, 2)  # a version-1 cassette is a version 2 without updates
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class Divergence:
    """A replayed sample asked for something its cassette does not hold: an
    expected outcome of a replay (the sample fails), so a value, not an error."""

    text: str

    def __str__(self) -> str:
        return self.text


class ErrorBody(msgspec.Struct, forbid_unknown_fields=True):
    code: int
    message: str


class Header(msgspec.Struct, forbid_unknown_fields=True):
    cassette: int
    sample: str
    scope: list[str]
    catalogue: Catalogue | None = None


class Entry(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    handle: str
    step: int
    request: dict[str, Any]
    response: dict[str, Any] | None = None
    error: ErrorBody | None = None


class UpdateBody(msgspec.Struct, forbid_unknown_fields=True):
    server: str
    uri: str


class UpdateLine(msgspec.Struct, forbid_unknown_fields=True):
    """A `notifications/resources/updated` routed to `handle` after its step `after`."""

    handle: str
    after: int
    update: UpdateBody


def _decode_line(line: bytes) -> Entry | UpdateLine:
    obj = orjson.loads(line)
    if isinstance(obj, dict) and "update" in obj:
        upd = msgspec.convert(obj, UpdateLine)
        if upd.after < 1:
            raise msgspec.ValidationError("an update line's `after` is at least 1")
        return upd
    return msgspec.convert(obj, Entry)


def cassette_path(directory: str, sample_id: str) -> str:
    """The file of a sample: a readable slug and a hash of the id (an id is
    untrusted text: it never becomes a path of its own)."""
    digest = hashlib.sha256(sample_id.encode()).hexdigest()[:16]
    slug = _SLUG.sub("_", sample_id)[:64].strip("._") or "sample"
    return os.path.join(directory, f"{slug}-{digest}.jsonl")


def request_json(req: IoRequest) -> dict[str, Any]:
    """A request as the cassette holds it: its wire JSON without the trace context,
    secrets redacted (so a replay compares like with like)."""
    out: dict[str, Any] = orjson.loads(redact(msgspec.json.encode(req).decode()))
    out.pop("traceparent", None)
    return out


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode() if value is not ... else "(absent)"
    return text if len(text) <= 120 else text[:117] + "..."


def first_difference(recorded: Any, now: Any, path: str = "") -> str | None:
    """The first place two JSON values differ: `path: recorded X, now Y`."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in [*recorded, *(k for k in now if k not in recorded)]:
            diff = first_difference(recorded.get(key, ...), now.get(key, ...), f"{path}.{key}")
            if diff is not None:
                return diff
        return None
    if isinstance(recorded, list) and isinstance(now, list):
        for i, (a, b) in enumerate(zip(recorded, now, strict=False)):
            diff = first_difference(a, b, f"{path}[{i}]")
            if diff is not None:
                return diff
        if len(recorded) != len(now):
            return f"{path or '.'}: recorded {len(recorded)} items, now {len(now)}"
        return None
    if recorded != now or type(recorded) is not type(now):
        return f"{path or '.'}: recorded {_short(recorded)}, now {_short(now)}"
    return None


class Recorder:
    """Writes one sample's cassette as its requests are answered.

    The cassette is bounded by ``max_bytes`` (``--cassette-bytes``, the bound
    replay reads it with): a line that would cross it is not written and
    raises ``OSError(EFBIG)``, which fails the sample as unrecorded, the
    same as a full disk, so a peer flooding updates cannot fill the disk."""

    def __init__(self, directory: str, sample_id: str, scope: list[str],
                 catalogue: Catalogue | None, *,
                 max_bytes: int = DEFAULT_CASSETTE_BYTES) -> None:
        self.sample = sample_id
        self.path = cassette_path(directory, sample_id)
        self.max_bytes = max_bytes
        self._written = 0
        self._f = open(self.path, "wb")
        self._line(Header(CASSETTE_VERSION, sample_id, scope, catalogue))

    def _line(self, obj: Any) -> None:
        line = redact(msgspec.json.encode(obj).decode()).encode() + b"\n"
        if self._written + len(line) > self.max_bytes:
            raise OSError(errno.EFBIG, f"past --cassette-bytes={self.max_bytes}")
        self._f.write(line)
        self._f.flush()
        self._written += len(line)

    def add(self, handle: str, step: int, req: IoRequest, result: IoResult | None = None,
            error: ErrorBody | None = None) -> None:
        response = msgspec.to_builtins(result) if result is not None else None
        self._line(Entry(handle, step, request_json(req), response, error))

    def update(self, handle: str, after: int, server: str, uri: str) -> None:
        self._line(UpdateLine(handle, after, UpdateBody(server, uri)))

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


_result = msgspec.json.Decoder(IoResult)


class Replay:
    """One sample's cassette, answering its requests (see the module doc)."""

    def __init__(self, directory: str, sample_id: str, *,
                 max_bytes: int = DEFAULT_CASSETTE_BYTES) -> None:
        self.sample = sample_id
        self.path = path = cassette_path(directory, sample_id)
        try:
            if os.path.getsize(path) > max_bytes:
                raise TreeError(f"cassette {path}: larger than --cassette-bytes={max_bytes}")
            with open(path, "rb") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise TreeError(f"no cassette for sample {sample_id!r}: {path}: "
                                f"{exc.strerror or exc}") from None
        try:
            self.header = msgspec.json.decode(lines[0] if lines else b"", type=Header)
            body = [_decode_line(ln) for ln in lines[1:] if ln.strip()]
        except PEER_FAULTS as exc:  # an edited file is input like any other
            raise TreeError(f"cassette {path}: not a version-{CASSETTE_VERSION} "
                                f"cassette: {exc}") from None
        if self.header.cassette not in READABLE_VERSIONS or self.header.sample != sample_id:
            raise TreeError(f"cassette {path}: version {self.header.cassette} of sample "
                                f"{self.header.sample!r}, expected version "
                                f"{CASSETTE_VERSION} (or 1) of {sample_id!r}")
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

    def answer(self, handle: str, step: int,
               req: IoRequest) -> IoResult | ErrorBody | Divergence:
        """The recorded answer of this request, or the Divergence if it is not the one."""
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
            return entry.error
        # a completion keeps its recorded usage: the sample's loop counts it as it did
        # (its budgets, its trajectory); the batch counts none of it (agentd.app.batch_broker)
        return _result.decode(orjson.dumps(entry.response))

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
