"""One A2A delegation as an observation: the arguments of `a2a.delegate`
checked (`DelegateArgs`), the call on a run's peers (`delegate`) and what the
model reads of its outcome (`render`).

It sits with the A2A peers, below the agent and the tree, because both perform
delegations: the agent's `a2a.delegate` self-tool (`agentd.agent.a2a_delegate`)
on the run's own peers, and the tree's broker (`agentd.tree.broker`) on the
root's peers for a subagent, after it checked the subagent's scope.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentd.a2a.peers import A2APeers, Delegation
from agentd.errors import A2AFault
from agentd.mcp.selftool import error
from agentd.wire import a2a as w
from agentd.wire.shapes import Observed

NAME = "a2a.delegate"


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
    except A2AFault as exc:
        return error(f"{NAME}: {exc}")
    if a.mode_async and not d.settled:
        body = d.body()
        return Observed(
            text=(f"A2A task {d.task_id} accepted by peer {a.peer} ({body['state']}); "
                  f"read or await {body['uri']} for its result: "
                  + orjson.dumps(body).decode()),
            structured=body)
    return render(d)
