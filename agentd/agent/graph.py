"""`graph.run`: a small DAG of spawn specs, run through the one spawn chokepoint.

The self-tool `agentd__graph_run` takes

    {"nodes": [{"id": "a", "instruction": "...", "output_contract": "...",
                "tool_scope": ["fs"], "after": ["b", "c"]}, ...]}

and runs every node as a sync subagent of the calling agent as soon as all the
nodes it comes `after` are done, independent nodes concurrently.  Each node's
instruction is followed by its predecessors' distillates (fenced, by id).  A
node whose predecessor did not complete is `skipped`; a refused spawn is
`refused` with the refusal text.  A malformed graph (duplicate or unknown ids,
a cycle, more than MAX_NODES nodes) is refused as an `isError` result before
anything is spawned.  The result is `{"status", "nodes": {id: {handle,
status, result}}}` with `status` `completed` only when every node completed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from agentd.agent.selftools import SelfTools
from agentd.agent.subagents import TOOL_SCOPE_SCHEMA, Refusal, SpawnRequest, SubagentBackend

__all__ = ["MAX_NODES", "install", "order", "run_graph"]

MAX_NODES = 64

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "nodes": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "instruction": {"type": "string"},
                    "output_contract": {"type": "string"},
                    "tool_scope": TOOL_SCOPE_SCHEMA,
                    "after": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["id", "instruction"],
            },
        },
    },
    "required": ["nodes"],
}


def _nodes(raw: Any) -> dict[str, dict[str, Any]] | Refusal:
    if not isinstance(raw, list) or not raw:
        return Refusal("graph.run: 'nodes' must be a non-empty array")
    if len(raw) > MAX_NODES:
        return Refusal(f"graph.run: at most {MAX_NODES} nodes (got {len(raw)})")
    nodes: dict[str, dict[str, Any]] = {}
    for spec in raw:
        if not isinstance(spec, dict) or not isinstance(spec.get("id"), str) \
                or not isinstance(spec.get("instruction"), str) or not spec["instruction"].strip():
            return Refusal("graph.run: every node needs a string 'id' and a non-empty "
                             "'instruction'")
        if spec["id"] in nodes:
            return Refusal(f"graph.run: duplicate node id {spec['id']!r}")
        after = spec.get("after", [])
        scope = spec.get("tool_scope")
        if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
            return Refusal(f"graph.run: node {spec['id']!r}: 'after' must be an array of ids")
        if scope is not None and (not isinstance(scope, list)
                                  or not all(isinstance(s, str) for s in scope)):
            return Refusal(f"graph.run: node {spec['id']!r}: 'tool_scope' must be an array "
                             "of strings")
        nodes[spec["id"]] = spec
    for nid, spec in nodes.items():
        for dep in spec.get("after", []):
            if dep not in nodes:
                return Refusal(f"graph.run: node {nid!r} comes after unknown node {dep!r}")
    return nodes


def order(raw: Any) -> list[str] | Refusal:
    """A topological order of the node ids, or the refusal of a cycle or a
    malformed graph (its text is the isError observation)."""
    nodes = _nodes(raw)
    if isinstance(nodes, Refusal):
        return nodes
    state: dict[str, int] = {}  # 1 visiting, 2 done
    out: list[str] = []

    def visit(nid: str, path: list[str]) -> Refusal | None:
        if state.get(nid) == 2:
            return None
        if state.get(nid) == 1:
            cycle = [*path[path.index(nid):], nid]
            return Refusal(f"graph.run: cycle refused: {' -> '.join(cycle)}")
        state[nid] = 1
        for dep in nodes[nid].get("after", []):
            if (refused := visit(dep, [*path, nid])) is not None:
                return refused
        state[nid] = 2
        out.append(nid)
        return None

    for nid in nodes:
        if (refused := visit(nid, [])) is not None:
            return refused
    return out


def _instruction(spec: dict[str, Any], inputs: dict[str, Any]) -> str:
    if not inputs:
        return spec["instruction"]
    fenced = "\n".join(f"<<<input {nid}>>>\n{orjson.dumps(val, default=str).decode()}\n"
                       f"<<<end input {nid}>>>" for nid, val in inputs.items())
    return f"{spec['instruction']}\n\nResults of the preceding steps:\n{fenced}"


async def run_graph(backend: SubagentBackend, caller: str,
                    raw: Any) -> dict[str, Any] | Refusal:
    """Run the DAG; returns `{"status", "nodes"}` (or its refusal, before any spawn)."""
    ids = order(raw)
    nodes = _nodes(raw)
    if isinstance(ids, Refusal) or isinstance(nodes, Refusal):
        return ids if isinstance(ids, Refusal) else nodes  # the same refusal in both
    done: dict[str, asyncio.Event] = {nid: asyncio.Event() for nid in ids}
    results: dict[str, dict[str, Any]] = {}

    async def one(nid: str) -> None:
        spec = nodes[nid]
        try:
            deps = spec.get("after", [])
            for dep in deps:
                await done[dep].wait()
            bad = [d for d in deps if results[d]["status"] != "completed"]
            if bad:
                results[nid] = {"handle": None, "status": "skipped",
                                "result": f"not run: {', '.join(bad)} did not complete"}
                return
            scope = spec.get("tool_scope")
            request = SpawnRequest(
                instruction=_instruction(spec, {d: results[d]["result"] for d in deps}),
                output_contract=spec.get("output_contract"),
                tool_scope=tuple(scope) if scope is not None else None, mode="sync")
            state = await backend.spawn(caller, request)
            if isinstance(state, Refusal):
                results[nid] = {"handle": None, "status": "refused", "result": state.text}
                return
            results[nid] = {"handle": state.handle, "status": state.status,
                            "result": state.result}
        finally:
            done[nid].set()

    async with asyncio.TaskGroup() as tg:
        for nid in ids:
            tg.create_task(one(nid))
    ok = all(r["status"] == "completed" for r in results.values())
    return {"status": "completed" if ok else "failed",
            "nodes": {nid: results[nid] for nid in ids}}


def install(selftools: SelfTools, backend: SubagentBackend, caller: str) -> None:
    """Add `graph.run` (`agentd__graph_run`) to a run's self-tools."""
    from agentd.mcp.selftool import SelfTool, error, ok

    async def handler(args: dict[str, Any]) -> Any:
        out = await run_graph(backend, caller, args.get("nodes"))
        if isinstance(out, Refusal):
            return error(out.text)
        return ok(orjson.dumps(out, default=str).decode(), out)

    selftools.add(SelfTool(
        "graph.run",
        "Run a DAG of subagent tasks: a node runs once the nodes in its `after` are done, "
        "and gets their results; independent nodes run concurrently.",
        SCHEMA, handler))
