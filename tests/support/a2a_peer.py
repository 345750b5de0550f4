"""An A2A 1.0 peer built on the official `a2a-sdk` (a real peer for the A2A tests).

Run as a script, one server per process, on loopback:

    python tests/support/a2a_peer.py PORT [--binding jsonrpc|rest] [--no-streaming]
                                  [--card bad-url|not-json] [--bearer TOKEN]

It is the SDK's own `DefaultRequestHandlerV2` with an in-memory task store and
an agent executor written here, served with the SDK's Starlette routes (the
Agent Card at `/.well-known/agent-card.json`, and the JSON-RPC binding at `/`
or the HTTP+JSON (REST) binding at `/v1`). Task ids are `task-1`, `task-2`, ...
(the SDK's `task_id_generator` hook), so a playback script can name them.

The executor acts on the first word of the user's text:

``echo X``      one artifact ``echo: X`` and a completed status with ``done: X``
``slow S X``    works S seconds (status updates), then like ``echo X``
``ask X``       input-required (``which colour?``); the follow-up message on
                the same task completes it with ``colour=<follow-up text>``
``auth``        auth-required (``sign in first``)
``forever``     works until cancelled (``GET /stats`` counts the cancels)
``die``         works, then the process exits hard (a peer dying mid-task)
``big N``       one artifact of N bytes of text
``fail``        the task fails with a status message ``boom``

``--card bad-url`` serves a card whose interface URL names another host;
``--card not-json`` serves ``text/html`` garbage at the well-known path.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys


def main(argv: list[str]) -> None:
    import uvicorn
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.agent_execution.simple_request_context_builder import (
        SimpleRequestContextBuilder,
    )
    from a2a.server.events import EventQueue
    from a2a.server.id_generator import IDGenerator, IDGeneratorContext
    from a2a.server.request_handlers import DefaultRequestHandlerV2
    from a2a.server.routes import (
        create_agent_card_routes,
        create_jsonrpc_routes,
        create_rest_routes,
    )
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types.a2a_pb2 import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        Part,
        Task,
        TaskState,
        TaskStatus,
    )
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    port = int(argv[0])
    binding = argv[argv.index("--binding") + 1] if "--binding" in argv else "jsonrpc"
    streaming = "--no-streaming" not in argv
    card_mode = argv[argv.index("--card") + 1] if "--card" in argv else "good"
    bearer = argv[argv.index("--bearer") + 1] if "--bearer" in argv else None
    stats = {"cancelled": 0, "executed": 0}
    counter = itertools.count(1)

    class Seq(IDGenerator):
        def generate(self, context: IDGeneratorContext) -> str:
            return f"task-{next(counter)}"

    class Ctx(IDGenerator):
        def generate(self, context: IDGeneratorContext) -> str:
            return f"ctx-{context.task_id or 'x'}"

    def text(s: str) -> Part:
        return Part(text=s)

    class Executor(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            stats["executed"] += 1
            up = TaskUpdater(event_queue, context.task_id, context.context_id)
            words = context.get_user_input().split(maxsplit=1)
            current = context.current_task
            if current is not None and current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                await up.add_artifact([text(f"colour={context.get_user_input()}")],
                                      name="answer")
                await up.complete(up.new_agent_message([text("thanks")]))
                return
            verb = words[0] if words else ""
            rest = words[1] if len(words) > 1 else ""
            if current is None:  # the SDK wants the Task before its status updates
                await event_queue.enqueue_event(Task(
                    id=context.task_id, context_id=context.context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message]))
            await up.start_work()
            if verb == "slow":
                secs, _, rest = rest.partition(" ")
                await asyncio.sleep(float(secs) / 2)
                await up.update_status(TaskState.TASK_STATE_WORKING,
                                       up.new_agent_message([text("half way")]))
                await asyncio.sleep(float(secs) / 2)
                verb = "echo"
            if verb == "echo":
                await up.add_artifact([text(f"echo: {rest}")], name="echo")
                await up.complete(up.new_agent_message([text(f"done: {rest}")]))
            elif verb == "ask":
                await up.requires_input(up.new_agent_message([text("which colour?")]))
            elif verb == "auth":
                await up.requires_auth(up.new_agent_message([text("sign in first")]))
            elif verb == "forever":
                await asyncio.Event().wait()
            elif verb == "die":
                await asyncio.sleep(0.3)
                os._exit(3)
            elif verb == "big":
                await up.add_artifact([text("x" * int(rest))], name="big")
                await up.complete()
            elif verb == "fail":
                await up.failed(up.new_agent_message([text("boom")]))
            else:
                await up.complete(up.new_agent_message([text(f"unknown: {verb}")]))

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            stats["cancelled"] += 1
            up = TaskUpdater(event_queue, context.task_id, context.context_id)
            await up.cancel()

    base = f"http://127.0.0.1:{port}"
    if card_mode == "bad-url":
        base = f"http://evil.example:{port}"
    iface_url = base + ("/v1" if binding == "rest" else "/")
    protocol = "HTTP+JSON" if binding == "rest" else "JSONRPC"
    card = AgentCard(
        name="sdk-peer", description="a2a-sdk test peer", version="1.0.0",
        supported_interfaces=[AgentInterface(url=iface_url, protocol_binding=protocol,
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["test"])])
    handler = DefaultRequestHandlerV2(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card,
        request_context_builder=SimpleRequestContextBuilder(
            task_id_generator=Seq(), context_id_generator=Ctx()))

    async def stats_route(request: Request) -> Response:
        return JSONResponse(stats)

    async def garbage(request: Request) -> Response:
        return Response("<html>not a card</html>", media_type="text/html")

    routes: list = [Route("/stats", stats_route)]
    if card_mode == "not-json":
        routes.append(Route("/.well-known/agent-card.json", garbage))
    else:
        routes += create_agent_card_routes(card)
    if binding == "rest":
        routes += create_rest_routes(handler, path_prefix="/v1")
    else:
        routes += create_jsonrpc_routes(handler, rpc_url="/")
    app = Starlette(routes=routes)
    if bearer:
        inner = app

        async def guarded(scope, receive, send):  # a bearer check in front of the SDK app
            if scope["type"] == "http" and scope["path"] != "/stats":
                auth = dict(scope["headers"]).get(b"authorization", b"").decode()
                if auth != f"Bearer {bearer}":
                    await Response("unauthorized", status_code=401)(scope, receive, send)
                    return
            await inner(scope, receive, send)

        app = guarded  # type: ignore[assignment]
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
