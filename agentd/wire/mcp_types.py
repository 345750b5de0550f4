"""MCP 2025-11-25 message payloads as msgspec Structs.

Only the part of the schema agentd speaks is modelled (lifecycle, tools,
resources, the notifications both halves send, ping and ``roots/list``).

Conventions (see ``docs/messages.md``):

* **Attribute names are the wire names, verbatim** -- camelCase (``inputSchema``,
  ``isError``, ``nextCursor``) and ``_meta``.  There is no rename layer, so what
  the spec says is exactly what you type, and nothing can drift between the two.
* Optional fields default to ``msgspec.UNSET`` and are omitted from the wire
  when unset (``omit_defaults=True``); ``UNSET`` is falsy.  ``isError`` is the one
  boolean defaulting to ``False`` (the schema's default), also omitted.
* Unknown extra fields are ignored at every level (forward compatibility);
  missing required fields are errors.
* Content blocks are a tagged union on ``type``.  A block of a type this
  revision does not know decodes (via the codec's lenient path) to
  :class:`UnknownContent`, a ``dict`` that re-encodes unchanged, instead of
  making the whole result undecodable.
* ``TextResourceContents`` / ``BlobResourceContents`` carry no tag on the wire;
  fields typed :class:`ResourceContents` are resolved by :func:`dec_hook`
  (``blob`` present -> Blob, else ``text`` present -> Text).  Any decoder of
  these types must pass ``dec_hook=dec_hook`` -- use ``codec.decoder_for``.

Instances are created with ``gc=False`` (decoded wire data has no reference
cycles); do not build cyclic structures out of them.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import msgspec
from msgspec import UNSET, Struct, UnsetType

__all__ = [
    "COMPLETION_COMPLETE",
    "CONTENT_TYPES",
    "ELICITATION_CREATE",
    "INITIALIZE",
    "LATEST_PROTOCOL_VERSION",
    "LOGGING_SET_LEVEL",
    "NOTIFICATION_CANCELLED",
    "NOTIFICATION_INITIALIZED",
    "NOTIFICATION_MESSAGE",
    "NOTIFICATION_PROGRESS",
    "NOTIFICATION_PROMPTS_LIST_CHANGED",
    "NOTIFICATION_RESOURCES_LIST_CHANGED",
    "NOTIFICATION_RESOURCES_UPDATED",
    "NOTIFICATION_ROOTS_LIST_CHANGED",
    "NOTIFICATION_TOOLS_LIST_CHANGED",
    "PING",
    "PROMPTS_GET",
    "PROMPTS_LIST",
    "RESOURCES_LIST",
    "RESOURCES_READ",
    "RESOURCES_SUBSCRIBE",
    "RESOURCES_TEMPLATES_LIST",
    "RESOURCES_UNSUBSCRIBE",
    "ROOTS_LIST",
    "SAMPLING_CREATE_MESSAGE",
    "SERVER_DISCOVER",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "TOOLS_CALL",
    "TOOLS_LIST",
    "Annotations",
    "AnyContent",
    "AudioContent",
    "BlobResourceContents",
    "CallToolParams",
    "CallToolResult",
    "CancelledParams",
    "ClientCapabilities",
    "ContentBlock",
    "EmbeddedResource",
    "EmptyResult",
    "Icon",
    "ImageContent",
    "Implementation",
    "InitializeParams",
    "InitializeResult",
    "InitializedNotification",
    "ListResourceTemplatesResult",
    "ListResourcesResult",
    "ListRootsResult",
    "ListToolsResult",
    "LoggingMessageParams",
    "NotificationParams",
    "PaginatedParams",
    "Params",
    "ProgressParams",
    "PromptsCapability",
    "ReadResourceParams",
    "ReadResourceResult",
    "RequestParams",
    "Resource",
    "ResourceContents",
    "ResourceLink",
    "ResourceTemplate",
    "ResourceUpdatedParams",
    "ResourcesCapability",
    "Root",
    "RootsCapability",
    "ServerCapabilities",
    "SubscribeParams",
    "TextContent",
    "TextResourceContents",
    "Tool",
    "ToolAnnotations",
    "ToolExecution",
    "ToolsCapability",
    "UnknownContent",
    "UnsubscribeParams",
    "dec_hook",
]

# --------------------------------------------------------------------------
# Protocol versions and method names
# --------------------------------------------------------------------------

LATEST_PROTOCOL_VERSION: Final = "2025-11-25"
SUPPORTED_PROTOCOL_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

# requests (either direction)
INITIALIZE: Final = "initialize"
PING: Final = "ping"
TOOLS_LIST: Final = "tools/list"
TOOLS_CALL: Final = "tools/call"
RESOURCES_LIST: Final = "resources/list"
RESOURCES_TEMPLATES_LIST: Final = "resources/templates/list"
RESOURCES_READ: Final = "resources/read"
RESOURCES_SUBSCRIBE: Final = "resources/subscribe"
RESOURCES_UNSUBSCRIBE: Final = "resources/unsubscribe"
ROOTS_LIST: Final = "roots/list"
# methods agentd knows the name of but does not serve (answered -32601)
PROMPTS_LIST: Final = "prompts/list"
PROMPTS_GET: Final = "prompts/get"
LOGGING_SET_LEVEL: Final = "logging/setLevel"
COMPLETION_COMPLETE: Final = "completion/complete"
SAMPLING_CREATE_MESSAGE: Final = "sampling/createMessage"
ELICITATION_CREATE: Final = "elicitation/create"
SERVER_DISCOVER: Final = "server/discover"  # 2026-07-28; probed by newer clients

# notifications
NOTIFICATION_INITIALIZED: Final = "notifications/initialized"
NOTIFICATION_CANCELLED: Final = "notifications/cancelled"
NOTIFICATION_PROGRESS: Final = "notifications/progress"
NOTIFICATION_MESSAGE: Final = "notifications/message"
NOTIFICATION_RESOURCES_UPDATED: Final = "notifications/resources/updated"
NOTIFICATION_RESOURCES_LIST_CHANGED: Final = "notifications/resources/list_changed"
NOTIFICATION_TOOLS_LIST_CHANGED: Final = "notifications/tools/list_changed"
NOTIFICATION_PROMPTS_LIST_CHANGED: Final = "notifications/prompts/list_changed"
NOTIFICATION_ROOTS_LIST_CHANGED: Final = "notifications/roots/list_changed"

Meta = dict[str, Any]


class _Wire(Struct, omit_defaults=True, repr_omit_defaults=True, gc=False):
    """Base of every MCP payload Struct."""


# --------------------------------------------------------------------------
# Shared pieces
# --------------------------------------------------------------------------


class Icon(_Wire):
    src: str
    mimeType: str | UnsetType = UNSET
    sizes: list[str] | UnsetType = UNSET
    theme: str | UnsetType = UNSET  # "light" | "dark"


class Annotations(_Wire):
    audience: list[str] | UnsetType = UNSET  # "user" | "assistant"
    priority: float | UnsetType = UNSET
    lastModified: str | UnsetType = UNSET


class Implementation(_Wire):
    name: str
    version: str
    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    websiteUrl: str | UnsetType = UNSET
    icons: list[Icon] | UnsetType = UNSET


class Params(Protocol):
    """What every params Struct of this module has: a ``_meta`` (UNSET unless
    the caller set one), so a session can tell whether to merge its own
    ``_meta`` in without probing the object."""

    _meta: Meta | UnsetType


class RequestParams(_Wire):
    """Params of a request that carries nothing but ``_meta`` (ping, roots/list)."""

    _meta: Meta | UnsetType = UNSET


class NotificationParams(_Wire):
    """Params of a notification that carries nothing but ``_meta``
    (initialized, */list_changed)."""

    _meta: Meta | UnsetType = UNSET


InitializedNotification = NotificationParams
"""``notifications/initialized`` has no params beyond ``_meta``."""


class EmptyResult(_Wire):
    """``{}`` -- the result of ping, resources/subscribe, resources/unsubscribe."""

    _meta: Meta | UnsetType = UNSET


class PaginatedParams(_Wire):
    cursor: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


# --------------------------------------------------------------------------
# Capabilities and lifecycle
# --------------------------------------------------------------------------


class RootsCapability(_Wire):
    listChanged: bool | UnsetType = UNSET


class ClientCapabilities(_Wire):
    """agentd sends ``ClientCapabilities()`` == ``{}``: it services none."""

    experimental: dict[str, dict[str, Any]] | UnsetType = UNSET
    roots: RootsCapability | UnsetType = UNSET
    sampling: dict[str, Any] | UnsetType = UNSET
    elicitation: dict[str, Any] | UnsetType = UNSET
    tasks: dict[str, Any] | UnsetType = UNSET


class ToolsCapability(_Wire):
    listChanged: bool | UnsetType = UNSET


class ResourcesCapability(_Wire):
    subscribe: bool | UnsetType = UNSET
    listChanged: bool | UnsetType = UNSET


class PromptsCapability(_Wire):
    listChanged: bool | UnsetType = UNSET


class ServerCapabilities(_Wire):
    """Absent capability == ``UNSET`` (falsy). ``ToolsCapability()`` encodes ``{}``."""

    tools: ToolsCapability | UnsetType = UNSET
    resources: ResourcesCapability | UnsetType = UNSET
    prompts: PromptsCapability | UnsetType = UNSET
    logging: dict[str, Any] | UnsetType = UNSET
    completions: dict[str, Any] | UnsetType = UNSET
    experimental: dict[str, dict[str, Any]] | UnsetType = UNSET
    tasks: dict[str, Any] | UnsetType = UNSET


class InitializeParams(_Wire):
    protocolVersion: str
    capabilities: ClientCapabilities
    clientInfo: Implementation
    _meta: Meta | UnsetType = UNSET


class InitializeResult(_Wire):
    protocolVersion: str
    capabilities: ServerCapabilities
    serverInfo: Implementation
    instructions: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


# --------------------------------------------------------------------------
# Resources (defined before content blocks: EmbeddedResource embeds them)
# --------------------------------------------------------------------------


class ResourceContents:
    """Marker base of :class:`TextResourceContents` and :class:`BlobResourceContents`.

    The two are told apart by key (``blob`` vs ``text``), not by a tag, which a
    msgspec union cannot express; fields annotated with this class are decoded
    by :func:`dec_hook`.
    """

    __slots__ = ()


class TextResourceContents(_Wire, ResourceContents):
    uri: str
    text: str
    mimeType: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class BlobResourceContents(_Wire, ResourceContents):
    uri: str
    blob: str  # base64
    mimeType: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class Resource(_Wire):
    uri: str
    name: str
    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    mimeType: str | UnsetType = UNSET
    size: int | UnsetType = UNSET
    icons: list[Icon] | UnsetType = UNSET
    annotations: Annotations | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class ListResourcesResult(_Wire):
    resources: list[Resource]
    nextCursor: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class ResourceTemplate(_Wire):
    uriTemplate: str
    name: str
    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    mimeType: str | UnsetType = UNSET
    icons: list[Icon] | UnsetType = UNSET
    annotations: Annotations | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class ListResourceTemplatesResult(_Wire):
    resourceTemplates: list[ResourceTemplate]
    nextCursor: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class ReadResourceParams(_Wire):
    uri: str
    _meta: Meta | UnsetType = UNSET


class ReadResourceResult(_Wire):
    # each item is a TextResourceContents or a BlobResourceContents
    contents: list[ResourceContents]
    _meta: Meta | UnsetType = UNSET


class SubscribeParams(_Wire):
    uri: str
    _meta: Meta | UnsetType = UNSET


class UnsubscribeParams(_Wire):
    uri: str
    _meta: Meta | UnsetType = UNSET


# --------------------------------------------------------------------------
# Content blocks: a tagged union on "type"
# --------------------------------------------------------------------------


class AnyContent:
    """Marker base of every content block, :class:`UnknownContent` included
    (``isinstance(block, AnyContent)``)."""

    __slots__ = ()


class _Content(_Wire, AnyContent, tag_field="type"):
    pass


class TextContent(_Content, tag="text"):
    text: str
    annotations: Annotations | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class ImageContent(_Content, tag="image"):
    data: str  # base64
    mimeType: str
    annotations: Annotations | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class AudioContent(_Content, tag="audio"):
    data: str  # base64
    mimeType: str
    annotations: Annotations | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class ResourceLink(_Content, tag="resource_link"):
    uri: str
    name: str
    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    mimeType: str | UnsetType = UNSET
    size: int | UnsetType = UNSET
    icons: list[Icon] | UnsetType = UNSET
    annotations: Annotations | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class EmbeddedResource(_Content, tag="resource"):
    resource: ResourceContents  # TextResourceContents | BlobResourceContents
    annotations: Annotations | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


ContentBlock = TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource
"""The content blocks of 2025-11-25.  Lists of them may also hold
:class:`UnknownContent` when a peer sends a newer block type."""

CONTENT_TYPES: Final[dict[str, type]] = {
    "text": TextContent,
    "image": ImageContent,
    "audio": AudioContent,
    "resource_link": ResourceLink,
    "resource": EmbeddedResource,
}


class UnknownContent(dict, AnyContent):
    """A content block whose ``type`` this revision does not know.

    It is the block's JSON object, kept verbatim: it re-encodes unchanged and
    callers can render it generically (``block.type``, ``block["..."]``).
    """

    __slots__ = ()

    @property
    def type(self) -> str:
        t = self.get("type")
        return t if isinstance(t, str) else ""

    def __repr__(self) -> str:
        return f"UnknownContent({dict.__repr__(self)})"


# --------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------


class ToolAnnotations(_Wire):
    """Hints only -- server-controlled, untrusted."""

    title: str | UnsetType = UNSET
    readOnlyHint: bool | UnsetType = UNSET
    destructiveHint: bool | UnsetType = UNSET
    idempotentHint: bool | UnsetType = UNSET
    openWorldHint: bool | UnsetType = UNSET


class ToolExecution(_Wire):
    taskSupport: str | UnsetType = UNSET  # "forbidden" | "optional" | "required"


class Tool(_Wire):
    name: str
    inputSchema: dict[str, Any]
    description: str | UnsetType = UNSET
    title: str | UnsetType = UNSET
    outputSchema: dict[str, Any] | UnsetType = UNSET
    annotations: ToolAnnotations | UnsetType = UNSET
    execution: ToolExecution | UnsetType = UNSET
    icons: list[Icon] | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class ListToolsResult(_Wire):
    tools: list[Tool]
    nextCursor: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class CallToolParams(_Wire):
    """``tools/call`` params.

    ``arguments`` may be given as a ``msgspec.Raw`` holding an already
    serialised JSON object (e.g. the model's tool-call arguments string, after
    validation) -- the encoder splices it in without re-serialising.
    """

    name: str
    arguments: dict[str, Any] | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class CallToolResult(_Wire):
    content: list[ContentBlock]
    isError: bool = False
    structuredContent: Any = UNSET
    _meta: Meta | UnsetType = UNSET


# --------------------------------------------------------------------------
# Notifications' params and roots
# --------------------------------------------------------------------------


class CancelledParams(_Wire):
    # Optional since 2025-11-25 (absent when cancelling a task); agentd always sends it.
    requestId: int | str | UnsetType = UNSET
    reason: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class ResourceUpdatedParams(_Wire):
    uri: str
    title: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class ProgressParams(_Wire):
    progressToken: int | str
    progress: float
    total: float | UnsetType = UNSET
    message: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class LoggingMessageParams(_Wire):
    level: str  # debug | info | notice | warning | error | critical | alert | emergency
    data: Any
    logger: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class Root(_Wire):
    uri: str
    name: str | UnsetType = UNSET
    _meta: Meta | UnsetType = UNSET


class ListRootsResult(_Wire, omit_defaults=False):
    """agentd answers a server's ``roots/list`` with ``ListRootsResult()`` == ``{"roots":[]}``.

    ``roots`` is required on the wire even when empty, so this Struct opts out
    of ``omit_defaults`` (``_meta`` is still omitted while UNSET).
    """

    roots: list[Root] = msgspec.field(default_factory=list)
    _meta: Meta | UnsetType = UNSET


# --------------------------------------------------------------------------
# Decoding hook for the untagged / forward-compatible parts
# --------------------------------------------------------------------------


def _convert(obj: Any, cls: type) -> Any:
    try:
        return msgspec.convert(obj, cls, dec_hook=dec_hook)
    except msgspec.ValidationError as e:
        # Re-raised as ValueError so msgspec appends the outer path; the inner
        # path is kept relative to the item ("at `.mimeType`").
        raise ValueError(str(e).replace(" - at `$", " at `")) from None


def dec_hook(type_: type, obj: Any) -> Any:
    """msgspec ``dec_hook`` for :class:`ResourceContents` fields.

    Pass it to every Decoder / ``msgspec.convert`` over these types.
    """
    if type_ is ResourceContents:
        if type(obj) is not dict:
            raise ValueError(f"Expected `object`, got `{type(obj).__name__}`")
        if "blob" in obj:
            return _convert(obj, BlobResourceContents)
        if "text" in obj:
            return _convert(obj, TextResourceContents)
        raise ValueError("resource contents need a `text` or a `blob` field")
    raise NotImplementedError(f"no decoder for {type_!r}")
