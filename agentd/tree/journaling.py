"""The tree's side of the journal (agentd.journal): what is journaled, what answers
a resumed run, and how a drain leaves runs journaled instead of ending them.

A `Journaling` is composed into the `Supervisor` by its owner (a worker with
`--journal`: the served runs, the children of `served`; a batch: its samples,
the children of `0`). Each such top run has a `RunJournal`; every brokered
request of its subtree passes through `serve`, which counts the request's step
on its handle and asks the run's `Resumption` (agentd.journal.resume):

* a step the journal answered is answered from it: no model or tool call;
* the step that was in flight at a crash follows the fault policy's rule: a
  model request (or a read, a subscription) is sent again; a tool call only if
  the tool is declared idempotent (agentd.mcp.client.rules.faults); otherwise
  the model is told the call was interrupted and may or may not have run;
* anything else is made live, journaled as it goes: a tool call's `sent` row
  is committed before the call, every answer before the child is handed it.

Subscriptions are always made live (a replayed `subscribe` would leave the
root's broker without the route its updates need), and still counted.

`hold` is the drain's: from then on no new exchange starts (a request waits
until its run is stopped), `quiet` waits for those in flight to be journaled,
and the runs stopped then are *suspended*: nothing terminal is written, so the
next process on the journal resumes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from agentd.agent.subagents import within
from agentd.child.control import (
    IoAnswer,
    IoCall,
    IoDelegate,
    IoRequest,
    IoSubscribe,
    IoUnsubscribe,
)
from agentd.journal.exchange import AnswerBounds
from agentd.journal.records import RunRecord
from agentd.journal.resume import InFlight, Live, Replayed, Resumption
from agentd.journal.store import Journal, Loaded, RunJournal
from agentd.log import log
from agentd.wire.shapes import Observed

__all__ = ["Journaling", "interrupted_call"]


def interrupted_call(tool: str | None) -> Observed:
    """What the model is told of a tool call in flight when its worker stopped."""
    what = f"tool {tool!r}" if tool else "the tool"
    return Observed(f"The call to {what} was interrupted when the agentd worker running "
                    "this task stopped; it may or may not have run. Check its effect "
                    "before calling it again.", is_error=True)


class _Journaled:
    """One journaled top run: its file and what is left to resume of it."""

    def __init__(self, journal: RunJournal, resumption: Resumption, turns: int = 0) -> None:
        self.journal = journal
        self.resumption = resumption
        self.turns = turns  # a warm session's messages journaled so far


class Journaling:
    """The journal of one Supervisor's top runs under `under` (see the module doc).

    `idempotent(tool)` is the toolbox's rule for a qualified tool name; `replayed`,
    when set, is told every answer given from the journal (a batch's broker
    counts and records it as if it had answered)."""

    def __init__(self, journal: Journal, *, under: str,
                 idempotent: Callable[[str], bool] = lambda _name: False,
                 bounds: AnswerBounds = AnswerBounds()) -> None:
        self.journal = journal
        self.under = under
        self.idempotent = idempotent
        self.bounds = bounds
        self.replayed: Callable[[str, IoRequest, IoAnswer], None] | None = None
        # a pool worker's name for a served run (agentd.served.pool.PoolServed.name),
        # journaled with it so that a restarted worker answers it again
        self.namer: Callable[[str, str], str] | None = None
        self.restored: list[RunRecord] = []  # the runs `resume` brought back
        self._files: dict[str, str] = {}  # a restored terminal run's file, by handle
        self._runs: dict[str, _Journaled] = {}  # top handle ->
        self._pending: dict[str, Loaded] = {}  # by name: running runs a spawn will resume
        self._held = False
        self._inflight = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._log = log.bind(component="journal")

    # --------------------------------------------------------------- runs
    def journals(self, parent: str) -> bool:
        """Is a run spawned by `parent` a journaled top run?"""
        return parent == self.under

    def top_of(self, handle: str) -> str | None:
        """The journaled top run `handle` belongs to, if any."""
        if not within(handle, self.under):
            return None
        depth = self.under.count(".") + 2
        return ".".join(handle.split(".")[:depth])

    def expect(self, loaded: Loaded) -> None:
        """A running run a later spawn of the same name resumes (a batch's sample)."""
        self._pending[loaded.record.name] = loaded

    async def begin(self, handle: str, name: str, request: Any, principal: str | None) -> None:
        """Journal a new top run (durably, before its spawn is answered); a run of
        that name an earlier process left (`expect`) is resumed instead."""
        loaded = self._pending.pop(name, None)
        if loaded is not None:
            rj = await self.journal.reopen(loaded)
            rj.record = msgspec.structs.replace(rj.record, handle=handle)
            self._runs[handle] = _Journaled(rj, Resumption(loaded.steps, self.bounds),
                                            len(loaded.sends))
            return
        external = self.namer(handle, principal) \
            if self.namer is not None and principal is not None else None
        rj = await self.journal.begin(RunRecord(
            name=name, handle=handle, request=msgspec.to_builtins(request),
            started_at=time.time(), principal=principal, external=external))
        self._runs[handle] = _Journaled(rj, Resumption({}, self.bounds))

    def keep(self, handle: str, path: str) -> None:
        """A restored terminal (or broken) run's file: deleted when the run is evicted."""
        self._files[handle] = path

    async def adopt(self, handle: str, loaded: Loaded) -> None:
        """A running run of an earlier process, driven again under its old handle."""
        rj = await self.journal.reopen(loaded)
        self._runs[handle] = _Journaled(rj, Resumption(loaded.steps, self.bounds),
                                        len(loaded.sends))

    async def message(self, handle: str, message: str) -> None:
        """A message sent to the warm session `handle` (a journaled top run only: a
        subagent's sends come from its parent, which sends them again itself)."""
        entry = self._runs.get(handle)
        if entry is not None:
            entry.turns += 1
            await entry.journal.message(entry.turns, message)

    async def ended(self, handle: str, status: str, result: Any, partial: bool,
                    reason: str | None) -> None:
        entry = self._runs.get(handle)
        if entry is not None:
            await entry.journal.ended(status, result, partial, reason)

    async def forget(self, handle: str) -> None:
        """The run was evicted: its retention is over, its file goes."""
        entry = self._runs.pop(handle, None)
        if entry is not None:
            await entry.journal.forget()
        path = self._files.pop(handle, None)
        if path is not None:
            await self.journal.discard(path)

    async def aclose(self) -> None:
        for entry in list(self._runs.values()):
            with contextlib.suppress(Exception):
                await entry.journal.close()
        self._runs.clear()
        await self.journal.aclose()

    # ------------------------------------------------------------ serving
    async def serve(self, handle: str, req: IoRequest,
                    live: Callable[[], Awaitable[IoAnswer]]) -> IoAnswer:
        """Answer one brokered request of `handle` (module doc)."""
        top = self.top_of(handle)
        entry = self._runs.get(top) if top is not None else None
        if top is None or entry is None:
            return await live()
        rel = handle[len(top):]
        res = entry.resumption
        step = res.step_of(rel)
        if not isinstance(req, IoSubscribe | IoUnsubscribe):
            verdict = res.next(rel, step, req)
            if isinstance(verdict, Replayed):
                if self.replayed is not None:
                    self.replayed(handle, req, verdict.answer)
                return verdict.answer
            if isinstance(verdict, InFlight):
                self._log.info("journal.in_flight", run=entry.journal.record.name, handle=rel,
                               step=step, kind=verdict.kind, tool=verdict.tool)
                if verdict.kind == "call" and not self.idempotent(verdict.tool or ""):
                    told = interrupted_call(verdict.tool)
                    await entry.journal.answered(rel, step, req, told)
                    return told
            elif isinstance(verdict, Live) and verdict.diverged is not None:
                self._log.warning("journal.diverged", run=entry.journal.record.name,
                                  handle=rel, step=step, difference=verdict.diverged)
        return await self._live(entry, rel, step, req, live)

    async def _live(self, entry: _Journaled, rel: str, step: int, req: IoRequest,
                    live: Callable[[], Awaitable[IoAnswer]]) -> IoAnswer:
        if self._held:  # drained: never sent; the next process makes it
            await asyncio.Event().wait()
        self._inflight += 1
        self._quiet.clear()
        try:
            if isinstance(req, IoCall | IoDelegate):
                await entry.journal.sent(rel, step, req)
            answer = await live()
            await entry.journal.answered(rel, step, req, answer)
            return answer
        finally:
            self._inflight -= 1
            if not self._inflight:
                self._quiet.set()

    # -------------------------------------------------------------- drain
    def hold(self) -> None:
        """No exchange starts from now on (the drain suspends the runs next)."""
        self._held = True

    def suspends(self, handle: str) -> bool:
        """Is `handle` in a journaled run being suspended (no terminal is written)?"""
        return self._held and self.top_of(handle) in self._runs

    async def quiet(self) -> None:
        """Until every exchange in flight is answered and journaled."""
        await self._quiet.wait()
