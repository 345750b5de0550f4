"""A run is terminal when its result is known, not when its process is gone.

The children here answer their run and then linger (the test-only
`linger:FIFO` fault, agentd.child.boot): they ignore SIGTERM and EOF
until this test opens the FIFO for writing.  So the process cannot have
exited before the test releases it, and each assertion below is one of event
order: the sync spawn's answer, the `on_terminal` callback and the self-MCP's
`notifications/resources/updated` all come while the child is still alive;
its teardown then completes and the process is reaped.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from tree_helpers import make_config, precompile, running

from agentd.agent.subagents import SpawnRequest
from agentd.app import serving
from agentd.app.compose import open_supervisor
from agentd.child.boot import FAULT_ENV, LINGER
from agentd.config.serve import parse_serve

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    precompile()


@pytest.fixture
def fifo(tmp_path, monkeypatch):
    path = tmp_path / "release"
    os.mkfifo(path)
    monkeypatch.setenv(FAULT_ENV, LINGER + str(path))  # read as each spawn is admitted
    return path


def _release(path) -> None:
    """Open the FIFO for writing: every lingering child blocked on it goes on."""
    fd = os.open(path, os.O_WRONLY)  # blocks until a child has it open for reading
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


async def test_the_sync_answer_comes_before_the_teardown(tmp_path, spawn, fifo):
    # a long drain budget: the ladder would not SIGKILL the lingering child first
    cfg = make_config(tmp_path, spawn=spawn, drain_timeout=120.0)
    async with open_supervisor(cfg) as sup:
        alive_at_terminal: list[bool] = []
        sup.on_terminal(lambda s: alive_at_terminal.append(
            not sup.process(s.handle).exited.is_set()))
        st = await sup.spawn("0", SpawnRequest("hello"))
        assert st.status == "completed" and st.result == '{"ok": true}'
        proc = sup.process(st.handle)
        assert proc is not None
        assert alive_at_terminal == [True]
        assert not proc.exited.is_set() and running(proc.pid)  # teardown still going on
        assert sup.counts()["running"] == 0  # no longer a live subagent: admission agrees
        await asyncio.to_thread(_release, fifo)
        async with asyncio.timeout(60):  # a bound, not a speed assertion
            await proc.exited.wait()
        assert proc.returncode == 0
        assert sup.status("0", st.handle).status == "completed"


async def test_the_async_updated_comes_before_the_teardown(tmp_path, spawn, fifo):
    from peers import require_modules

    require_modules("mcp")
    from mcp import Client

    config = make_config(tmp_path, spawn=spawn, drain_timeout=120.0,
                         serve=parse_serve("http://127.0.0.1:0", None, None, None, None))
    alive_at_update: list[bool] = []
    arrived = asyncio.Event()

    async with open_supervisor(config, run_id="r") as sup, \
            serving.serve(config, run_id="r", backend=sup) as runner:

        async def on_message(msg):
            if getattr(msg, "method", None) == "notifications/resources/updated":
                alive_at_update.append(not sup.process("served.1").exited.is_set())
                arrived.set()

        async with Client(runner.url, mode="legacy", message_handler=on_message) as c:
            r = await c.call_tool("subagent.spawn", {"instruction": "later", "async": True})
            assert r.structured_content["handle"] == "served.1"
            await c.subscribe_resource("agent://subagent/served.1")
            async with asyncio.timeout(60):
                await arrived.wait()
            assert alive_at_update == [True]
            body = json.loads(
                (await c.read_resource("agent://subagent/served.1")).contents[0].text)
            assert body["done"] is True and body["status"] == "completed"
            proc = sup.process("served.1")
            assert proc is not None and not proc.exited.is_set()
            await asyncio.to_thread(_release, fifo)
            async with asyncio.timeout(60):
                await proc.exited.wait()
            assert proc.returncode == 0

