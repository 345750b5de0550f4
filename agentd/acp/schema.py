"""The Agent Client Protocol (v1) messages agentd reads and writes.

Field names are ACP's (camelCase on the wire, `rename="camel"`); what agentd
reads is decoded into these Structs through the guarded entry
(`agentd.wire.guard`), so a malformed params object is a -32602 naming the
field, never a crash.  Only the parts agentd uses are typed: unknown keys
(`_meta`, capabilities of later schema versions) are ignored on the way in.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import UNSET, Struct, UnsetType

PROTOCOL_VERSION = 1

StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]
ToolKind = Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch",
                   "other"]
ToolStatus = Literal["pending", "in_progress", "completed", "failed"]


class _In(Struct, rename="camel", forbid_unknown_fields=False):
    """A params object from the client."""


class _Out(Struct, rename="camel", omit_defaults=True):
    """A result or notification agentd sends: a field ACP requires has no default
    (`omit_defaults` leaves out only the optional ones left unset)."""


# --- initialize ---------------------------------------------------------------------

class Implementation(_Out):
    name: str
    version: str
    title: str | UnsetType = UNSET


class InitializeParams(_In):
    protocol_version: int
    client_capabilities: dict[str, Any] | None = None
    client_info: dict[str, Any] | None = None


class PromptCapabilities(_Out):
    image: bool
    audio: bool
    embedded_context: bool


class McpCapabilities(_Out):
    http: bool
    sse: bool


class AgentCapabilities(_Out):
    load_session: bool
    prompt_capabilities: PromptCapabilities
    mcp_capabilities: McpCapabilities


class InitializeResult(_Out):
    protocol_version: int
    agent_capabilities: AgentCapabilities
    agent_info: Implementation
    auth_methods: list[dict[str, Any]]


# --- sessions -----------------------------------------------------------------------

class HttpHeader(_In):
    name: str
    value: str


class EnvVariable(_In):
    name: str
    value: str


class McpServer(_In):
    """One `mcpServers` entry: `http` / `sse` carry `type`, `url`, `headers`; a stdio
    entry has `command` (and no `type`, or `"stdio"`)."""

    name: str
    type: str | UnsetType = UNSET
    url: str | UnsetType = UNSET
    headers: list[HttpHeader] = []
    command: str | UnsetType = UNSET
    args: list[str] = []
    env: list[EnvVariable] = []


class NewSessionParams(_In):
    cwd: str
    mcp_servers: list[McpServer] = []


class LoadSessionParams(_In):
    session_id: str
    cwd: str
    mcp_servers: list[McpServer] = []


class SelectOption(_Out):
    value: str
    name: str


class ConfigOption(_Out):
    """A `select` session config option (ACP's model selection: category `model`)."""

    id: str
    name: str
    current_value: str
    options: list[SelectOption]
    type: str
    category: str | UnsetType = UNSET


class NewSessionResult(_Out):
    session_id: str
    config_options: list[ConfigOption] | UnsetType = UNSET


class LoadSessionResult(_Out):
    config_options: list[ConfigOption] | UnsetType = UNSET


class SetConfigOptionParams(_In):
    session_id: str
    config_id: str
    value: str | bool


class SetConfigOptionResult(_Out):
    config_options: list[ConfigOption]


class SetModelParams(_In):
    """`session/set_model` (the schema's unstable method, kept for clients that use it)."""

    session_id: str
    model_id: str


class Empty(_Out):
    pass


# --- prompts ------------------------------------------------------------------------

class EmbeddedResource(_In):
    uri: str
    text: str | UnsetType = UNSET
    mime_type: str | UnsetType = UNSET


class ContentBlock(_In):
    """A prompt block: `text`, `resource_link` (`uri`, `name`) and `resource` (embedded
    text) are read; `image` and `audio` are refused (promptCapabilities says so)."""

    type: str
    text: str | UnsetType = UNSET
    uri: str | UnsetType = UNSET
    name: str | UnsetType = UNSET
    resource: EmbeddedResource | UnsetType = UNSET


class PromptParams(_In):
    session_id: str
    prompt: list[ContentBlock]


class PromptResult(_Out):
    stop_reason: StopReason


class CancelParams(_In):
    session_id: str


# --- session/update -----------------------------------------------------------------

class TextContent(_Out):
    type: str
    text: str


def text(value: str) -> TextContent:
    """A `text` content block."""
    return TextContent("text", value)


class ToolCallContent(_Out):
    type: str
    content: TextContent


class _Update(_Out, tag_field="sessionUpdate"):
    pass


class UserMessageChunk(_Update, tag="user_message_chunk"):
    content: TextContent


class AgentMessageChunk(_Update, tag="agent_message_chunk"):
    content: TextContent


class ToolCall(_Update, tag="tool_call"):
    tool_call_id: str
    title: str
    kind: ToolKind
    status: ToolStatus
    raw_input: Any = UNSET


class ToolCallUpdate(_Update, tag="tool_call_update"):
    tool_call_id: str
    status: ToolStatus
    content: list[ToolCallContent] | UnsetType = UNSET
    raw_output: Any = UNSET


class PlanEntry(_Out):
    content: str
    priority: Literal["high", "medium", "low"]
    status: Literal["pending", "in_progress", "completed"]


class Plan(_Update, tag="plan"):
    entries: list[PlanEntry]


class ConfigOptionUpdate(_Update, tag="config_option_update"):
    config_options: list[ConfigOption]


Update = UserMessageChunk | AgentMessageChunk | ToolCall | ToolCallUpdate | Plan \
    | ConfigOptionUpdate


class SessionNotification(_Out):
    session_id: str
    update: Update
