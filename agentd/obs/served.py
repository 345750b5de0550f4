"""The server span of one inbound MCP request (`mcp.server {method}`).

An inbound request continues its caller's trace: the parent is the request's
`_meta.traceparent` (SEP-414) or, failing that, its W3C `traceparent` header;
without either it starts a new trace. The MCP server engine
(`agentd.mcp.server.http.server`) makes the span from the message it decoded itself:
its `params` are still undecoded JSON (`msgspec.Raw`), of which only `_meta`
and `name` are read here; the body is never read or parsed again.

Why the care: the span is paid for on the request path of every served call
while tracing is on, so what it does per request is a few dict lookups, one
small decode and the span itself. The method and tool names are a peer's
text: a span keeps them only when they are plain names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MethodType
from typing import Any

import msgspec

from agentd.obs import trace
from agentd.wire.guard import PEER_FAULTS

__all__ = ["SpansOwnRequests", "span", "spans_own"]


class SpansOwnRequests:
    """The owner of request handlers that make their own server span here, from the
    message they decode (the MCP server engine): `agentd.obs.http` leaves its
    POST routes be rather than reading the body a second time for the span."""


def spans_own(handler: object) -> bool:
    """Whether `handler` is a method of a `SpansOwnRequests`."""
    return isinstance(handler, MethodType) and isinstance(handler.__self__, SpansOwnRequests)


class _Meta(msgspec.Struct, gc=False):
    traceparent: Any = None
    tracestate: Any = None


class _Params(msgspec.Struct, gc=False):
    _meta: _Meta | None = None
    name: Any = None


_decode_params = msgspec.json.Decoder(_Params).decode
_NAME = re.compile(r"[A-Za-z0-9_./-]{1,64}")
_CACHE_MAX = 1024
_PLAIN: dict[str, bool] = {}  # a peer's method or tool name -> it is a plain name
_SPAN_NAMES: dict[str, str] = {}  # a plain method name -> its span's name


def span(method: Any, params: Any, headers: Mapping[str, str]) -> Any:
    """The `with` span of a request for `method` whose undecoded `params` are
    `params` (`msgspec.Raw` or bytes; anything else counts as none), received
    with HTTP `headers`. Tracing off: the shared no-op span."""
    if not trace.enabled:
        return trace.NOSPAN
    name = _SPAN_NAMES.get(method) if type(method) is str else None
    if name is None:
        method, name = _method(method)
    attrs: dict[str, Any] = {"mcp.method.name": method}
    tp = ts = None
    if type(params) is msgspec.Raw or type(params) is bytes:
        try:
            p = _decode_params(params)
        except PEER_FAULTS:  # not an object, a `_meta` that is not one, nested too deeply
            p = None
        if p is not None:
            tool = p.name
            if type(tool) is str and method == "tools/call":
                attrs["gen_ai.tool.name"] = tool if _PLAIN.get(tool) else _plain(tool)
            meta = p._meta
            if meta is not None and type(meta.traceparent) is str:  # `_meta` first (SEP-414)
                tp, ts = meta.traceparent, meta.tracestate
    if tp is None:  # then the W3C headers
        tp = headers.get("traceparent")
        if tp is not None:
            ts = headers.get("tracestate")
    return trace.server_span(name, tp, ts if type(ts) is str else None, attrs)


def _method(method: Any) -> tuple[str, str]:
    """(the method to record, its span's name): "unknown" unless a plain name."""
    plain = _plain(method)
    if plain is None:
        return "unknown", "mcp.server unknown"
    name = f"mcp.server {plain}"
    if len(_SPAN_NAMES) < _CACHE_MAX:
        _SPAN_NAMES[plain] = name
    return plain, name


def _plain(name: Any) -> str | None:
    """`name` if it is a plain method or tool name, else None; the answer is
    remembered for the names seen (a bounded number)."""
    if type(name) is not str:
        return None
    ok = _PLAIN.get(name)
    if ok is None:
        ok = _NAME.fullmatch(name) is not None
        if len(_PLAIN) < _CACHE_MAX:
            _PLAIN[name] = ok
    return name if ok else None
