"""The background tasks of one MCP client, owned by one task.

``asyncio.TaskGroup`` must be entered and exited by the same task, and its
children's failures must reach whoever owns it.  :class:`Tasks` keeps both
rules for a client whose ``__aenter__`` and ``__aexit__`` may run in
different tasks: a runner task opens the group, holds it until
:meth:`Tasks.stop`, and closes it; everything the client starts in the
background is a child of that group.

A child that ends with one of the project's own errors
(:class:`~agentd.errors.AgentdError`: what a peer's mistake becomes) is
logged (``mcp.task.failed``) and ends alone -- a server's bad answer to a
re-list never takes the connection down.  Any other exception is a bug: it
propagates -- the group cancels its siblings, the runner ends with it, the
owner's ``on_failure`` runs at once (the client gives the server up, so
nothing waits on a dead connection), and :meth:`stop` raises it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from agentd.errors import AgentdError
from agentd.log import Logger

__all__ = ["Tasks"]


class Tasks:
    """One client's TaskGroup and its children; see the module docstring."""

    def __init__(self, log: Logger, on_failure: Callable[[BaseException], None]) -> None:
        self.log = log
        self._on_failure = on_failure
        self._tg: asyncio.TaskGroup | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._bg: set[asyncio.Task[Any]] = set()
        self._notices: set[asyncio.Task[Any]] = set()  # messages on their way out
        self.failure: BaseException | None = None

    async def start(self) -> None:
        """Open the group (in its own runner task); returns once it is open."""
        opened = asyncio.get_running_loop().create_future()
        self._runner = asyncio.create_task(self._run(opened), name="mcp.client.tasks")
        self._runner.add_done_callback(self._ended)
        await opened

    async def _run(self, opened: asyncio.Future[None]) -> None:
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            opened.set_result(None)
            await self._stopping.wait()
            for task in list(self._bg):
                task.cancel()
        # the group waited for every child: nothing it started outlives it

    def _ended(self, runner: asyncio.Task[None]) -> None:
        self._tg = None
        if runner.cancelled():
            return
        exc = runner.exception()
        if exc is not None:
            if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            self.failure = exc
            self.log.error("mcp.task.failed", fatal=True, error=f"{type(exc).__name__}: {exc}")
            self._on_failure(exc)

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str, *, notice: bool = False
              ) -> asyncio.Task[Any] | None:
        """Start a child (None, and ``coro`` closed, once stopping).  ``notice``:
        a message on its way out, given a moment to leave at :meth:`stop`."""
        tg = self._tg
        if tg is None or self._stopping.is_set():
            coro.close()
            return None
        task = tg.create_task(self._child(coro, what))
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)
        # a child cancelled before its first step (the client closing right after
        # a reconnect was triggered) never awaited `coro`: close it, or the
        # interpreter prints "coroutine ... was never awaited" on stderr at exit
        task.add_done_callback(lambda _t: coro.close())
        if notice:
            self._notices.add(task)
            task.add_done_callback(self._notices.discard)
        return task

    async def _child(self, coro: Coroutine[Any, Any, Any], what: str) -> None:
        try:
            await coro
        except AgentdError as exc:  # a peer's mistake, typed: this child ends alone
            self.log.warning("mcp.task.failed", task=what, error=f"{type(exc).__name__}: {exc}")

    async def flush_notices(self, within: float) -> None:
        """Give the messages on their way out (cancellations, answers) ``within``
        seconds to leave."""
        notices = [t for t in self._notices if not t.done()]
        if notices:
            await asyncio.wait(notices, timeout=within)

    def cancel_all(self) -> None:
        """Cancel every child but the calling task (which may be one of them)."""
        me = asyncio.current_task()
        for task in list(self._bg):
            if task is not me:
                task.cancel()

    async def settle(self, within: float) -> None:
        """Let cancelled children unwind (before the connections go away)."""
        me = asyncio.current_task()
        others = [t for t in self._bg if t is not me]
        if others:
            await asyncio.wait(others, timeout=within)

    async def stop(self) -> None:
        """Close the group: children cancelled, awaited; a child's bug raised here."""
        self._stopping.set()
        runner, self._runner = self._runner, None
        if runner is None:
            return
        me = asyncio.current_task()
        if me is not None and me in self._bg:
            return  # stopped from one of its own children: the runner closes it
        await asyncio.wait((runner,))  # its outcome is _ended's to report, and raised here
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
