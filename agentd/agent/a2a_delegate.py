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

from agentd.a2a.delegation import NAME, DelegateArgs, delegate
from agentd.a2a.peers import A2APeers
from agentd.agent.selftools import SelfTools
from agentd.mcp.selftool import SelfTool, error


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
