"""Resuming a run from its journal: which requests are answered from the record.

Sans-IO: a `Resumption` is given the steps a run's journal holds and is asked,
for each request the resumed subtree makes, what answers it. A handle's
requests are sequential, so a request is looked up by (relative handle, its
count on that handle), as a cassette's are, whatever the subtree's handles
interleave:

* `Replayed(answer)` -- the step was answered before the restart and the
  request is the one recorded: answered from the record, nothing is sent;
* `InFlight(kind, tool)` -- the step was sent and never answered (the one
  exchange in flight at a crash): the tree applies the fault policy's rule
  (a model request is sent again; a tool call only when the tool is declared
  idempotent, else the model is told the call was interrupted);
* `Live` -- the record has no more for this handle (or the request differs
  from the recorded one: the handle's record is abandoned from there, logged
  `journal.diverged`): the request is made as in any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentd.child.control import IoAnswer, IoRequest
from agentd.journal.exchange import AnswerBounds, decode_result, first_difference, request_json
from agentd.journal.records import Step
from agentd.wire.jsonrpc import ErrorObject

__all__ = ["InFlight", "Live", "Replayed", "Resumption"]


@dataclass(frozen=True, slots=True)
class Replayed:
    answer: IoAnswer


@dataclass(frozen=True, slots=True)
class InFlight:
    kind: str
    tool: str | None = None  # a call's qualified tool name


@dataclass(frozen=True, slots=True)
class Live:
    diverged: str | None = None  # the first difference, when the record was abandoned


class Resumption:
    """One resumed run's record, consumed as its subtree asks again."""

    def __init__(self, steps: dict[tuple[str, int], Step],
                 bounds: AnswerBounds = AnswerBounds()) -> None:
        self._steps = steps
        self._bounds = bounds
        self._counts: dict[str, int] = {}
        self._live: set[str] = set()  # handles whose record ran out or was abandoned
        self.replayed = 0

    def step_of(self, rel: str) -> int:
        """Count one more request of `rel`: its step number (every request counts,
        replayed or live, so the numbering goes on across the restart)."""
        n = self._counts.get(rel, 0) + 1
        self._counts[rel] = n
        return n

    def next(self, rel: str, step: int, req: IoRequest) -> Replayed | InFlight | Live:
        if rel in self._live:
            return Live()
        rec = self._steps.get((rel, step))
        if rec is None:
            self._live.add(rel)
            return Live()
        diff = first_difference(rec.request, request_json(req), "request")
        if diff is not None:
            self._live.add(rel)
            return Live(diff)
        if rec.state == "sent":
            self._live.add(rel)
            name: Any = rec.request.get("name")
            return InFlight(rec.kind, name if isinstance(name, str) else None)
        answer = self._answer(rec)
        if isinstance(answer, str):  # past its bound, or not an answer: go live instead
            self._live.add(rel)
            return Live(answer)
        self.replayed += 1
        return Replayed(answer)

    def _answer(self, rec: Step) -> IoAnswer | str:
        if rec.error is not None:
            code, message = rec.error.get("code"), rec.error.get("message")
            if not isinstance(code, int) or not isinstance(message, str):
                return "the recorded error is not one"
            data = rec.error.get("data")
            return ErrorObject(code, message) if data is None else ErrorObject(code, message, data)
        return decode_result(rec.answer, rec.kind, self._bounds)
