"""A test-owned OpenAI-compatible Chat Completions gateway (aiohttp), scripted per test.

    async with Gateway([Reply.tools(("srv__echo", {"text": "hi"})), Reply.text("done")]) as gw:
        ... run agentd with --intelligence gw.url ...
    gw.bodies[0]["tools"] ...   # the exact JSON bodies agentd sent, in order

Each POST to `/v1/chat/completions` consumes the next reply of the script. A
reply answers as JSON, or — when the request asked for `stream: true` — as an
SSE stream of `chat.completion.chunk` deltas (content in pieces, tool-call
arguments in fragments, usage in the last chunk, then `data: [DONE]`), the way
OpenAI streams. A reply can also be an HTTP status (with `Retry-After`), a hang
(for timeouts), a dropped connection, or wait for a gate the test opens (a model
that "thinks" exactly until the test has seen what it waits for). A callable in the script is called
with the request body and returns the reply. Requests beyond the script get a
400 "script exhausted" (non-retryable, so a test fails fast and clearly).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    usage: dict[str, int] | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hang: float = 0.0
    drop: bool = False
    cut: bool = False  # streaming: close the connection mid-stream, before [DONE]
    raw: bytes | None = None
    gate: asyncio.Event | None = None  # answered once the test sets it (the model "thinks")

    @classmethod
    def text(cls, content: str, *, usage: dict[str, int] | None = None) -> Reply:
        return cls(content=content, usage=usage)

    @classmethod
    def tools(cls, *calls: tuple, content: str | None = None,
              usage: dict[str, int] | None = None) -> Reply:
        """Tool calls: each `(name, arguments)` or `(name, arguments, id)`."""
        out = []
        for i, c in enumerate(calls):
            name, args = c[0], c[1]
            cid = c[2] if len(c) > 2 else f"call_{name}_{i}"
            out.append((name, args, cid))
        return cls(content=content, tool_calls=out, usage=usage)

    @classmethod
    def error(cls, status: int, *, retry_after: str | None = None) -> Reply:
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return cls(status=status, headers=headers)

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": cid, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}
                for name, args, cid in self.tool_calls]
        return msg

    def usage_obj(self) -> dict[str, int]:
        u = dict(self.usage or {"prompt_tokens": 10, "completion_tokens": 5})
        u.setdefault("total_tokens", u.get("prompt_tokens", 0) + u.get("completion_tokens", 0))
        return u

    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


Script = list[Reply | Callable[[dict[str, Any]], Reply]]


class Gateway:
    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = list(script or [])
        self.bodies: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> Gateway:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]  # the port the OS gave
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()  # ends scripted hangs
        if self._runner is not None:
            await self._runner.cleanup()

    def add(self, *replies: Reply | Callable[[dict[str, Any]], Reply]) -> None:
        self.script.extend(replies)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.raw.append(raw)
        self.headers.append(dict(request.headers))
        body = json.loads(raw)
        self.bodies.append(body)
        if not self.script:
            return web.json_response({"error": {"message": "gateway script exhausted"}},
                                     status=400)
        item = self.script.pop(0)
        reply = item(body) if callable(item) else item
        if reply.gate is not None:
            await self._until(reply.gate)
        if reply.hang:
            try:
                await asyncio.wait_for(self._closing.wait(), reply.hang)
            except TimeoutError:
                pass
        if reply.drop:
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=500)
        if reply.status != 200:
            return web.json_response({"error": {"message": f"scripted {reply.status}"}},
                                     status=reply.status, headers=reply.headers)
        if reply.raw is not None:
            return web.Response(body=reply.raw, content_type="application/json")
        if body.get("stream"):
            return await self._stream(request, reply, body)
        return web.json_response({
            "id": f"chatcmpl-{len(self.bodies)}", "object": "chat.completion",
            "model": body.get("model", "test"),
            "choices": [{"index": 0, "message": reply.message(),
                         "finish_reason": reply.finish_reason()}],
            "usage": reply.usage_obj()})

    async def _until(self, gate: asyncio.Event) -> None:
        """Hold the answer until the test opens ``gate`` (or the gateway closes)."""
        waits = {asyncio.ensure_future(gate.wait()), asyncio.ensure_future(self._closing.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _stream(self, request: web.Request, reply: Reply,
                      body: dict[str, Any]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        base = {"id": f"chatcmpl-{len(self.bodies)}", "object": "chat.completion.chunk",
                "model": body.get("model", "test")}

        async def send(obj: Any) -> None:
            data = obj if isinstance(obj, str) else json.dumps(obj)
            await resp.write(f"data: {data}\n\n".encode())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        await send(chunk({"role": "assistant", "content": ""}))
        if reply.cut:
            await resp.write(b'data: {"choices": [{"delta": {"content": "par')
            assert request.transport is not None
            request.transport.close()
            return resp
        text = reply.content or ""
        for i in range(0, len(text), 7):  # content in pieces
            await send(chunk({"content": text[i:i + 7]}))
        for idx, (name, args, cid) in enumerate(reply.tool_calls):
            arguments = json.dumps(args)
            await send(chunk({"tool_calls": [{"index": idx, "id": cid, "type": "function",
                                              "function": {"name": name, "arguments": ""}}]}))
            for i in range(0, len(arguments), 5):  # arguments in fragments
                await send(chunk({"tool_calls": [{"index": idx, "function": {
                    "arguments": arguments[i:i + 5]}}]}))
        await send(chunk({}, reply.finish_reason()))
        if (body.get("stream_options") or {}).get("include_usage"):
            await send({**base, "choices": [], "usage": reply.usage_obj()})
        await send("[DONE]")
        await resp.write_eof()
        return resp
