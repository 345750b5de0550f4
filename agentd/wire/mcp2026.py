"""MCP 2026-07-28 ("modern", stateless) message payloads and constants as msgspec Structs.

The 2025-11-25 shapes live in :mod:`agentd.wire.mcp_types`; this module holds
only what the 2026-07-28 revision adds or changes, so both revisions can be
spoken side by side (the server answers either era on one endpoint, the
client picks per server).  What changed at this revision, as far as these
types are concerned:

* no ``initialize``: every request carries ``_meta``
  ``io.modelcontextprotocol/protocolVersion`` and ``.../clientCapabilities``
  (and, SHOULD, ``.../clientInfo``); results carry ``resultType`` and, SHOULD,
  ``_meta`` ``io.modelcontextprotocol/serverInfo``;
* ``server/discover`` (MUST) advertises the supported versions, capabilities;
* ``subscriptions/listen`` replaces the GET stream and ``resources/subscribe``:
  a client opts in per notification type (:class:`SubscriptionFilter`), the
  server acknowledges first (``notifications/subscriptions/acknowledged``) and
  tags every frame with ``io.modelcontextprotocol/subscriptionId``;
* list and read results are cacheable (``ttlMs``, ``cacheScope``);
* ``ping``, ``logging/setLevel``, ``resources/subscribe``/``unsubscribe`` are
  gone; resource-not-found is -32602 with ``data.uri``;
* the spec-reserved error codes -32020 (header mismatch), -32021 (missing
  client capability), -32022 (unsupported version), each answered ``400`` over
  HTTP, and ``404`` for a method the server does not implement.

Conventions are those of :mod:`agentd.wire.mcp_types` (wire names verbatim,
``UNSET`` omitted, unknown fields ignored); the reserved ``_meta`` keys are not
Python identifiers, so they are mapped with ``msgspec.field(name=...)``.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import UNSET, Struct, UnsetType

from agentd.errors import RPCError
from agentd.wire import mcp_types as t

__all__ = [
    "CACHE_PRIVATE",
    "CACHE_PUBLIC",
    "CLIENT_CAPABILITIES_META",
    "CLIENT_INFO_META",
    "ERROR_HTTP_STATUS",
    "HEADER_MISMATCH",
    "LATEST_MODERN_VERSION",
    "LEGACY_PROTOCOL_VERSIONS",
    "LOG_LEVEL_META",
    "MCP_METHOD_HEADER",
    "MCP_NAME_HEADER",
    "MCP_PARAM_HEADER_PREFIX",
    "MCP_PROTOCOL_VERSION_HEADER",
    "MISSING_CLIENT_CAPABILITY",
    "MODERN_PROTOCOL_VERSIONS",
    "NAME_BEARING_METHODS",
    "NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED",
    "PROTOCOL_VERSION_META",
    "REMOVED_METHODS",
    "RESULT_COMPLETE",
    "RESULT_INPUT_REQUIRED",
    "SERVER_DISCOVER",
    "SERVER_INFO_META",
    "SUBSCRIPTIONS_LISTEN",
    "SUBSCRIPTION_ID_META",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "AcknowledgedParams",
    "DiscoverResult",
    "ListenParams",
    "ListenResult",
    "RequestMeta",
    "ResourceUpdatedParams",
    "SubscriptionFilter",
    "UnsupportedVersionData",
    "is_modern_version",
    "missing_client_capability",
]

LATEST_MODERN_VERSION: Final = "2026-07-28"
MODERN_PROTOCOL_VERSIONS: Final = ("2026-07-28",)
LEGACY_PROTOCOL_VERSIONS: Final = t.SUPPORTED_PROTOCOL_VERSIONS  # initialize-era, newest first

# -- methods ----------------------------------------------------------------
SERVER_DISCOVER: Final = "server/discover"
SUBSCRIPTIONS_LISTEN: Final = "subscriptions/listen"
NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"
REMOVED_METHODS: Final = frozenset({
    t.INITIALIZE, t.PING, t.LOGGING_SET_LEVEL, t.RESOURCES_SUBSCRIBE, t.RESOURCES_UNSUBSCRIBE,
})
"""Methods that do not exist at 2026-07-28 (a request for one is -32601 / 404)."""

# -- reserved _meta keys ----------------------------------------------------
PROTOCOL_VERSION_META: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META: Final = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_META: Final = "io.modelcontextprotocol/logLevel"
SERVER_INFO_META: Final = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID_META: Final = "io.modelcontextprotocol/subscriptionId"

# -- HTTP request metadata headers (lower case: aiohttp lookups are case-insensitive)
MCP_PROTOCOL_VERSION_HEADER: Final = "mcp-protocol-version"
MCP_METHOD_HEADER: Final = "mcp-method"
MCP_NAME_HEADER: Final = "mcp-name"
MCP_PARAM_HEADER_PREFIX: Final = "Mcp-Param-"
NAME_BEARING_METHODS: Final = {t.TOOLS_CALL: "name", t.PROMPTS_GET: "name",
                               t.RESOURCES_READ: "uri"}
"""Method -> the params field mirrored into ``Mcp-Name``."""

# -- error codes (the MCP-reserved sub-range -32020..-32099) -----------------
HEADER_MISMATCH: Final = -32020
MISSING_CLIENT_CAPABILITY: Final = -32021
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
ERROR_HTTP_STATUS: Final = {
    -32700: 400,  # parse error
    -32600: 400,  # invalid request
    -32602: 400,  # invalid params (resource not found included)
    HEADER_MISMATCH: 400,
    MISSING_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    -32601: 404,  # a method this server does not implement
}
"""HTTP status of a JSON-RPC error at 2026-07-28 (unlisted codes: 200)."""


def missing_client_capability(required: dict[str, Any]) -> RPCError:
    """-32021: the request needs a client capability its envelope did not declare."""
    return RPCError(MISSING_CLIENT_CAPABILITY, "Missing required client capability: "
                    + ", ".join(sorted(required)), {"requiredCapabilities": required},
                    side="local")

# -- result fields ------------------------------------------------------------
RESULT_COMPLETE: Final = "complete"
RESULT_INPUT_REQUIRED: Final = "input_required"
CACHE_PUBLIC: Final = "public"
CACHE_PRIVATE: Final = "private"


def is_modern_version(version: Any) -> bool:
    return version in MODERN_PROTOCOL_VERSIONS


class _Wire(Struct, omit_defaults=True, repr_omit_defaults=True, gc=False):
    """Base of every payload: UNSET fields are omitted, unknown fields ignored."""


class RequestMeta(_Wire):
    """The per-request envelope in ``params._meta`` (the keys a server reads).

    Values are kept raw (``Any``) so the *shape* checks (a version that is not a
    string, capabilities that are not an object) are the session layer's to
    answer with the right code, not a decode failure."""

    protocolVersion: Any = msgspec.field(default=UNSET, name=PROTOCOL_VERSION_META)
    clientCapabilities: Any = msgspec.field(default=UNSET, name=CLIENT_CAPABILITIES_META)
    clientInfo: Any = msgspec.field(default=UNSET, name=CLIENT_INFO_META)
    traceparent: str | UnsetType = UNSET
    tracestate: str | UnsetType = UNSET


class SubscriptionFilter(_Wire):
    """What a ``subscriptions/listen`` opts in to (and what the ack says is honoured)."""

    toolsListChanged: bool | UnsetType = UNSET
    promptsListChanged: bool | UnsetType = UNSET
    resourcesListChanged: bool | UnsetType = UNSET
    resourceSubscriptions: list[str] | UnsetType = UNSET


class ListenParams(_Wire):
    notifications: SubscriptionFilter
    _meta: t.Meta | UnsetType = UNSET


class AcknowledgedParams(_Wire):
    """``notifications/subscriptions/acknowledged``: the honoured subset, tagged."""

    notifications: SubscriptionFilter
    _meta: t.Meta | UnsetType = UNSET


class ResourceUpdatedParams(_Wire):
    """``notifications/resources/updated`` on a listen stream: the URI, tagged."""

    uri: str
    _meta: t.Meta | UnsetType = UNSET


class ListenResult(_Wire):
    """The response that closes a listen stream gracefully (server shutdown, nothing left)."""

    _meta: t.Meta
    resultType: str  # required on the wire: no default, so omit_defaults never drops it


class DiscoverResult(_Wire):
    supportedVersions: list[str]
    capabilities: t.ServerCapabilities
    ttlMs: int
    cacheScope: str
    resultType: str  # required on the wire: no default, so omit_defaults never drops it
    instructions: str | UnsetType = UNSET
    _meta: t.Meta | UnsetType = UNSET


class UnsupportedVersionData(_Wire):
    """``data`` of the -32022 error: what we speak, and what was asked."""

    supported: list[str]
    requested: Any = None
