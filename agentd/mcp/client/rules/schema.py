"""JSON Schema validation of tool arguments and structured output (jsonschema-rs).

Validators are compiled once per distinct schema and cached (keyed by the
schema's canonical JSON), so a call never compiles a validator and a listing of
10,000 tools that share a schema compiles it once.  Compilation is lazy: a tool
nobody calls costs nothing.  A schema jsonschema-rs cannot compile (a server's
mistake) disables validation for that tool with one warning instead of making
the tool uncallable.  jsonschema-rs itself is imported by the first
compilation: a subagent that calls no MCP tool (a forkserver's `lean`
template) never maps it.

A schema never opens a connection.  A server controls its tools' schemas, and
a `"$ref": "http://<anywhere>/x.json"` would make a validator with a default
retriever fetch that URL from inside the operator's network.  So only local
references (`#…`, e.g. `#/$defs/x`) are kept; every other `$ref`,
`$dynamicRef` or `$recursiveRef` is taken out before compiling (that part of
the check is skipped, the call goes on) and `mcp.tools.audit` logs it once per
schema; the retriever handed to jsonschema-rs refuses every URI as a second
line of defence.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

import orjson

from agentd.log import log
from agentd.wire.guard import PEER_FAULTS, fault_text
from agentd.wire.shapes import ToolInfo

__all__ = ["SchemaCache", "Validator", "describe_errors", "input_validator",
           "output_validator", "schemas"]

_MAX_ERRORS: Final = 3
_MAX_ERROR_CHARS: Final = 300


class Validator:
    """A compiled schema; ``errors(instance)`` is empty when it is valid."""

    __slots__ = ("_v",)

    def __init__(self, compiled: Any) -> None:
        self._v = compiled

    def is_valid(self, instance: Any) -> bool:
        try:
            return self._v.is_valid(instance)
        except PEER_FAULTS:  # e.g. nested beyond jsonschema-rs's limit: errors() says so
            return False

    def errors(self, instance: Any) -> list[str]:
        try:
            if self._v.is_valid(instance):
                return []
            return describe_errors(self._v.iter_errors(instance))
        except PEER_FAULTS as exc:  # the instance, not the schema: refused, never raised
            return [f"the value is {fault_text(exc)}"]


def describe_errors(errors: Any) -> list[str]:
    out: list[str] = []
    for err in errors:
        path = "/".join(str(p) for p in err.instance_path)
        msg = f"at /{path}: {err.message}" if path else err.message
        out.append(msg[:_MAX_ERROR_CHARS])
        if len(out) >= _MAX_ERRORS:
            break
    return out


_REF_KEYS: Final = ("$ref", "$dynamicRef", "$recursiveRef")
_DATA_KEYS: Final = frozenset({"const", "enum", "default", "examples"})  # values, not schemas


def _refuse_retrieval(uri: str) -> Any:
    raise ValueError(f"agentd never fetches schema references ({uri[:200]})")


def local_refs_only(schema: Any) -> tuple[Any, list[str]]:
    """``schema`` without its non-local references, and the references dropped."""
    dropped: list[str] = []

    def walk(node: Any, depth: int) -> Any:
        if depth > 256:  # a pathological nesting: nothing below is compiled either
            return {}
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key in _REF_KEYS and isinstance(value, str) and not value.startswith("#"):
                    dropped.append(value[:300])
                    continue
                out[key] = value if key in _DATA_KEYS else walk(value, depth + 1)
            return out
        if isinstance(node, list):
            return [walk(v, depth + 1) for v in node]
        return node

    return walk(schema, 0), dropped


class SchemaCache:
    """Compiled validators by canonical schema JSON (bounded LRU)."""

    def __init__(self, maxsize: int = 4096) -> None:
        self._maxsize = maxsize
        self._cache: OrderedDict[bytes, Validator | None] = OrderedDict()

    def get(self, schema: dict[str, Any] | None, *, what: str = "") -> Validator | None:
        """The validator for ``schema`` (None: no schema, or not compilable)."""
        if not schema:
            return None
        try:
            key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            return None
        cache = self._cache
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        import jsonschema_rs

        local, dropped = local_refs_only(schema)
        if dropped:
            log.warning("mcp.tools.audit", what=what, unresolved_refs=dropped[:16],
                        detail="non-local $ref never fetched; that part of the check "
                               "is skipped")
        try:
            v: Validator | None = Validator(jsonschema_rs.validator_for(
                local, retriever=_refuse_retrieval))
        except Exception as exc:  # a server's broken schema: validate nothing, say so once
            log.warning("mcp.schema.invalid", what=what, error=str(exc)[:_MAX_ERROR_CHARS])
            v = None
        cache[key] = v
        if len(cache) > self._maxsize:
            cache.popitem(last=False)
        return v

    def __len__(self) -> int:
        return len(self._cache)


schemas = SchemaCache()
"""The process-wide cache every client shares."""


def input_validator(tool: ToolInfo) -> Validator | None:
    """The validator of ``tool``'s ``inputSchema``, looked up once per listed
    tool and kept on it (a call never serialises the schema again)."""
    v = tool.input_check
    if v is False:
        v = tool.input_check = schemas.get(tool.input_schema,
                                           what=f"inputSchema of {tool.name}")
    return v


def output_validator(tool: ToolInfo) -> Validator | None:
    """The validator of ``tool``'s ``outputSchema`` (None without one), kept on it."""
    v = tool.output_check
    if v is False:
        v = tool.output_check = schemas.get(tool.output_schema,
                                            what=f"outputSchema of {tool.name}")
    return v
