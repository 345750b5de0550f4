"""JSON Schema validation of tool arguments and structured output (jsonschema-rs).

Validators are compiled once per distinct schema and cached (keyed by the
schema's canonical JSON), so a call never compiles a validator and a listing of
10,000 tools that share a schema compiles it once.  Compilation is lazy: a tool
nobody calls costs nothing.  A schema jsonschema-rs cannot compile (a server's
mistake) disables validation for that tool with one warning instead of making
the tool uncallable.  jsonschema-rs itself is imported by the first
compilation: a subagent that calls no MCP tool (a forkserver's `lean`
template) never maps it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

import orjson

from agentd.log import log

__all__ = ["SchemaCache", "Validator", "describe_errors", "schemas"]

_MAX_ERRORS: Final = 3
_MAX_ERROR_CHARS: Final = 300


class Validator:
    """A compiled schema; ``errors(instance)`` is empty when it is valid."""

    __slots__ = ("_v",)

    def __init__(self, compiled: Any) -> None:
        self._v = compiled

    def is_valid(self, instance: Any) -> bool:
        return self._v.is_valid(instance)

    def errors(self, instance: Any) -> list[str]:
        if self._v.is_valid(instance):
            return []
        return describe_errors(self._v.iter_errors(instance))


def describe_errors(errors: Any) -> list[str]:
    out: list[str] = []
    for err in errors:
        path = "/".join(str(p) for p in err.instance_path)
        msg = f"at /{path}: {err.message}" if path else err.message
        out.append(msg[:_MAX_ERROR_CHARS])
        if len(out) >= _MAX_ERRORS:
            break
    return out


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

        try:
            v: Validator | None = Validator(jsonschema_rs.validator_for(schema))
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
