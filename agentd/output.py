"""What a run prints on stdout (design.md contract).

`{"run_id", "status", "partial", "result", "steps", "usage"}` — the one result
object, the last line; logs go to stderr. A reactive daemon writes one
`WakeLine` before it per wake it ran (JSON Lines, docs/reactive.md), so what each
wake learned reaches its reader as it happens, not only the last one's.
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


class WakeLine(msgspec.Struct):
    """One reactive wake's run, a line of its own on stdout (docs/reactive.md):
    `wake` is its sequence number (0: the `--wake-on-start` run) and `uris` what
    it read; the rest is the run's own, as in `RunResult`. The key `wake` is what
    tells it from the final result line."""

    run_id: str
    wake: int
    status: str
    partial: bool
    result: Any
    steps: int
    usage: Usage
    uris: list[str]


_encoder = msgspec.json.Encoder()


def print_result(result: RunResult | WakeLine, stream=None) -> None:
    """Write the object as one line on stdout, flushed (a reader sees it at once)."""
    out = stream or sys.stdout
    out.write(_encoder.encode(result).decode() + "\n")
    out.flush()
