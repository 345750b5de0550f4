"""One token ledger for a whole agent tree, charged where the intelligence call is made.

Every intelligence call of the tree — the root loop's own, and every
subagent's, brokered up the control wire to the root (agentd.tree.broker) —
goes through `Metered.complete`, which asks the ledger first:

* `admit(handle)` refuses (`ceiling_reached`, an `IntelligenceError` of kind "ceiling": the run ends `budget_exhausted`,
  exit 3, partial) when the tokens already spent plus a *reservation* for the
  calls in flight reach the ceiling. The reservation of each call in flight is
  the largest call seen so far (before any call has finished it is 0);
* `settle(handle, tokens)` charges the call's `usage.total_tokens` when its
  answer arrives, and frees its reservation.

Calls are admitted only while holding a slot of the tree's `FlowGate`, so
at most `--max-inflight-intelligence` (M) are in flight. The bound
(docs/subagents.md): every admitted call was admitted while
`spent < ceiling`, and no call is admitted after the last one, so at most the
M calls in flight at that moment finish after it: the tree total is below `ceiling + M * T` where T is the largest
single call. The reservation makes the usual overshoot one call's worth when
the calls are alike; the hard bound stays `ceiling - 1 + M * T`.

Counts are kept per handle (`by_handle`), for `agent://status`, the logs and
`report()` from a source that counts by itself (a run's own total: max, so
reporting the same tokens twice never double-counts). Each answered call is
also tallied by its handle's first label (`tally`: `0` the root's tree,
`served` the runs a worker served): steps and the usage split, which a
long-lived worker reports for what it served (its exit line, `agent://status`)
after the runs themselves are forgotten.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentd.intelligence.base import Completion, Intelligence, Message, ToolDef, ceiling_reached
from agentd.intelligence.flow import FlowGate
from agentd.output import Usage

__all__ = ["Ledger", "Metered", "Tally"]


class Tally:
    """Steps (answered calls) and usage of one group of handles."""

    __slots__ = ("steps", "usage")

    def __init__(self) -> None:
        self.steps = 0
        self.usage = Usage()


class Ledger:
    """The tree's tokens: spent, reserved for calls in flight, and the ceiling."""

    def __init__(self, ceiling: int | None = None) -> None:
        self.ceiling = ceiling
        self.by_handle: dict[str, int] = {}
        self.spent = 0
        self.inflight = 0
        self.largest = 0  # the largest single call so far: each call in flight reserves it
        self.refused = 0
        self.tallies: dict[str, Tally] = {}  # by a handle's first label: a few keys

    def answered(self, handle: str, usage: Usage) -> None:
        """One call for `handle` was answered: a step and its usage, in its group."""
        group = handle.split(".", 1)[0]
        tally = self.tallies.get(group)
        if tally is None:
            tally = self.tallies[group] = Tally()
        tally.steps += 1
        tally.usage.add(usage)

    def tally(self, group: str) -> Tally:
        """The steps and usage of the calls answered for `group` (a first label)."""
        return self.tallies.get(group) or Tally()

    @property
    def total(self) -> int:
        return self.spent

    def left(self) -> int | None:
        return None if self.ceiling is None else max(self.ceiling - self.spent, 0)

    def admit(self, handle: str, *, enforce: bool = True) -> None:
        """Take a slot for one call, or raise the ledger's refusal (`ceiling_reached`)."""
        c = self.ceiling
        if enforce and c is not None and self.spent + self.inflight * self.largest >= c:
            self.refused += 1
            raise ceiling_reached(f"token_ceiling={c} reached ({self.spent} tokens spent by "
                                  f"the tree, {self.inflight} calls in flight)")
        self.inflight += 1

    def settle(self, handle: str, tokens: int) -> None:
        """The call admitted for `handle` ended (tokens 0 if it failed)."""
        self.inflight = max(self.inflight - 1, 0)
        self.charge(handle, tokens)
        if tokens > self.largest:
            self.largest = tokens

    def charge(self, handle: str, tokens: int) -> None:
        if tokens > 0:
            self.by_handle[handle] = self.by_handle.get(handle, 0) + tokens
            self.spent += tokens

    def report(self, handle: str, total: int) -> None:
        """A run's own running total (max semantics: never counted twice)."""
        have = self.by_handle.get(handle, 0)
        if total > have:
            self.charge(handle, total - have)

    def of(self, handle: str) -> int:
        return self.by_handle.get(handle, 0)


class Metered:
    """An intelligence provider seen through the ledger, on behalf of one handle.

    The loop uses it like any provider. `complete_for(handle, ...)` is the
    broker's entry (a child's call, charged to the child's handle).
    """

    def __init__(self, provider: Intelligence, ledger: Ledger, handle: str = "0",
                 gate: FlowGate | None = None, *, enforce_own: bool = True) -> None:
        self.provider = provider
        # False for a reactive root: --token-ceiling bounds each wake's run (the
        # loop's own budget), while its tokens still count for the tree's children.
        self.enforce_own = enforce_own
        self.ledger = ledger
        self.handle = handle
        self.gate = gate if gate is not None else FlowGate()
        self.name = provider.name
        provider.share_gate(self.gate)

    def share_gate(self, gate: FlowGate) -> None:
        """A meter over this one: its gate is the one the calls pass, here and below."""
        self.gate = gate
        self.provider.share_gate(gate)

    @property
    def model(self) -> str | None:
        return self.provider.model

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolDef]
                       ) -> Completion:
        return await self.complete_for(self.handle, messages, tools)

    async def complete_for(self, handle: str, messages: Sequence[Message],
                           tools: Sequence[ToolDef]) -> Completion:
        ledger = self.ledger
        # Admitted only once it holds a gate slot: the calls the ledger counts in
        # flight are at most --max-inflight-intelligence (the overshoot bound's M).
        async with self.gate:
            ledger.admit(handle, enforce=self.enforce_own or handle != self.handle)
            tokens = 0
            try:
                completion = await self.provider.complete(messages, tools)
                tokens = completion.usage.total_tokens or 0
                ledger.answered(handle, Usage(completion.usage.prompt_tokens or 0,
                                              completion.usage.completion_tokens or 0, tokens))
                return completion
            finally:
                ledger.settle(handle, tokens)

    async def aclose(self) -> None:
        await self.provider.aclose()
