"""The control wire's transport: a `ControlSession` on a pair of pipes.

Both ends use it -- the parent on its child's stdin/stdout (agentd.tree.procs),
the child on the fds it moved the wire to (agentd.child.entry) -- so it sits in
the child's folder, below the tree: the parent imports the child's contract,
never the other way round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from msgspec import UNSET

from agentd.child.control import ControlSession, Incoming, Oversize, Reply
from agentd.errors import RPCError, TreeError
from agentd.obs import metrics
from agentd.runtime import pipe_file
from agentd.wire.dispatch import Dispatcher

__all__ = ["Channel", "ChannelClosed"]

_FRAMES = metrics.FRAMES  # control-wire frames by direction (agentd.obs)


class ChannelClosed(TreeError):
    """The control channel ended (EOF or protocol error) before an answer came."""


class _Reader(asyncio.Protocol):
    def __init__(self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        self._on_data = on_data
        self._on_eof = on_eof

    def data_received(self, data: bytes) -> None:
        self._on_data(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_eof()


class _Writer(asyncio.Protocol):
    def __init__(self) -> None:
        self.lost = False
        self.lost_event = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()

    def pause_writing(self) -> None:
        self._drained.clear()

    def resume_writing(self) -> None:
        self._drained.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.lost_event.set()
        self._drained.set()


class Channel:
    """A `ControlSession` on a pair of pipes: async requests, dispatch of inbound messages.

    `on_incoming(Incoming)` is called synchronously for each inbound request or
    notification (the owner starts a task if the handling awaits).  `closed` is
    set when the read side ends; `failure` then holds the protocol error text,
    or None for a plain EOF.
    """

    def __init__(self, session: ControlSession, read_fd: int, write_fd: int,
                 on_incoming: Callable[[Incoming], None]) -> None:
        self.session = session
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._on_incoming = on_incoming
        # THE dispatcher (agentd.wire.dispatch): a future given up forgets its id
        self._calls: Dispatcher[int] = Dispatcher(lambda rid, _why: session.forget(rid))
        self._rtransport: asyncio.ReadTransport | None = None
        self._wtransport: asyncio.WriteTransport | None = None
        self._writer = _Writer()
        self.closed = asyncio.Event()
        self.failure: str | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        rfile = pipe_file(self._read_fd, "rb")  # the transports own the fds from here
        wfile = pipe_file(self._write_fd, "wb")
        # the write side first: a request read at once must be answerable
        self._wtransport, _ = await loop.connect_write_pipe(lambda: self._writer, wfile)
        self._rtransport, _ = await loop.connect_read_pipe(
            lambda: _Reader(self._data, self._eof), rfile)

    # ---------------------------------------------------------------- output
    def _send(self, frame: bytes) -> None:
        if self._wtransport is not None and not self._writer.lost \
                and not self._wtransport.is_closing():
            self._wtransport.write(frame)
            _FRAMES.inc("out")

    def request(self, method: str, params: Any = None) -> asyncio.Future[Any]:
        """Send a request now; its future gets the result (RPCError / ChannelClosed).

        Requests can be pipelined: answers are matched by id. Cancelling the
        future gives up on the answer (a late one is dropped).
        """
        if self.closed.is_set():
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            fut.set_exception(ChannelClosed(self.failure or "control channel closed"))
            return fut
        rid, frame = self.session.request(method, params if params is not None else {})
        fut = self._calls.expect(rid)
        self._send(frame)
        return fut

    async def call(self, method: str, params: Any = None, within: float | None = None) -> Any:
        """Send a request and await its result; RPCError / ChannelClosed otherwise."""
        fut = self.request(method, params)
        try:
            async with asyncio.timeout(within):
                return await fut
        finally:
            fut.cancel()  # a no-op once answered

    def ask(self, method: str, params: Any = None) -> None:
        """Send a request whose answer nobody waits for (e.g. the ladder's first rung)."""
        if not self.closed.is_set():
            rid, frame = self.session.request(method, params if params is not None else {})
            self.session.forget(rid)
            self._send(frame)

    def notify(self, method: str, params: Any = None) -> None:
        if not self.closed.is_set():
            self._send(self.session.notification(method, params if params is not None else {}))

    def respond(self, rid: int | str | None, result: Any) -> None:
        if rid is not None:
            self._send(self.session.response(rid, result))

    def answer(self, rid: int | str | None, result: Any, limit: int) -> Oversize | None:
        """`respond` with an answer a peer sized: sent whole if its body is within
        `limit` bytes; else nothing is sent and the caller gets the `Oversize`, to
        answer `rid` with an error of its own."""
        if rid is None:
            return None
        frame = self.session.fitted(rid, result, limit)
        if isinstance(frame, Oversize):
            return frame
        self._send(frame)
        return None

    def error(self, rid: int | str | None, code: int, message: str,
              data: Any = UNSET) -> None:
        if rid is not None:
            self._send(self.session.error(rid, code, message, data))

    async def drain(self) -> None:
        await self._writer._drained.wait()

    def close_write(self) -> None:
        """EOF to the peer."""
        if self._wtransport is not None and not self._wtransport.is_closing():
            self._wtransport.close()

    async def flush_close(self) -> None:
        """EOF to the peer after everything written so far has left."""
        self.close_write()
        if self._wtransport is not None:
            await self._writer.lost_event.wait()

    def close(self) -> None:
        self.close_write()
        if self._rtransport is not None and not self._rtransport.is_closing():
            self._rtransport.close()

    # ----------------------------------------------------------------- input
    def _data(self, data: bytes) -> None:
        if self.closed.is_set():
            return
        try:
            events = self.session.feed(data)
        except TreeError as exc:  # the peer broke the wire (the session's only error)
            self._fail(str(exc))
            return
        finally:
            for frame in self.session.outbox:
                self._send(frame)
            self.session.outbox.clear()
        _FRAMES.inc("in", n=len(events))
        for ev in events:
            if isinstance(ev, Reply):
                if ev.error is not None:
                    self._calls.fail(ev.id, RPCError(ev.error.code, ev.error.message,
                                                     ev.error.data, side="remote"))
                else:
                    self._calls.resolve(ev.id, ev.result)
            else:
                self._on_incoming(ev)

    def _fail(self, reason: str) -> None:
        self.failure = reason
        if self._rtransport is not None:
            self._rtransport.close()
        self._eof()

    def _eof(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        self._calls.fail_all(lambda: ChannelClosed(self.failure or "control channel closed"))
