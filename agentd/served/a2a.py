"""`--serve-a2a`: this agentd as an A2A 1.0 agent, beside the self-MCP.

Mounted on the `--serve-mcp` listener (same TLS, same bearer/mTLS guard, same
Host/Origin checks) through the HTTP server's `routes` hook:

* `GET /.well-known/agent-card.json` -- the Agent Card: one `JSONRPC`
  interface at `/a2a` of the address the client used, `streaming: true`, one
  skill (`run`: a task is run by a fresh subagent);
* `POST /a2a` -- the JSON-RPC binding: `SendMessage`, `SendStreamingMessage`,
  `GetTask`, `CancelTask` (anything else is -32601).

A task is a served run. SendMessage spawns an async subagent through the one
`SubagentBackend` with the caller `served` (the same chokepoint, caps and
handles as `subagent.spawn` on the self-MCP: the task id IS the `served.N`
handle); the message's text is the instruction. Without
`configuration.returnImmediately` the answer waits for the run's end; a
streaming send gets the Task at once, then the result artifact and the final
status. A cap refusal is a Task in `TASK_STATE_REJECTED` whose status message
says why. The principal that sent the message owns the task: GetTask and
CancelTask from another principal answer TaskNotFound, exactly as for a task
that never existed. A message naming an existing `taskId` is refused with
UnsupportedOperation (-32004): a served run takes one message; a follow-up is a
new task (the same `contextId` may be reused).

States: running -> WORKING; completed -> COMPLETED; cancelled -> CANCELED;
failed, budget_exhausted, deadline -> FAILED (the status message names which).
The run's result becomes the artifact `result` (a text part, or a data part
for a structured result).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

import msgspec
import orjson
from aiohttp import web

from agentd import __version__
from agentd.agent.subagents import HandleState, Refusal, SpawnRequest, SubagentBackend, Unknown
from agentd.errors import RPCError
from agentd.log import log
from agentd.mcp.server.handler import current_principal
from agentd.served.backend import SERVED_CALLER
from agentd.wire import a2a as w
from agentd.wire.guard import PEER_FAULTS, fault_text

__all__ = ["PATH", "A2AServed"]

PATH: Final = "/a2a"
KEEP_OWNED: Final = 4096  # task owners remembered (oldest finished forgotten first)
CANCEL_WAIT: Final = 5.0  # how long CancelTask waits for the run to reach its end

_STATE: Final = {"running": w.WORKING, "completed": w.COMPLETED, "cancelled": w.CANCELED}
_log = log.bind(component="a2a.served")


class _Rpc(msgspec.Struct):
    method: str
    jsonrpc: str = ""
    id: int | str | None = None
    params: msgspec.Raw = msgspec.Raw(b"{}")


class _IdParams(msgspec.Struct, rename="camel"):
    id: str
    history_length: int | None = None


_rpc = msgspec.json.Decoder(_Rpc)
_id_params = msgspec.json.Decoder(_IdParams)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()


class A2AServed:
    """The served A2A agent over one backend; `mount(server)` adds its routes."""

    def __init__(self, backend: SubagentBackend, *, name: str = "agentd",
                 description: str = "") -> None:
        self.backend = backend
        self.name = name
        self.description = description or (
            "An agentd worker: each task is run by a fresh agent with this worker's "
            "model and MCP tools; the result comes back as the artifact 'result'.")
        # a task is a served run itself (never a handle under it): its context id,
        # kept for KEEP_OWNED tasks, the oldest forgotten first; who may touch it
        # is the backend's one ownership rule (the principal that sent it)
        self._contexts: OrderedDict[str, str] = OrderedDict()
        self._ended: dict[str, asyncio.Event] = {}
        self._guard: Callable[[web.Request], web.StreamResponse | None] | None = None
        backend.on_terminal(self._on_terminal)

    def mount(self, server: Any) -> None:
        """The HTTP server's `routes` hook: add the card and the JSON-RPC endpoint."""
        self._guard = server.guard.check
        server.app.router.add_route("GET", w.AGENT_CARD_PATH, self._card)
        server.app.router.add_route("POST", PATH, self._post)

    # ------------------------------------------------------------ state
    def _on_terminal(self, state: HandleState) -> None:
        ev = self._ended.pop(state.handle, None)
        if ev is not None:
            ev.set()

    def adopt(self, handle: str, context_id: str, *, running: bool) -> None:
        """A task an earlier process on the same journal served (``--journal``), its
        run restored under its old handle: a task again, in its old context."""
        self._own(handle, context_id)
        if running:
            self._ended[handle] = asyncio.Event()

    def _own(self, handle: str, context_id: str) -> None:
        self._contexts[handle] = context_id
        while len(self._contexts) > KEEP_OWNED:
            self._contexts.popitem(last=False)

    def _status(self, handle: str, principal: str) -> HandleState | Unknown:
        """The run of one of ``principal``'s tasks (the backend applies the rule)."""
        if handle not in self._contexts:  # not a task (a self-MCP run, or forgotten)
            return Unknown(handle)
        return self.backend.status(SERVED_CALLER, handle, principal=principal)

    def _lookup(self, handle: str, principal: str) -> HandleState:
        """The principal's task, or the one TaskNotFound answer (never, evicted,
        or another principal's: alike)."""
        state = self._status(handle, principal)
        if not isinstance(state, HandleState):
            raise RPCError(w.TASK_NOT_FOUND, "Task not found", side="local")
        return state

    def _task(self, state: HandleState) -> dict[str, Any]:
        """The Task JSON of a served run."""
        handle = state.handle
        wire_state = _STATE.get(state.status, w.FAILED)
        status: dict[str, Any] = {"state": wire_state}
        out: dict[str, Any] = {"id": handle, "contextId": self._contexts.get(handle, handle),
                               "status": status}
        if state.done:
            note = state.status if wire_state == w.FAILED else ""
            if state.partial:
                note = (note + " (partial result)").strip()
            if note:
                status["message"] = {"messageId": f"{handle}-status", "role": "ROLE_AGENT",
                                     "taskId": handle, "parts": [{"text": note}]}
            if state.result is not None:
                part = ({"text": state.result} if isinstance(state.result, str)
                        else {"data": state.result, "mediaType": "application/json"})
                out["artifacts"] = [{"artifactId": "result", "name": "result",
                                     "parts": [part]}]
        return out

    async def _until_end(self, handle: str, principal: str,
                         limit: float | None = None) -> HandleState:
        ev = self._ended.get(handle)
        if ev is not None and not self._lookup(handle, principal).done:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    await ev.wait()
        return self._lookup(handle, principal)

    # ------------------------------------------------------------ HTTP
    def card(self, base: str) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "version": __version__,
            "supportedInterfaces": [{"url": base + PATH, "protocolBinding": w.BINDING_JSONRPC,
                                     "protocolVersion": w.PROTOCOL_VERSION}],
            "capabilities": {"streaming": True, "pushNotifications": False},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain", "application/json"],
            "skills": [{"id": "run", "name": "run",
                        "description": "Run the task (the message's text) as a fresh agent "
                                       "and return its distilled result.",
                        "tags": ["agentd", "delegation"]}],
        }

    async def _card(self, request: web.Request) -> web.StreamResponse:
        assert self._guard is not None
        refused = self._guard(request)
        if refused is not None:
            return refused
        return web.json_response(self.card(f"{request.scheme}://{request.host}"),
                                 dumps=lambda v: orjson.dumps(v).decode())

    async def _post(self, request: web.Request) -> web.StreamResponse:
        assert self._guard is not None
        refused = self._guard(request)
        if refused is not None:
            return refused
        principal = current_principal.get() or "anonymous"  # as the MCP endpoint counts
        try:
            body = await request.read()
            msg = _rpc.decode(body)
        except msgspec.ValidationError as exc:
            return _error(None, -32700 if not body.lstrip().startswith(b"{") else -32600,
                          f"Invalid request: {fault_text(exc)}")
        except PEER_FAULTS as exc:  # not JSON, nested too deeply, not UTF-8
            return _error(None, -32700, f"Parse error: {fault_text(exc)}")
        version = request.headers.get(w.VERSION_HEADER)
        if version and version.split(".")[0] != "1":
            return _error(msg.id, w.VERSION_NOT_SUPPORTED,
                          f"A2A version {version!r} is not supported (1.0 is)")
        try:
            if msg.method == "SendMessage":
                return _result(msg.id, await self._send(msg, principal))
            if msg.method == "SendStreamingMessage":
                return await self._stream(request, msg, principal)
            if msg.method == "GetTask":
                params = self._ids(msg)
                return _result(msg.id, self._task(self._lookup(params.id, principal)))
            if msg.method == "CancelTask":
                return _result(msg.id, await self._cancel(self._ids(msg).id, principal))
            raise RPCError(-32601, f"Method not found: {msg.method}", side="local")
        except RPCError as exc:
            if exc.side == "remote":  # not ours to answer with
                raise
            return _error(msg.id, exc.code, exc.message)

    @staticmethod
    def _ids(msg: _Rpc) -> _IdParams:
        try:
            return _id_params.decode(msg.params)
        except PEER_FAULTS as exc:
            raise RPCError(-32602, f"Invalid params: {fault_text(exc)}", side="local") from None

    # ------------------------------------------------------------ methods
    async def _spawn(self, msg: _Rpc, principal: str) -> tuple[dict[str, Any], bool]:
        """(the Task JSON, whether a run was started) for a SendMessage's params."""
        try:
            req = w.send_request_decoder.decode(msg.params)
        except PEER_FAULTS as exc:
            raise RPCError(-32602, f"Invalid params: {fault_text(exc)}", side="local") from None
        if req.message.task_id:
            if isinstance(self._status(req.message.task_id, principal), Unknown):
                raise RPCError(w.TASK_NOT_FOUND, "Task not found", side="local")
            raise RPCError(w.UNSUPPORTED_OPERATION,
                           "a served agentd task takes one message; send a new task "
                           "(the same contextId may be reused)", side="local")
        text = "\n".join(p.text for p in req.message.parts if p.text)
        if not text.strip():
            raise RPCError(-32602, "Invalid params: the message has no text part", side="local")
        context_id = req.message.context_id or uuid.uuid4().hex
        state = await self.backend.spawn(SERVED_CALLER,
                                         SpawnRequest(instruction=text, mode="async",
                                                      a2a_context=context_id),
                                         principal=principal)
        if isinstance(state, Refusal):
            rejected = f"rejected-{uuid.uuid4().hex[:12]}"
            _log.warning("a2a.served.rejected", reason=state.text, principal=principal)
            return {"id": rejected, "contextId": context_id, "status": {
                "state": w.REJECTED, "message": {
                    "messageId": f"{rejected}-status", "role": "ROLE_AGENT",
                    "parts": [{"text": state.text}]}}}, False
        self._own(state.handle, context_id)
        if not state.done:
            self._ended[state.handle] = asyncio.Event()
            now = self._status(state.handle, principal)
            if isinstance(now, Unknown) or now.done:
                self._ended.pop(state.handle).set()
        _log.info("a2a.served.task", task_id=state.handle, principal=principal)
        immediate = bool(req.configuration and req.configuration.return_immediately)
        return self._task(state), not immediate

    async def _send(self, msg: _Rpc, principal: str) -> dict[str, Any]:
        task, wait = await self._spawn(msg, principal)
        if wait:
            task = self._task(await self._until_end(task["id"], principal))
        return {"task": task}

    async def _stream(self, request: web.Request, msg: _Rpc,
                      principal: str) -> web.StreamResponse:
        task, started = await self._spawn(msg, principal)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)

        async def emit(result: dict[str, Any]) -> None:
            await resp.write(b"data: " + w.encode(
                {"jsonrpc": "2.0", "id": msg.id, "result": result}) + b"\n\n")

        handle = task["id"]
        try:
            await emit({"task": task})
            if started or handle in self._contexts:
                final = self._task(await self._until_end(handle, principal))
                for artifact in final.get("artifacts", ()):
                    await emit({"artifactUpdate": {
                        "taskId": handle, "contextId": final["contextId"],
                        "artifact": artifact, "lastChunk": True}})
                await emit({"statusUpdate": {"taskId": handle, "contextId": final["contextId"],
                                             "status": final["status"]}})
            await resp.write_eof()
        except ConnectionError:
            # the client went away: the task goes on (GetTask still answers it)
            _log.info("a2a.served.stream_closed", task_id=handle)
        return resp

    async def _cancel(self, handle: str, principal: str) -> dict[str, Any]:
        state = self._lookup(handle, principal)
        if state.done:
            raise RPCError(w.TASK_NOT_CANCELABLE, "Task cannot be canceled", side="local")
        await self.backend.cancel(SERVED_CALLER, handle, principal=principal)  # an Unknown by now reads TaskNotFound below
        return self._task(await self._until_end(handle, principal, CANCEL_WAIT))


def _result(id_: Any, result: Any) -> web.Response:
    # w.encode (msgspec), not orjson: the echoed id is the client's, of any size
    return web.Response(body=w.encode({"jsonrpc": "2.0", "id": id_, "result": result}),
                        content_type="application/json")


def _error(id_: Any, code: int, message: str) -> web.Response:
    return web.Response(body=w.encode({"jsonrpc": "2.0", "id": id_,
                                       "error": {"code": code, "message": message}}),
                        content_type="application/json")
