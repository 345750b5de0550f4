"""The one request/response dispatcher: JSON-RPC ids <-> the futures awaiting them.

Both wires that send requests and match answers by id use it: the MCP client
(:mod:`agentd.mcp.client.facade`, over Streamable HTTP) and the control wire's
:class:`agentd.child.channel.Channel` (parent <-> subagent).  The protocol rules
(which method an id was, whether an answer is well formed) stay in each
wire's sans-IO session; this table is only the IO half of correlation:

* :meth:`Dispatcher.expect` registers an id and returns its future;
  :meth:`resolve` / :meth:`fail` settle it from an inbound answer (an answer
  for an id nobody waits for any more is dropped: False).
* A future given up before its answer -- cancelled by its awaiter, timed out
  in :meth:`wait`, or :meth:`abandon`-ed -- leaves the table and the
  ``on_abandon(id, reason)`` hook runs once (the MCP client sends
  ``notifications/cancelled``; the control wire forgets the id), so a late
  answer is ignored rather than delivered to nobody.
* :meth:`forget` drops an id without that hook (the request failed on its
  own, nothing is left to cancel); :meth:`fail_all` fails every waiter (the
  session was replaced, the channel closed, the client shut down).
* ``expect(..., on_settled=f)``: ``f()`` runs once, synchronously, the moment
  the id's future is settled by any of these paths -- so a caller can tell
  someone else (the HTTP transport reading the answer's stream) without
  handing over its future, whose own callbacks run only a loop turn later.

Bound: one entry per request in flight; every entry leaves the table when its
future settles, so the table never outgrows what its callers await.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["Dispatcher"]

Id = TypeVar("Id", bound=Hashable)


class Dispatcher(Generic[Id]):
    """Ids in flight and their futures; see the module docstring."""

    __slots__ = ("_futs", "_hooks", "_on_abandon")

    def __init__(self, on_abandon: Callable[[Id, str], None] | None = None) -> None:
        self._futs: dict[Id, asyncio.Future[Any]] = {}
        self._hooks: dict[Id, Callable[[], object]] = {}
        self._on_abandon = on_abandon

    def __len__(self) -> int:
        return len(self._futs)

    def __contains__(self, rid: object) -> bool:
        return rid in self._futs

    def expect(self, rid: Id, *, cancel_abandons: bool = True,
               on_settled: Callable[[], object] | None = None) -> asyncio.Future[Any]:
        """The future ``rid``'s answer settles.

        With ``cancel_abandons`` cancelling the future abandons ``rid`` (reason
        ``"cancelled"``); a caller that knows a better reason (a time limit
        cancels the awaiting task, and so the future) passes False and then
        always ends the entry itself (:meth:`abandon` or :meth:`forget`).
        ``on_settled`` runs once when the future settles (module docstring)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        old = self._futs.get(rid)
        if old is not None and not old.done():
            old.cancel()  # an id reused while awaited: the older waiter gives up
        self._notify(rid)
        self._futs[rid] = fut
        if on_settled is not None:
            self._hooks[rid] = on_settled
        fut.add_done_callback(lambda f: self._settled(rid, f, cancel_abandons))
        return fut

    def _notify(self, rid: Id) -> None:
        """Run ``rid``'s ``on_settled`` (once: it leaves the table)."""
        if (settled := self._hooks.pop(rid, None)) is not None:
            settled()

    def _settled(self, rid: Id, fut: asyncio.Future[Any], hook: bool) -> None:
        if self._futs.get(rid) is not fut:
            return  # answered, forgotten or abandoned already
        self._notify(rid)  # settled from outside the table (cancelled, or an exception set)
        if not fut.cancelled():
            del self._futs[rid]  # settled by an exception set from outside the table
        elif hook:
            del self._futs[rid]
            if self._on_abandon is not None:
                self._on_abandon(rid, "cancelled")
        # else: cancelled without the hook -- the caller abandons or forgets it

    def resolve(self, rid: Id, result: Any) -> bool:
        """Deliver an answer; False when nobody waits for ``rid``."""
        fut = self._futs.pop(rid, None)
        if fut is None or fut.done():
            return False
        fut.set_result(result)
        self._notify(rid)
        return True

    def fail(self, rid: Id, exc: BaseException) -> bool:
        """Deliver an error answer; False when nobody waits for ``rid``."""
        fut = self._futs.pop(rid, None)
        if fut is None or fut.done():
            return False
        fut.set_exception(exc)
        self._notify(rid)
        return True

    def forget(self, rid: Id) -> None:
        """Stop waiting for ``rid`` without the abandon hook; its future is cancelled."""
        fut = self._futs.pop(rid, None)
        if fut is not None and not fut.done():
            fut.cancel()
        self._notify(rid)

    def abandon(self, rid: Id, reason: str) -> None:
        """Stop waiting for ``rid`` and run the abandon hook (``reason``: why)."""
        fut = self._futs.pop(rid, None)
        if fut is None:
            return
        if not fut.done():
            fut.cancel()
        self._notify(rid)
        if self._on_abandon is not None:
            self._on_abandon(rid, reason)

    def fail_all(self, make: Callable[[], BaseException]) -> None:
        """Fail every waiter with a fresh ``make()``; the table is empty after."""
        futs, self._futs = self._futs, {}
        for rid, fut in futs.items():
            if not fut.done():
                fut.set_exception(make())
                fut.exception()  # retrieved here: a waiter gone already is no noise
            self._notify(rid)

    async def wait(self, rid: Id, fut: asyncio.Future[Any], within: float | None) -> Any:
        """Await ``fut`` (``rid``'s) for at most ``within`` seconds (None: no limit).

        A timeout raises :class:`TimeoutError` and a cancellation propagates;
        either abandons ``rid`` first (reason ``"timeout"`` / ``"cancelled"``)."""
        try:
            async with asyncio.timeout(within):
                return await fut
        except TimeoutError:
            self.abandon(rid, "timeout")
            raise
        except asyncio.CancelledError:
            self.abandon(rid, "cancelled")
            raise
