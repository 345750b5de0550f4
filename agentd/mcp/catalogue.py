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
and runs only after the depth bound held, so no schema a peer sends can raise
anything but :class:`ToolExcluded`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

from agentd.config import MAX_SCHEMA_DEPTH_CAP
from agentd.errors import MCPError
from agentd.mcp.param_headers import HeaderDeclarationError, ParamHeader, tool_header_declarations
from agentd.wire import mcp_types as mt

__all__ = ["PRUNE_DEPTH", "ToolExcluded", "admit", "prune_deep", "schema_depth"]

_REF_KEYS: Final = ("$ref", "$dynamicRef", "$recursiveRef")
_DATA_KEYS: Final = frozenset({"const", "enum", "default", "examples"})  # values, not schemas
_ANCHOR_KEYS: Final = ("$anchor", "$dynamicAnchor")
_SCHEMA_MAPS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions",
                                 "dependentSchemas"})


PRUNE_DEPTH: Final = MAX_SCHEMA_DEPTH_CAP + 8
"""Where :func:`prune_deep` cuts a ``tools/list`` answer: deeper than any schema
admission accepts once the envelope (message, result, tools, tool) is counted,
and far inside the JSON decoder's own nesting guard."""

_STRUCTURE: Final = re.compile(rb'["{}\[\]]')
_STRING_END: Final = re.compile(rb'["\\]')


class ToolExcluded(MCPError, ValueError):
    """A listed tool agentd leaves out of the catalogue; the message is the reason."""


def schema_depth(schema: Any, limit: int) -> int:
    """The nesting depth of ``schema`` (objects and arrays), counted up to ``limit + 1``.

    Iterative, and it stops descending past the limit, so a schema of any depth
    costs at most its size and never the interpreter's stack.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _subschemas(schema: Any) -> Iterator[dict]:
    """Every object in ``schema`` that is a (sub)schema: data keywords skipped, and
    a name-to-schema map (``properties``, ``$defs``, ...) descended into without
    being taken for a schema itself (a property may be named ``$ref``)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            yield node
            for key, value in node.items():
                if key in _DATA_KEYS:
                    continue
                if key in _SCHEMA_MAPS and isinstance(value, dict):
                    stack.extend(value.values())
                else:
                    stack.append(value)


def _pointer(root: Any, fragment: str) -> bool:
    """Whether the JSON Pointer ``fragment`` (without ``#``) names a value in ``root``."""
    node = root
    for raw in fragment.split("/")[1:]:
        step = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            return False
    return isinstance(node, (dict, bool))


def _check_refs(schema: dict, where: str) -> None:
    """Every reference is a string, and every local one resolves in the document.

    Non-local references stay the validator's business (never fetched; that
    part of the check is skipped, agentd.mcp.schema); a local one that names
    nothing means the server's schema is broken where it points.
    """
    nodes = list(_subschemas(schema))
    anchors = {n[k] for n in nodes for k in _ANCHOR_KEYS if isinstance(n.get(k), str)}
    for node in nodes:
        for key in _REF_KEYS:
            if key not in node:
                continue
            ref = node[key]
            if not isinstance(ref, str):
                raise ToolExcluded(f"{where} has a {key} that is not a string")
            if not ref.startswith("#"):
                continue
            fragment = ref[1:]
            ok = (_pointer(schema, fragment) if fragment == "" or fragment.startswith("/")
                  else fragment in anchors)
            if not ok:
                raise ToolExcluded(f"{where} has {key} {ref[:200]!r}, which does not resolve")


def admit(tool: mt.Tool, *, headers: bool, tasks: bool, max_depth: int
          ) -> tuple[ParamHeader, ...]:
    """The tool's ``Mcp-Param-*`` declarations if agentd can offer it, else :class:`ToolExcluded`.

    ``headers``: the session mirrors ``x-mcp-header`` parameters (2026-07-28);
    ``tasks``: agentd declared tasks support to this server; ``max_depth``:
    the deepest schema nesting accepted (``ServerSpec.max_schema_depth``).
    """
    schemas = [("inputSchema", tool.inputSchema)]
    if isinstance(tool.outputSchema, dict):
        schemas.append(("outputSchema", tool.outputSchema))
    for where, schema in schemas:
        if schema_depth(schema, max_depth) > max_depth:
            raise ToolExcluded(f"{where} nests deeper than {max_depth} levels "
                               "(max_schema_depth)")
        _check_refs(schema, where)
    execution = tool.execution
    if (not tasks and isinstance(execution, mt.ToolExecution)
            and execution.taskSupport == "required"):
        raise ToolExcluded("requires task augmentation (execution.taskSupport: required); "
                           "agentd declares no tasks support")
    if not headers:
        return ()
    try:
        return tool_header_declarations(tool.inputSchema)
    except HeaderDeclarationError as exc:
        raise ToolExcluded(str(exc)) from None


def prune_deep(data: bytes | bytearray | str, limit: int = PRUNE_DEPTH) -> bytes | None:
    """``data`` with every JSON object or array nested deeper than ``limit`` replaced by
    ``null``; None when the bytes are not balanced JSON structure.

    A ``tools/list`` answer holding one schema nested beyond the decoder's guard
    (about a thousand levels) cannot be decoded at all, so without this one deep
    tool would take the whole listing -- and the server -- with it.  The client
    session cuts such an answer here and decodes it again; the cut schema is
    still deeper than any admission accepts, so exactly that tool is excluded
    (:func:`admit`).  A scan over the bytes, never recursive, linear in their
    length: the structure characters are found by regular expression, strings
    are skipped whole (escapes honoured).
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    out = bytearray()
    depth = 0
    cut = 0  # the depth of the value being cut (0: not cutting)
    pos = 0
    while True:
        m = _STRUCTURE.search(raw, pos)
        if m is None:
            break
        i = m.start()
        if not cut:
            out += raw[pos:i]
        ch = raw[i]
        if ch == 0x22:  # a string: find its unescaped end
            j = i + 1
            while True:
                e = _STRING_END.search(raw, j)
                if e is None:
                    return None
                if raw[e.start()] == 0x5C:  # backslash: skip the escaped byte
                    j = e.start() + 2
                    continue
                j = e.start() + 1
                break
            if not cut:
                out += raw[i:j]
            pos = j
            continue
        if ch in (0x7B, 0x5B):  # { [
            depth += 1
            if not cut and depth > limit:
                cut = depth
                out += b"null"
            elif not cut:
                out.append(ch)
        else:  # } ]
            if depth == 0:
                return None
            if not cut:
                out.append(ch)
            elif depth == cut:
                cut = 0
            depth -= 1
        pos = i + 1
    if depth or cut:
        return None
    out += raw[pos:]
    return bytes(out)
