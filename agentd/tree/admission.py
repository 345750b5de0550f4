"""Admission: may a spawn run, with which scope, under which handle?  Pure.

No process, no clock, no log: `admit` gets what is known of the tree at the
moment of the spawn (`TreeView`: caps, counts, tokens) and of the caller
(`CallerView`) and returns either the child's `Admitted` (its handle, depth and
narrowed scope) or a `Denied`: its `text` is what the caller is shown (the
supervisor's `Refusal`, an `isError` result: spec §2.2; the texts are pinned
by tests and clients) and its `cap` the metric label
(`agentd_subagent_refusals_total{cap}`, a small fixed set).

The checks, in this order:

* `spawn refused: shutting down`
* `spawn refused: caller handle 0.7 is not running`
* `spawn refused: max_depth=4 reached at handle 0.2.1.3`
* `spawn refused: unknown mode 'x'`
* `spawn refused: tool_scope widens the caller's scope at handle 0.2 (not in scope: x)`
* `spawn refused: max_children=16 reached at handle 0.2`  (live children of the caller)
* `spawn refused: max_subagents=256 reached at handle 0.2`  (live subagents in the tree)
* `spawn refused: token_ceiling=50000 reached at handle 0.2`  (tokens spent by the tree)

A child's scope is the caller's unless the request names one, which may only
narrow it; its handle is the caller's plus `.n`, `n` counting every spawn the
caller was ever admitted (`agentd.tree.ownership.mint`).
"""

from __future__ import annotations

from typing import get_args

import msgspec

from agentd.agent.subagents import SpawnMode, SpawnRequest, depth_of, mint

__all__ = ["Admitted", "CallerView", "Denied", "TreeView", "admit"]

_MODES = frozenset(get_args(SpawnMode))


class TreeView(msgspec.Struct, frozen=True, kw_only=True):
    """The tree as admission sees it at one spawn."""

    max_depth: int
    max_children: int
    max_subagents: int
    live: int  # live subagents in the whole tree
    tokens: int  # tokens the tree has spent
    ceiling: int | None  # the tree's token ceiling
    closing: bool = False


class CallerView(msgspec.Struct, frozen=True, kw_only=True):
    """The caller as admission sees it (`None` to `admit`: no such handle)."""

    handle: str
    running: bool
    scope: frozenset[str]
    live_children: int
    minted: int  # handles ever minted under it


class Admitted(msgspec.Struct, frozen=True):
    handle: str
    depth: int
    scope: frozenset[str]


class Denied(msgspec.Struct, frozen=True):
    text: str  # starts `spawn refused: `
    cap: str  # the metric label


def admit(tree: TreeView, caller_handle: str, caller: CallerView | None,
          request: SpawnRequest) -> Admitted | Denied:
    """Admit `request` from `caller_handle` (see the module doc for the order)."""
    at = f"at handle {caller_handle}"
    if tree.closing:
        return Denied("spawn refused: shutting down", "shutting_down")
    if caller is None or not caller.running:
        return Denied(f"spawn refused: caller handle {caller_handle} is not running",
                       "not_running")
    depth = depth_of(caller_handle) + 1
    if depth > tree.max_depth:
        return Denied(f"spawn refused: max_depth={tree.max_depth} reached {at}", "max_depth")
    if request.mode not in _MODES:
        return Denied(f"spawn refused: unknown mode {request.mode!r}", "mode")
    scope = caller.scope if request.tool_scope is None else frozenset(request.tool_scope)
    wider = scope - caller.scope
    if wider:
        return Denied(f"spawn refused: tool_scope widens the caller's scope {at} "
                       f"(not in scope: {', '.join(sorted(wider))})", "tool_scope")
    if caller.live_children >= tree.max_children:
        return Denied(f"spawn refused: max_children={tree.max_children} reached {at}",
                       "max_children")
    if tree.live >= tree.max_subagents:
        return Denied(f"spawn refused: max_subagents={tree.max_subagents} reached {at}",
                       "max_subagents")
    if tree.ceiling is not None and tree.tokens >= tree.ceiling:
        return Denied(f"spawn refused: token_ceiling={tree.ceiling} reached {at}",
                       "token_ceiling")
    return Admitted(mint(caller_handle, caller.minted + 1), depth, scope)
