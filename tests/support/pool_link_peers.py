"""Misbehaving parties on the pool link, each an aiohttp app in its own thread.

The pool's tests block on a worker's log (``Agentd.wait_event`` is synchronous),
so a peer the workers must reach meanwhile runs on a loop of its own thread.

* :class:`HostilePeer` is a pool member that holds the pool key (a key holder
  is trusted by design: docs/security.md "The pool link") and answers relayed
  operations badly on purpose: slowly, past the relay's bound, nested 100,000
  deep.  It answers probes correctly, so the workers call it alive.
* :class:`RecordingLink` sits on one worker's link to a peer (an eavesdropper
  on a plain-http link): it forwards every request and keeps the relayed ones
  exactly as they were sent, for replaying.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import aiohttp
from aiohttp import web
from peers import free_port

from agentd.pool import handles

INCARNATION = b"\x09" * handles.INCARNATION_BYTES


class _Threaded:
    """An aiohttp app served on 127.0.0.1 from a thread with its own loop."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        raise NotImplementedError

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def up() -> None:
            self._runner = web.AppRunner(self.app(), access_log=None)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
            self._ready.set()

        self._loop.run_until_complete(up())
        self._loop.run_forever()

    def __enter__(self) -> Any:
        self._thread.start()
        assert self._ready.wait(30), "the peer's listener did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        async def down() -> None:
            assert self._runner is not None
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(down(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


class HostilePeer(_Threaded):
    """Pool member ``me`` answering each handle it was told about with ``behaviour``:
    ``slow`` (a 600 KB body in 16 KiB pieces, each after a pause), ``huge`` (a
    chunked answer past 4 MiB), ``deep`` (a body nested 100,000 levels)."""

    SLOW_RESULT = "y" * 600_000

    def __init__(self, key: str, me: str = "w9") -> None:
        super().__init__()
        self.key = handles.PoolKey(key.encode())
        self.me = me
        self.behaviour: dict[str, str] = {}

    def handle(self, behaviour: str, principal: str) -> str:
        """A handle of this peer's for ``principal``, answered with ``behaviour``."""
        import os

        handle = handles.mint_handle(self.key, self.me, INCARNATION,
                                     os.urandom(handles.RANDOM_BYTES), principal)
        self.behaviour[handle] = behaviour
        return handle

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/pool/probe", self._probe)
        app.router.add_post("/pool/relay", self._relay)
        return app

    async def _probe(self, request: web.Request) -> web.Response:
        nonce = json.loads(await request.read())["nonce"]
        mac = handles.probe_mac(self.key, self.me, INCARNATION.hex(), 4, nonce)
        return web.json_response({"incarnation": INCARNATION.hex(), "free": 4, "id": self.me,
                                  "mac": mac})

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        handle = json.loads(await request.read())["handle"]
        behaviour = self.behaviour.get(handle, "unknown")
        if behaviour == "deep":
            depth = 100_000
            return web.Response(body=b'{"kind":"body","body":{"x":' + b"[" * depth
                                + b"]" * depth + b"}}", content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        if behaviour == "slow":
            body = json.dumps({"kind": "body", "body": {
                "handle": handle, "status": "completed", "done": True, "partial": False,
                "result": self.SLOW_RESULT}}).encode()
            resp.content_length = len(body)
            await resp.prepare(request)
            for i in range(0, len(body), 16 * 1024):
                await resp.write(body[i:i + 16 * 1024])
                await asyncio.sleep(0.01)  # a peer that writes slowly: its pace, not a wait
        elif behaviour == "huge":  # chunked: no length to refuse it by
            await resp.prepare(request)
            await resp.write(b'{"kind":"body","body":{"result":"')
            for _ in range(5):
                await resp.write(b"z" * (1024 * 1024))
            await resp.write(b'"}}')
        else:
            await resp.prepare(request)
            await resp.write(b'{"kind":"unknown"}')
        await resp.write_eof()
        return resp


class RecordingLink(_Threaded):
    """A man in the middle of a plain-http pool link to ``target``: every request
    is forwarded as it came; each relayed one is kept (``captured``) as sent."""

    _KEPT = (handles.RELAY_HEADER, handles.RELAY_PRINCIPAL_HEADER, "Content-Type")

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target
        self.captured: list[tuple[dict[str, str], bytes]] = []

    def app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_post("/{path:.*}", self._forward)
        return app

    async def _forward(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k: v for k in self._KEPT if (v := request.headers.get(k)) is not None}
        if request.path == "/pool/relay":
            self.captured.append((headers, body))
        async with aiohttp.ClientSession() as session, session.post(
                self.target + request.path, data=body, headers=headers) as up:
            return web.Response(status=up.status, body=await up.read(),
                                content_type=up.content_type)
