"""A child's pipes are closed once, and closed: never twice, never leaked.

uvloop closes a pipe's fd itself (libuv) and then closes the file object it
was given as well; a file object that owned the fd closed that number a second
time (strace showed hundreds of `close(N) = -1 EBADF` a fan-out), by then
perhaps another thread's file: with the journal's writer threads opening SQLite
files, a journaled spawn failed with SQLITE_IOERR_WRITE. That race cannot be
provoked on demand (it needs the other thread's open to land between libuv's
close and the file object's), so this holds the rule that excludes it:
`agentd.runtime.pipe_file` hands uvloop a file object that does not own the
fd, hands asyncio (which closes only the file object) one that does, and under
both loops the fd is closed once the transport is gone.
"""

from __future__ import annotations

import asyncio
import errno
import os

import pytest
import uvloop

from agentd.runtime import pipe_file


async def _closed_by_the_transport() -> tuple[bool, int]:
    """(whether the file object owned the fd, errno of an fstat once the transport
    has gone: EBADF when the fd was closed)."""
    loop = asyncio.get_running_loop()
    r, w = os.pipe()
    gone = asyncio.Event()

    class Gone(asyncio.Protocol):
        def connection_lost(self, exc: Exception | None) -> None:
            gone.set()

    file = pipe_file(r, "rb")
    tr, _ = await loop.connect_read_pipe(Gone, file)
    tr.close()
    await gone.wait()
    await asyncio.sleep(0)  # whatever the transport still had to run
    os.close(w)
    try:
        os.fstat(r)
    except OSError as exc:
        return file.closefd, exc.errno or 0
    os.close(r)
    return file.closefd, 0


@pytest.mark.parametrize("factory, owns", [(uvloop.new_event_loop, False), (None, True)],
                         ids=["uvloop", "asyncio"])
def test_a_pipe_is_closed_by_its_transport_alone(factory, owns):
    with asyncio.Runner(loop_factory=factory) as runner:
        owned, err = runner.run(_closed_by_the_transport())
    assert owned is owns  # uvloop closes the fd itself: the file object must not again
    assert err == errno.EBADF  # and the fd is closed, not leaked
