"""The `a2a.delegate` self-tool (offered as `agentd__a2a_delegate`), `--features a2a`.

`{peer, message, async?, task_id?, context_id?}` -- hand `message` to the A2A
peer `peer` (a declared `--a2a-peer`, within this agent's tool scope):

* sync (default): follow the task until it settles and return the distillate:
  its state, the status message's text and every artifact's text. A task that
  stops in `input-required` or `auth-required` comes back as a normal
  observation carrying `task_id` and `context_id`; the model answers it with a
  follow-up delegate naming that `task_id`. `failed`, `canceled`, `rejected`
  and a peer lost mid-task (`unknown`) are `isError` results.
* async: an acknowledgement at once -- `{peer, task_id, context_id, state, uri}`
  where `uri` is `a2a://{peer}/task/{id}`: read it, `agentd__await_resource` it
  or subscribe to it (one wake when the task settles, then a read).

Everything the peer wrote is untrusted: it reaches the model only inside the
loop's tool-result fence, cut to `--observation-bytes`, like MCP tool output.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

import orjson

from agentd.a2a.client import A2AError
from agentd.a2a.peers import A2APeers, Delegation
from agentd.agent.selftools import SelfTools
from agentd.mcp.selftool import SelfTool, error
from agentd.wire import a2a as w
from agentd.wire.shapes import Observed

NAME = "a2a.delegate"


def schema(peers: Collection[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "peer": {"type": "string", "enum": sorted(peers)},
            "message": {"type": "string"},
            "async": {"type": "boolean", "default": False},
            "task_id": {"type": "string"},
            "context_id": {"type": "string"},
        },
        "required": ["peer", "message"],
    }


def render(d: Delegation) -> Observed:
    """The observation of a settled (or acknowledged) delegation."""
    body = d.body()
    lines = [f"A2A task {d.task_id} on peer {d.peer}: {body['state']}"]
    if d.message:
        lines += ["message:", d.message]
    for a in d.artifacts:
        lines += [f"artifact {a['name']}:", a["text"]]
    if d.error:
        lines.append(f"error: {d.error}")
    if d.state in w.INTERRUPTED:
        lines.append(f"The peer waits for {body['state'].removesuffix('-required')}: answer "
                     f"with agentd__a2a_delegate {{peer: {d.peer!r}, task_id: {d.task_id!r}, "
                     f"context_id: {d.context_id!r}, message: ...}}.")
    failed = (d.state in w.TERMINAL and d.state != w.COMPLETED) or d.state == "unknown"
    return Observed(text="\n".join(lines), is_error=failed, structured=body)


class DelegateArgs:
    """The validated arguments of one `a2a.delegate` call."""

    __slots__ = ("context_id", "message", "mode_async", "peer", "task_id")

    def __init__(self, args: dict[str, Any]) -> None:
        peer = args.get("peer")
        text = args.get("message")
        if not isinstance(peer, str) or not peer:
            raise ValueError("missing required argument 'peer'")
        if not isinstance(text, str) or not text.strip():
            raise ValueError("the message is empty")
        mode_async = args.get("async", False)
        if not isinstance(mode_async, bool):
            raise ValueError("argument 'async' must be a boolean")
        ids = {k: args.get(k) for k in ("task_id", "context_id")}
        for k, v in ids.items():
            if v is not None and not isinstance(v, str):
                raise ValueError(f"argument {k!r} must be a string")
        self.peer: str = peer
        self.message: str = text
        self.mode_async: bool = mode_async
        self.task_id: str | None = ids["task_id"] or None
        self.context_id: str | None = ids["context_id"] or None


async def delegate(peers: A2APeers, a: DelegateArgs) -> Observed:
    """Perform one delegation on the run's peers (the root's, or for a subagent the
    root's through the broker, which checked the scope); the observation."""
    try:
        d = await peers.delegate(a.peer, a.message, task_id=a.task_id,
                                 context_id=a.context_id, wait=not a.mode_async)
    except A2AError as exc:
        return error(f"{NAME}: {exc}")
    if a.mode_async and not d.settled:
        body = d.body()
        return Observed(
            text=(f"A2A task {d.task_id} accepted by peer {a.peer} ({body['state']}); "
                  f"read or await {body['uri']} for its result: "
                  + orjson.dumps(body).decode()),
            structured=body)
    return render(d)


Perform = Callable[[DelegateArgs], Awaitable[Any]]


def install(tools: SelfTools, peers: A2APeers | Collection[str], *,
            perform: Perform | None = None, scope: Collection[str] | None = None) -> None:
    """Add `a2a.delegate`: over the connected `peers` (an `A2APeers`), or -- in a
    brokered subagent -- over the peer names of its scope with `perform` sending
    each call to the parent."""
    if isinstance(peers, A2APeers):
        local = peers
        names: Collection[str] = peers.clients

        async def run(a: DelegateArgs) -> Any:
            return await delegate(local, a)
        perform = run
    else:
        names = peers
    assert perform is not None
    allowed = [p for p in names if scope is None or p in scope]

    async def handler(args: dict[str, Any]) -> Any:
        a = DelegateArgs(args)
        if a.peer not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            return error(f"{NAME}: no A2A peer {a.peer!r} in this agent's scope (peers: {known})")
        return await perform(a)

    tools.add(SelfTool(
        NAME,
        "Delegate a task to an A2A agent (peer) and get its result. sync (default) waits "
        "until the task is done or needs input; async returns a task id and an a2a:// URI "
        "to read or await. To answer a peer that needs input, call again with its task_id "
        "and context_id.",
        schema(allowed), handler))
