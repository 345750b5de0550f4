"""The request-metadata headers of MCP 2026-07-28 (SEP-2243), sans-IO.

At 2026-07-28 every POST mirrors parts of its JSON-RPC body into HTTP headers
so that gateways can route without parsing bodies: ``Mcp-Method`` (always),
``Mcp-Name`` (``params.name`` / ``params.uri`` of ``tools/call``,
``resources/read``, ``prompts/get``) and one ``Mcp-Param-{Name}`` per tool
argument whose schema carries ``x-mcp-header``.  A server rejects a request
whose headers disagree with its body (-32020), so the client must compute them
exactly as the revision says; and it must *exclude* a tool whose header
declarations are invalid, rather than guess (one bad tool never takes the
others with it).

Pure functions: the client session and the client API call them; the
transport just sends the pairs it is handed.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any, Final

from agentd.wire.shapes import ParamHeader

__all__ = [
    "ParamHeader",
    "encode_value",
    "param_headers",
    "tool_header_declarations",
]

_TOKEN: Final = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 tchar
_SAFE: Final = re.compile(r"^[\x20-\x7e\t]*$")
_SENTINEL_HEAD: Final = "=?base64?"
_SENTINEL_TAIL: Final = "?="
_MAX_SAFE_INT: Final = 2 ** 53 - 1
_PRIMITIVES: Final = frozenset({"string", "integer", "boolean"})


def encode_value(value: str) -> str:
    """A header value as the revision encodes it: plain when safe, else the
    ``=?base64?...?=`` sentinel form (also for values that look like one)."""
    if (_SAFE.match(value) and value == value.strip(" \t")
            and not (value.startswith(_SENTINEL_HEAD) and value.endswith(_SENTINEL_TAIL))):
        return value
    return _SENTINEL_HEAD + base64.b64encode(value.encode("utf-8")).decode("ascii") + _SENTINEL_TAIL


def _header_type(typ: Any) -> str | None:
    """The primitive a declaring property has, or None if it may not be mirrored.

    ``"type": ["string", "null"]`` (a nullable string) counts as ``string``:
    the revision's own table says a null value sends no header, so a
    nullable primitive is exactly that primitive with "absent" allowed.  Any
    other list (two primitives, ``number``, duplicates) has no single header
    form and is refused.
    """
    if isinstance(typ, str):
        return typ if typ in _PRIMITIVES else None
    if not isinstance(typ, list) or not all(isinstance(t, str) for t in typ):
        return None
    rest = [t for t in typ if t != "null"]
    if len(rest) != 1 or len(typ) != len(set(typ)) or rest[0] not in _PRIMITIVES:
        return None
    return rest[0]


def _walk(schema: Any, path: tuple[str, ...], out: list[ParamHeader], seen: set[str],
          reachable: bool) -> str:
    """Collect ``x-mcp-header`` declarations; the first invalid one's reason, else "".

    ``reachable`` is whether this subschema sits on a pure ``properties`` chain
    from the root: a declaration anywhere else (under ``items``, ``oneOf``,
    ``$ref`` targets, ...) makes the whole tool invalid.
    """
    if isinstance(schema, list):
        for item in schema:
            if why := _walk(item, path, out, seen, False):
                return why
        return ""
    if not isinstance(schema, dict):
        return ""
    if "x-mcp-header" in schema:
        name = schema["x-mcp-header"]
        where = "/".join(path) or "(root)"
        if not reachable or not path:
            return f"x-mcp-header on {where} is not reachable through properties alone"
        if not isinstance(name, str) or not name or not _TOKEN.match(name):
            return f"x-mcp-header {name!r} on {where} is not an HTTP field-name token"
        typ = _header_type(schema.get("type"))
        if typ is None:
            return (f"x-mcp-header {name!r} on {where} has type "
                    f"{str(schema.get('type'))[:100]}; only string, integer and boolean "
                    "(or one of them with null) may be mirrored")
        key = name.lower()
        if key in seen:
            return f"x-mcp-header {name!r} is declared twice"
        seen.add(key)
        out.append(ParamHeader("Mcp-Param-" + name, path))
    for key, sub in schema.items():
        if key == "properties" and isinstance(sub, dict):
            for prop, subschema in sub.items():
                if why := _walk(subschema, (*path, prop), out, seen, reachable):
                    return why
        elif isinstance(sub, (dict, list)) and key not in ("const", "enum", "default",
                                                           "examples"):
            if why := _walk(sub, path, out, seen, False):
                return why
    return ""


def tool_header_declarations(input_schema: Mapping[str, Any]) -> tuple[ParamHeader, ...] | str:
    """The tool's ``Mcp-Param-*`` headers, or why its declarations break the
    revision's constraints (a str: the tool is left out, an expected outcome)."""
    out: list[ParamHeader] = []
    why = _walk(input_schema, (), out, set(), True)
    return why or tuple(out)


def param_headers(decls: tuple[ParamHeader, ...], arguments: Mapping[str, Any]
                  ) -> list[tuple[str, str]]:
    """The ``Mcp-Param-*`` pairs for one call's arguments (absent/null: omitted).

    A value of the wrong type for a header (an object, a float, an integer
    outside the safe range) is omitted too: the server's schema validation
    answers that call, not a header the client would have to invent.
    """
    pairs: list[tuple[str, str]] = []
    for header, path in decls:
        v: Any = arguments
        for step in path:
            if not isinstance(v, Mapping) or step not in v:
                v = None
                break
            v = v[step]
        if v is None:
            continue
        if isinstance(v, bool):
            text = "true" if v else "false"
        elif isinstance(v, int):
            if abs(v) > _MAX_SAFE_INT:
                continue
            text = str(v)
        elif isinstance(v, str):
            text = v
        else:
            continue
        pairs.append((header, encode_value(text)))
    return pairs
