"""The one shape of a recorded exchange: a brokered request and its answer.

A cassette (agentd.batch.cassette) and a run's journal (agentd.journal.store)
both hold what a subtree asked its parent and what it was answered, and both
answer a later run from it; they agree on what a request is compared as
(`request_json`: its wire JSON without the trace context, secrets redacted, so
a replay compares like with like), on how the first difference is named, and
on the bound a recorded answer meets before it is decoded (`AnswerBounds`: the
live bound of its kind, so a replay is never looser than the run it stands in
for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from agentd.a2a.client import DEFAULT_MAX_BYTES as A2A_MAX_BYTES
from agentd.child.control import ENVELOPE_HEADROOM, IoRequest, IoResult, answer_limit
from agentd.config.intelligence import DEFAULT_INTELLIGENCE_MAX_BYTES
from agentd.config.model import DEFAULT_MCP_MAX_BYTES
from agentd.log import redact
from agentd.wire.guard import PEER_FAULTS, fault_text
from agentd_native import MAX_FRAME

__all__ = ["AnswerBounds", "ErrorBody", "decode_result", "first_difference", "request_json"]


class ErrorBody(msgspec.Struct, forbid_unknown_fields=True):
    code: int
    message: str


@dataclass(frozen=True, slots=True)
class AnswerBounds:
    """The live bound of each kind of answer, which a replayed one meets too: a
    completion's `--intelligence-max-bytes`, a tool result's or a read's
    `--mcp-max-bytes`, an A2A answer's 8 MiB, and for every kind the control
    wire's frame (the answer reaches the sample's child in one frame; a bigger
    one would fail the frame and with it the batch, never just the sample)."""

    completion: int = DEFAULT_INTELLIGENCE_MAX_BYTES
    observation: int = DEFAULT_MCP_MAX_BYTES
    frame: int = MAX_FRAME

    def of(self, kind: Any) -> tuple[int, str]:
        """The bound of the answer to a request of `kind`, and its name."""
        own = {"complete": (self.completion, f"--intelligence-max-bytes={self.completion}"),
               "call": (self.observation, f"--mcp-max-bytes={self.observation}"),
               "read": (self.observation, f"--mcp-max-bytes={self.observation}"),
               "a2a": (A2A_MAX_BYTES, f"the A2A answer bound of {A2A_MAX_BYTES} bytes")}
        wire = (answer_limit(self.frame),
                f"the control wire's answer bound of {answer_limit(self.frame)} bytes (its "
                f"{self.frame}-byte frame less {ENVELOPE_HEADROOM} for the envelope)")
        limit = own.get(kind)
        return wire if limit is None or wire[0] <= limit[0] else limit


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


_result = msgspec.json.Decoder(IoResult)


def decode_result(raw: bytes, kind: Any, bounds: AnswerBounds) -> IoResult | str:
    """A recorded answer of a request of `kind`, decoded once it is within its
    kind's live bound; else the words of why it is not replayed."""
    limit, name = bounds.of(kind)
    if len(raw) > limit:
        return f"a recorded answer of {len(raw)} bytes, past {name}: not replayed"
    try:
        return _result.decode(raw)
    except PEER_FAULTS as exc:
        return f"the recorded answer is not one: {fault_text(exc)}"
