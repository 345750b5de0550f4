"""The batch root's broker: every sample's I/O, told apart by sample.

A batch runs each sample as a child of the batch root (handle `0.k`), and its
subagents as that child's descendants (`0.k.…`): processes are flat, so every
intelligence and MCP request of a sample's whole subtree reaches the root's
`Broker` on behalf of a handle under `0.k`. This subclass counts each sample's
model answers (its own handle's: the result line's `steps`) and the tokens of
its subtree (`usage`), and is the one place a cassette is recorded from or
replayed into (agentd.app.cassette).
"""

from __future__ import annotations

from typing import Any

from agentd.output import Usage
from agentd.tree.broker import Broker
from agentd.tree.control import IoCompletion, IoRequest, IoResult


def sample_of(handle: str) -> str:
    """The sample a handle belongs to: its first two components (`0.3.1.2` -> `0.3`)."""
    parts = handle.split(".", 2)
    return ".".join(parts[:2])


class Tally:
    """One sample's counts, kept while it runs."""

    def __init__(self) -> None:
        self.steps = 0
        self.usage = Usage()


class SampleBroker(Broker):
    """A `Broker` that counts per sample (see the module doc)."""

    def __init__(self, *, intelligence: Any, toolbox: Any = None) -> None:
        super().__init__(intelligence=intelligence, toolbox=toolbox)
        self.tallies: dict[str, Tally] = {}

    def begin(self, sample: str) -> None:
        self.tallies[sample] = Tally()

    def end(self, sample: str) -> Tally:
        return self.tallies.pop(sample, None) or Tally()

    async def serve(self, handle: str, scope: frozenset[str], req: IoRequest) -> IoResult:
        result = await super().serve(handle, scope, req)
        self.count(handle, result)
        return result

    def count(self, handle: str, result: IoResult) -> None:
        if not isinstance(result, IoCompletion):
            return
        tally = self.tallies.get(sample_of(handle))
        if tally is None:
            return
        if sample_of(handle) == handle:
            tally.steps += 1
        u = result.completion.usage
        tally.usage.add(Usage(u.prompt_tokens, u.completion_tokens, u.total_tokens))
