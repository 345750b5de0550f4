"""`agentd acp`'s process: ACP frames on stdin/stdout, everything else on stderr.

stdout belongs to the protocol.  `claim_stdout()` (called by the CLI before
anything else can print) moves the real stdout to a private descriptor and
points fd 1 and `sys.stdout` at stderr, so a stray print, a library's warning
or a child that inherits fd 1 lands in the log stream, never between frames.

Input is read in chunks and cut into lines by the bounded framer
(agentd.acp.framing); each line is decoded by the one JSON-RPC codec
(agentd.wire.codec: -32700 for bytes that are not JSON, -32600 for JSON that is
not one message), each request answered by its own task of the serve loop's
TaskGroup (a prompt streams while other requests are answered), notifications
handled inline.  Every refusal is a JSON-RPC error frame; the process stays up.
End of input, SIGINT or SIGTERM: the running prompts are cancelled (their trees
drained through the kill ladder), then the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import sys
from typing import Any

from agentd.config.model import Config
from agentd.errors import RPCError
from agentd.log import log
from agentd.wire import codec
from agentd.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ErrorObject,
    ErrorResponse,
    Notification,
    Request,
    Response,
)

from .agent import Agent
from .framing import LineFramer, Oversized

READ_CHUNK = 65536


def claim_stdout() -> int:
    """The protocol's descriptor (a copy of fd 1); fd 1 and sys.stdout become stderr."""
    out = os.dup(1)
    os.set_inheritable(out, False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


class Output:
    """Frames to the client, one line each, in the order they are sent."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._transport: asyncio.WriteTransport | None = None

    async def open(self) -> None:
        if stat.S_ISREG(os.fstat(self.fd).st_mode):
            return  # a file: plain writes (a pipe transport refuses files)
        loop = asyncio.get_running_loop()
        pipe = os.fdopen(self.fd, "wb", buffering=0, closefd=False)
        self._transport, _ = await loop.connect_write_pipe(asyncio.Protocol, pipe)

    def send(self, message: Any) -> None:
        frame = codec.encode(message) + b"\n"
        if self._transport is not None:
            if not self._transport.is_closing():
                self._transport.write(frame)
            return
        view = memoryview(frame)
        while view:
            view = view[os.write(self.fd, view):]

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def _reader(fd: int) -> Any:
    """An async `read(n)` over stdin (a pipe or a file)."""
    loop = asyncio.get_running_loop()
    if stat.S_ISREG(os.fstat(fd).st_mode):
        async def read_file(n: int) -> bytes:
            return os.read(fd, n)
        return read_file
    reader = asyncio.StreamReader(limit=READ_CHUNK)
    pipe = os.fdopen(fd, "rb", buffering=0, closefd=False)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader.read


async def serve(config: Config, *, out_fd: int, in_fd: int = 0, max_line: int,
                version: str, trajectories: str | None = None) -> int:
    """Speak ACP until end of input or a signal; returns the exit code (0).
    `trajectories`: the directory of the sessions' trajectories, if any."""
    out = Output(out_fd)
    await out.open()
    agent = Agent(config, out.send, version=version, trajectories=trajectories)
    framer = LineFramer(max_line)
    read = await _reader(in_fd)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    log.info("acp.ready", max_line_bytes=max_line, pid=os.getpid())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        async with asyncio.TaskGroup() as tg:
            while True:
                chunk = asyncio.ensure_future(read(READ_CHUNK))
                await asyncio.wait({chunk, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not chunk.done():
                    chunk.cancel()
                    log.info("acp.stop", reason="signal")
                    break
                data = chunk.result()
                if not data:
                    if framer.pending():
                        log.warning("acp.input.truncated",
                                    detail="the last line had no newline; it was not read")
                    log.info("acp.stop", reason="end of input")
                    break
                for item in framer.feed(data):
                    _frame(item, agent, out, tg, max_line)
            await agent.aclose()
    finally:
        stopped.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
        out.close()
    return 0


def _frame(item: bytes | Oversized, agent: Agent, out: Output, tg: asyncio.TaskGroup,
           max_line: int) -> None:
    if isinstance(item, Oversized):
        log.warning("acp.frame.oversized", bytes=item.size, max_line_bytes=max_line)
        out.send(ErrorResponse(None, ErrorObject(
            INVALID_REQUEST, f"frame of {item.size} bytes is over the bound of {max_line} "
            "bytes (agentd acp --max-line-bytes); it was dropped unread")))
        return
    try:
        message = codec.decode(item)
    except RPCError as exc:
        log.warning("acp.frame.invalid", code=exc.code, error=exc.message)
        out.send(ErrorResponse(exc.id, ErrorObject(exc.code, exc.message, exc.data)))
        return
    if isinstance(message, Request):
        tg.create_task(_answer(agent, out, message), name=f"acp-{message.method[:40]}")
    elif isinstance(message, Notification):
        agent.notify(message.method, message.params)
    else:  # agentd sends the client no requests: an answer is nobody's
        log.info("acp.response.unexpected", id=str(message.id)[:40])


async def _answer(agent: Agent, out: Output, request: Request) -> None:
    try:
        result = await agent.request(request.method, request.params)
    except RPCError as exc:
        out.send(ErrorResponse(request.id, ErrorObject(exc.code, exc.message, exc.data)))
    except Exception as exc:  # a bug of ours: answered, logged, the process goes on
        log.error("acp.request.failed", method=request.method[:100], exc_type=type(exc).__name__,
                  error=str(exc)[:300])
        out.send(ErrorResponse(request.id, ErrorObject(
            INTERNAL_ERROR, f"internal error in {request.method[:100]}: {type(exc).__name__}")))
    else:
        out.send(Response(request.id, result))
