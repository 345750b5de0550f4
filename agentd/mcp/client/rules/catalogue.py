"""Which listed tools agentd offers: one bad declaration excludes that tool, never the server.

A server's ``tools/list`` is the peer's input like any other.  A tool whose
declaration agentd cannot use -- a schema nested beyond the bound, a local
``$ref`` that points nowhere, an ``x-mcp-header`` declaration the 2026-07-28
revision forbids (SEP-2243), or an ``execution.taskSupport: "required"`` while
agentd declares no tasks support -- is left out of the catalogue with its
reason, and the rest of the catalogue is served.  Offering such a tool to the
model would only make every call of it fail; refusing the whole server for it
would take every good tool with it.

Pure functions over one decoded :class:`~agentd.wire.mcp_types.Tool`: the
client calls :func:`admit` per listed tool and logs each exclusion once
(``mcp.tools.excluded``, see docs/client.md).  Every walk here is iterative
and runs only after the depth bound held, and an exclusion is a return value
(:class:`Excluded`, an expected outcome), so no schema a peer sends raises.

:class:`Freshness` is the catalogue's other rule: when a listed part (tools,
resources) may be re-listed -- its ``ttlMs`` ran out, or a ``list_changed``
said so -- fed ``now`` by the caller (an injected clock).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from agentd.config.model import MAX_SCHEMA_DEPTH_CAP
from agentd.mcp.client.rules.param_headers import tool_header_declarations
from agentd.wire import mcp_types as mt
from agentd.wire.shapes import ParamHeader

__all__ = ["PRUNE_DEPTH", "Excluded", "Freshness", "admit", "prune_deep"]

_REF_KEYS: Final = ("$ref", "$dynamicRef", "$recursiveRef")
_DATA_KEYS: Final = frozenset({"const", "enum", "default", "examples"})  # values, not schemas
_ANCHOR_KEYS: Final = ("$anchor", "$dynamicAnchor")
_SCHEMA_MAPS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions",
                                 "dependentSchemas"})


PRUNE_DEPTH: Final = MAX_SCHEMA_DEPTH_CAP + 8
"""Where :func:`prune_deep` cuts a ``tools/list`` answer: deeper than any schema
admission accepts once the envelope (message, result, tools, tool) is counted,
and far inside the JSON decoder's own nesting guard."""

# a whole JSON string (the unrolled form, fast in re), else a lone quote or
# backslash (malformed), else one structure character
_TOKENS: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|["\\]|[{}\[\]]', re.DOTALL)


@dataclass(frozen=True, slots=True)
class Excluded:
    """A listed tool agentd leaves out of the catalogue, and why (``reason``)."""

    reason: str


_SCHEMA, _MAP, _DATA = 0, 1, 2  # what a node is, for the walk below


def _scan(schema: Any, limit: int, where: str) -> tuple[list[tuple[str, Any]], set[str]] | str:
    """One walk of ``schema``: why not, if it nests (objects and arrays) deeper
    than ``limit``, else its references (keyword, value) and anchors.

    Iterative, and it stops at the first node past the limit, so a schema of
    any depth costs at most its size and never the interpreter's stack.  A
    name-to-schema map (``properties``, ``$defs``, ...) is descended into
    without being taken for a schema itself (a property may be named
    ``$ref``); data keywords (``const``, ``enum``, ...) count for depth only.
    """
    refs: list[tuple[str, Any]] = []
    anchors: set[str] = set()
    stack: list[tuple[Any, int, int]] = [(schema, 1, _SCHEMA)]
    push = stack.append
    while stack:
        node, depth, kind = stack.pop()
        if depth > limit:
            return f"{where} nests deeper than {limit} levels (max_schema_depth)"
        below = depth + 1
        if isinstance(node, list):
            for v in node:
                if isinstance(v, (dict, list)):
                    push((v, below, _SCHEMA if kind == _SCHEMA else _DATA))
            continue
        if kind != _SCHEMA:
            for v in node.values():
                if isinstance(v, (dict, list)):
                    push((v, below, _SCHEMA if kind == _MAP else _DATA))
            continue
        for k, v in node.items():
            if k in _REF_KEYS:
                refs.append((k, v))
            elif k in _ANCHOR_KEYS and isinstance(v, str):
                anchors.add(v)
            if isinstance(v, (dict, list)):
                push((v, below, _DATA if k in _DATA_KEYS else
                      _MAP if k in _SCHEMA_MAPS and isinstance(v, dict) else _SCHEMA))
    return refs, anchors


def _pointer(root: Any, fragment: str) -> bool:
    """Whether the JSON Pointer ``fragment`` (without ``#``) names a value in ``root``."""
    node = root
    for raw in fragment.split("/")[1:]:
        step = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif (isinstance(node, list) and step.isascii() and step.isdigit()
              and int(step) < len(node)):
            node = node[int(step)]
        else:
            return False
    return isinstance(node, (dict, bool))


def _check_refs(schema: dict, where: str, refs: list[tuple[str, Any]],
                anchors: set[str]) -> str:
    """Why not, unless every reference is a string and every local one resolves
    in the document ("" then).

    Non-local references stay the validator's business (never fetched; that
    part of the check is skipped, agentd.mcp.client.rules.schema); a local one that names
    nothing means the server's schema is broken where it points.
    """
    for key, ref in refs:
        if not isinstance(ref, str):
            return f"{where} has a {key} that is not a string"
        if not ref.startswith("#"):
            continue
        fragment = ref[1:]
        ok = (_pointer(schema, fragment) if fragment == "" or fragment.startswith("/")
              else fragment in anchors)
        if not ok:
            return f"{where} has {key} {ref[:200]!r}, which does not resolve"
    return ""


def admit(tool: mt.Tool, *, headers: bool, tasks: bool, max_depth: int
          ) -> tuple[ParamHeader, ...] | Excluded:
    """The tool's ``Mcp-Param-*`` declarations if agentd can offer it, else :class:`Excluded`.
    They go into the tool's one shape as listed (`agentd.wire.shapes.ToolInfo.param_headers`).

    ``headers``: the session mirrors ``x-mcp-header`` parameters (2026-07-28);
    ``tasks``: agentd declared tasks support to this server; ``max_depth``:
    the deepest schema nesting accepted (``ServerSpec.max_schema_depth``).
    """
    schemas = [("inputSchema", tool.inputSchema)]
    if isinstance(tool.outputSchema, dict):
        schemas.append(("outputSchema", tool.outputSchema))
    for where, schema in schemas:
        scanned = _scan(schema, max_depth, where)
        if isinstance(scanned, str):
            return Excluded(scanned)
        refs, anchors = scanned
        if refs and (why := _check_refs(schema, where, refs, anchors)):
            return Excluded(why)
    execution = tool.execution
    if (not tasks and isinstance(execution, mt.ToolExecution)
            and execution.taskSupport == "required"):
        return Excluded("requires task augmentation (execution.taskSupport: required); "
                        "agentd declares no tasks support")
    if not headers:
        return ()
    decls = tool_header_declarations(tool.inputSchema)
    return Excluded(decls) if isinstance(decls, str) else decls


class Freshness:
    """When each catalogue part may be re-listed (sans-IO; ``now`` is monotonic
    seconds from the caller's clock).

    A part is stale once its ``ttlMs`` ran out or a ``list_changed`` marked it;
    the ttl is honoured, never outguessed.  A part never listed is stale."""

    __slots__ = ("_dirty", "_expires")

    def __init__(self) -> None:
        self._expires: dict[str, float] = {}  # part -> expiry (the clock's seconds)
        self._dirty: set[str] = set()  # parts a list_changed invalidated

    def invalidate(self, part: str) -> None:
        """A ``list_changed`` for ``part``: stale until it is listed again."""
        self._dirty.add(part)

    def listing(self, part: str) -> None:
        """A re-list of ``part`` starts: a change noticed from now on is a new one."""
        self._dirty.discard(part)

    def listed(self, part: str, ttl_ms: int, now: float) -> None:
        """``part`` was listed with ``ttl_ms`` (0: stale at once) at ``now``."""
        self._expires[part] = now + ttl_ms / 1000

    def stale(self, part: str, now: float) -> bool:
        return part in self._dirty or now >= self._expires.get(part, 0.0)


def prune_deep(data: bytes | bytearray | str, limit: int = PRUNE_DEPTH) -> bytes | None:
    """``data`` with every JSON object or array nested deeper than ``limit`` replaced by
    ``null``; None when the bytes are not balanced JSON structure.

    A ``tools/list`` answer holding one schema nested beyond the decoder's guard
    (about a thousand levels) cannot be decoded at all, so without this one deep
    tool would take the whole listing -- and the server -- with it.  The client
    session cuts such an answer here and decodes it again; the cut schema is
    still deeper than any admission accepts, so exactly that tool is excluded
    (:func:`admit`).  One regular-expression scan over the bytes (strings
    matched whole, escapes honoured), never recursive, linear in their length.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    out = bytearray()
    depth = 0
    cut = 0  # the depth of the value being cut (0: not cutting)
    pos = 0  # the first byte not yet copied (or skipped)
    for m in _TOKENS.finditer(raw):
        ch = raw[m.start()]
        if ch == 0x22:  # a whole string: copied with what precedes it, or skipped
            continue
        if ch == 0x5C:  # a backslash outside a string, or a string never closed
            return None
        i = m.start()
        if ch in (0x7B, 0x5B):  # { [
            depth += 1
            if cut:
                continue
            if depth > limit:
                out += raw[pos:i]
                out += b"null"
                cut = depth
            continue
        if depth == 0:  # } ] without an opener
            return None
        if cut and depth == cut:
            cut = 0
            pos = i + 1
        depth -= 1
    if depth or cut:
        return None
    out += raw[pos:]
    return bytes(out)
