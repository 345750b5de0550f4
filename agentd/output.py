"""The one JSON object a run prints on stdout (design.md contract).

`{"run_id", "status", "partial", "result", "steps", "usage"}` — nothing else is
ever written to stdout by a run; logs go to stderr.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec

STATUSES = ("completed", "failed", "budget_exhausted", "deadline", "interrupted")


class Usage(msgspec.Struct):
    """Tokens spent, as the intelligence gateway reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.total_tokens += other.total_tokens


class RunResult(msgspec.Struct):
    run_id: str
    status: str  # one of STATUSES
    partial: bool
    result: Any  # the distillate: JSON when the output contract asks for it, else text
    steps: int
    usage: Usage


_encoder = msgspec.json.Encoder()


def print_result(result: RunResult, stream=None) -> None:
    """Write the result object as one line on stdout."""
    out = stream or sys.stdout
    out.write(_encoder.encode(result).decode() + "\n")
    out.flush()
