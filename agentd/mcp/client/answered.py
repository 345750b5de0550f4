"""The seam between a request's owner and the HTTP transport reading its answer.

The connection owns the request's future (:mod:`agentd.wire.dispatch`); the
transport (:mod:`agentd.mcp.client.transport`) only needs to know *that* the
answer is settled, to stop reading a POST's SSE stream.  This one flag is
what crosses: the transport never awaits or inspects a future it does not own.
A leaf module, so the connection imports it without the HTTP stack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Answered"]


class Answered:
    """The transport's own signal that a request's answer is settled.

    The request's owner sets it the moment the answer is in -- read on this
    POST's stream, on the GET stream, failed because the session was replaced,
    or the call abandoned (:meth:`Dispatcher.expect`'s ``on_settled``) -- so the
    transport stops reading a POST's stream without ever holding the owner's
    future.  The wake-up of a quiet stream is deferred one loop turn: an answer
    read on the very stream being watched is marked as that stream's own first
    (then its end is read, never cut).
    """

    __slots__ = ("_set", "_wake")

    def __init__(self) -> None:
        self._set = False
        self._wake: Callable[[], None] | None = None

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        if (wake := self._wake) is not None:
            asyncio.get_running_loop().call_soon(wake)

    def is_set(self) -> bool:
        return self._set

    def watch(self, wake: Callable[[], None] | None) -> None:
        """Who is woken (next loop turn) when the answer settles; None: nobody."""
        self._wake = wake
