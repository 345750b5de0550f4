"""A journaling Supervisor's start and drain: its runs brought back, its runs suspended.

`Durable` is composed into the `Supervisor` when it has a `Journaling`
(agentd.tree.journaling), and does the two things only such a tree does:

* `resume`: what the last process on the journal left (`Journal.load`):
  terminal runs answer again for the rest of their retention, running ones are
  driven again under their old handle, principal and request (their recorded
  steps answered from the journal), a warm session's later turns are sent to
  it again in their order, and a run whose journal cannot be trusted ends
  `failed` with the reason;
* `settle`: the drain. No more spawns; the journaled runs may end until a
  point of the drain; then those still running are suspended: no exchange
  starts, those in flight are journaled, their processes are stopped, and
  their journals stay running for the next process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

import msgspec

from agentd.agent.subagents import SpawnRequest
from agentd.errors import TreeError
from agentd.journal.store import Broken, Loaded
from agentd.log import Logger
from agentd.obs import metrics, trace
from agentd.tree.child_run import ChildRun, RunHost, until_first
from agentd.tree.journaling import Journaling
from agentd.tree.ownership import Owners
from agentd.tree.registry import Registry
from agentd.wire.guard import PEER_FAULTS, fault_text

__all__ = ["Durable"]


class Durable:
    """The journaling tree's resume and drain (see the module doc). `host` drives
    runs, `tasks` starts a task in the tree's TaskGroup, `close` refuses every
    spawn from then on, `turn(run, message, locked=)` is one warm turn."""

    def __init__(self, journaling: Journaling, registry: Registry, owners: Owners,
                 log: Logger, *, host: RunHost,
                 tasks: Callable[[Coroutine[Any, Any, None], str], None],
                 close: Callable[[], None],
                 turn: Callable[..., Awaitable[object]]) -> None:
        self.journaling = journaling
        self.registry = registry
        self.owners = owners
        self.log = log
        self._host = host
        self._tasks = tasks
        self.close = close  # spawns refused from here on (the drain's first moment)
        self._turn = turn

    # ----------------------------------------------------------------- drain
    async def settle(self, until: float, flushed_by: float) -> None:
        """The drain (docs/operations.md "Durable runs"): the journaled runs may end
        until `until` (the loop's clock); those still running are then suspended,
        the exchanges in flight journaled if they are answered by `flushed_by`
        (later than `until`, before the drain's end: the rest of the drain stops
        the processes and closes the listener)."""
        j = self.journaling
        self.close()

        def journaled() -> list[ChildRun]:
            return [r for r in self.registry.runs.values()
                    if r.live and r.request is not None and j.journals(r.parent)]

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(until):
                while live := journaled():
                    await until_first(*(r.done for r in live))
        left = journaled()
        j.hold()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(flushed_by):
                await j.quiet()
        self.log.info("journal.suspended", runs=len(left))
        for run in left:
            for r in self.registry.subtree(run.handle):
                r.request_stop("cancelled")
        if left:
            await asyncio.gather(*(r.done.wait() for r in left))

    # ---------------------------------------------------------------- resume
    async def resume(self, loaded: Iterable[Loaded | Broken]) -> None:
        """Bring back what `Journal.load` gave (module doc). A batch resumes its
        samples otherwise: each when it is spawned again (`Journaling.expect`)."""
        j = self.journaling
        parent = self.registry.runs[j.under]
        now = time.time()
        for item in loaded:
            rec = item.record
            if rec is None or not self._top_handle(rec.handle):
                self.log.error("journal.broken", path=item.path, reason=getattr(
                    item, "reason", "not a run of this journal"))
                await j.journal.set_aside(item.path)
                continue
            try:  # a broken file's record is not trusted: its request may be anything
                request = msgspec.convert(rec.request, SpawnRequest)
            except PEER_FAULTS as exc:
                self.log.error("journal.broken", path=item.path, reason=f"its run record's "
                               f"request is not one: {fault_text(exc)}")
                await j.journal.set_aside(item.path)
                continue
            scope = parent.scope if request.tool_scope is None \
                else parent.scope & frozenset(request.tool_scope)
            run = ChildRun(rec.handle, j.under, scope, request.mode, request)
            if rec.principal is not None:
                self.owners.claim(run.handle, rec.principal)
            j.restored.append(rec)
            if isinstance(item, Broken) or rec.terminal:
                self._restore_ended(run, item, now)
            else:
                await self._drive(run, item)

    def _top_handle(self, handle: str) -> bool:
        """Is `handle` one of this tree's top runs (`served.N`)? A record that names
        anything else is not restored, whatever it says."""
        head, _, n = handle.rpartition(".")
        return head == self.journaling.under and n.isdigit() and len(n) <= 9 \
            and not n.startswith("0")

    def _restore_ended(self, run: ChildRun, item: Loaded | Broken, now: float) -> None:
        """A terminal run, or one whose journal cannot be resumed (`failed`, why)."""
        rec = item.record
        assert rec is not None
        broken = isinstance(item, Broken)
        reason = item.reason if isinstance(item, Broken) else rec.reason
        state = run.state
        state.status = "failed" if broken else rec.status
        state.partial = False if broken else rec.partial
        state.result = {"error": f"journal: {reason}"} if broken else rec.result
        run.reason, run.last = reason, "restored"
        run.done.set()
        ended = now if broken else (rec.ended_at or now)
        self.registry.restore(run, max(0.0, now - ended))
        self.journaling.keep(run.handle, item.path)
        if broken:
            self.log.error("journal.broken", handle=run.handle, path=item.path, reason=reason)

    async def _drive(self, run: ChildRun, item: Loaded) -> None:
        try:
            await self.journaling.adopt(run.handle, item)
        except TreeError as exc:  # its file cannot be written on: it cannot go on
            self._restore_ended(run, Broken(item.record.name, str(exc), item.path,
                                            item.record), time.time())
            return
        self.registry.restore(run)
        metrics.SUBAGENTS.inc("resumed")
        self.log.info("journal.resumed", handle=run.handle, steps=len(item.steps),
                      turns=len(item.sends))
        attrs: dict[str, Any] = {"agentd.handle": run.handle, "agentd.resumed": True}
        run.span = trace.start("agentd.spawn", **attrs)
        self._tasks(run.drive(self._host), f"subagent {run.handle}")
        if item.sends:
            self._tasks(self._resend(run, item.sends), f"turns of {run.handle}")

    async def _resend(self, run: ChildRun, messages: list[str]) -> None:
        """A resumed warm session's later turns, in order, once its first is done
        (each answered from the journal as far as it goes); a peer's new message
        waits for them all (the session's turn lock is held throughout)."""
        async with run.turn_lock:
            for message in messages:
                if not run.live:
                    return
                await self._turn(run, message, locked=True)
