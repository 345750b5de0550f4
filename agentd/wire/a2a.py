"""A2A 1.0 wire types (the JSON form of the protocol's messages), as msgspec Structs.

A2A 1.0 defines its data model in protobuf; its JSON bindings (JSON-RPC and
HTTP+JSON) carry the proto3 JSON mapping: lowerCamelCase names, enums as their
names (``TASK_STATE_COMPLETED``, ``ROLE_USER``), ``oneof`` members as
alternative keys (a ``Part`` has one of ``text``/``raw``/``url``/``data``; a
``StreamResponse`` one of ``task``/``message``/``statusUpdate``/
``artifactUpdate``). Unknown fields are ignored on decode (forward
compatibility, as the spec asks); empty fields are omitted on encode.

Only what agentd speaks is typed: the Agent Card (discovery), messages, tasks,
artifacts, stream events, and the four methods' requests. The JSON-RPC
envelope is :mod:`agentd.wire.jsonrpc`'s.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import Struct

__all__ = [
    "ACTIVE",
    "AGENT_CARD_PATH",
    "BINDING_JSONRPC",
    "BINDING_REST",
    "INTERRUPTED",
    "PROTOCOL_VERSION",
    "TASK_NOT_CANCELABLE",
    "TASK_NOT_FOUND",
    "TERMINAL",
    "AgentCapabilities",
    "AgentCard",
    "AgentInterface",
    "AgentSkill",
    "Artifact",
    "CancelTaskRequest",
    "GetTaskRequest",
    "Message",
    "Part",
    "SendMessageConfiguration",
    "SendMessageRequest",
    "SendMessageResponse",
    "StreamResponse",
    "Task",
    "TaskArtifactUpdateEvent",
    "TaskStatus",
    "TaskStatusUpdateEvent",
    "short_state",
]

PROTOCOL_VERSION: Final = "1.0"
VERSION_HEADER: Final = "A2A-Version"
AGENT_CARD_PATH: Final = "/.well-known/agent-card.json"
BINDING_JSONRPC: Final = "JSONRPC"
BINDING_REST: Final = "HTTP+JSON"

# A2A error codes (JSON-RPC binding), spec section "Error Handling".
TASK_NOT_FOUND: Final = -32001
TASK_NOT_CANCELABLE: Final = -32002
UNSUPPORTED_OPERATION: Final = -32004
VERSION_NOT_SUPPORTED: Final = -32009

SUBMITTED: Final = "TASK_STATE_SUBMITTED"
WORKING: Final = "TASK_STATE_WORKING"
COMPLETED: Final = "TASK_STATE_COMPLETED"
FAILED: Final = "TASK_STATE_FAILED"
CANCELED: Final = "TASK_STATE_CANCELED"
REJECTED: Final = "TASK_STATE_REJECTED"
INPUT_REQUIRED: Final = "TASK_STATE_INPUT_REQUIRED"
AUTH_REQUIRED: Final = "TASK_STATE_AUTH_REQUIRED"

TERMINAL: Final = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})
INTERRUPTED: Final = frozenset({INPUT_REQUIRED, AUTH_REQUIRED})  # the peer waits on us
ACTIVE: Final = frozenset({SUBMITTED, WORKING, "TASK_STATE_UNSPECIFIED"})


def short_state(state: str) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` -> ``input-required`` (what a model reads)."""
    prefix = "TASK_STATE_"
    return (state[len(prefix):] if state.startswith(prefix) else state).lower().replace("_", "-")


class _In(Struct, omit_defaults=True, rename="camel"):
    """Base: camelCase on the wire, defaults omitted, unknown fields ignored."""


class Part(_In):
    text: str | None = None
    raw: str | None = None  # base64 bytes
    url: str | None = None
    data: Any = None
    media_type: str | None = None
    filename: str | None = None
    metadata: dict[str, Any] | None = None


class Message(_In):
    message_id: str
    role: str  # ROLE_USER | ROLE_AGENT
    parts: list[Part] = []
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    reference_task_ids: list[str] | None = None


class TaskStatus(_In):
    state: str = "TASK_STATE_UNSPECIFIED"
    message: Message | None = None
    timestamp: str | None = None


class Artifact(_In):
    artifact_id: str = ""
    name: str | None = None
    description: str | None = None
    parts: list[Part] = []
    metadata: dict[str, Any] | None = None


class Task(_In):
    id: str
    context_id: str | None = None
    status: TaskStatus = msgspec.field(default_factory=TaskStatus)
    artifacts: list[Artifact] = []
    history: list[Message] = []
    metadata: dict[str, Any] | None = None


class TaskStatusUpdateEvent(_In):
    task_id: str
    status: TaskStatus
    context_id: str | None = None
    metadata: dict[str, Any] | None = None


class TaskArtifactUpdateEvent(_In):
    task_id: str
    artifact: Artifact
    context_id: str | None = None
    append: bool = False
    last_chunk: bool = False


class SendMessageConfiguration(_In):
    accepted_output_modes: list[str] | None = None
    history_length: int | None = None
    return_immediately: bool = False


class SendMessageRequest(_In):
    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: dict[str, Any] | None = None
    tenant: str | None = None


class SendMessageResponse(_In):
    """The answer of SendMessage: a Task, or (for a direct reply) a Message."""

    task: Task | None = None
    message: Message | None = None


class StreamResponse(_In):
    """One event of SendStreamingMessage / SubscribeToTask (exactly one key set)."""

    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None


class GetTaskRequest(_In):
    id: str
    history_length: int | None = None
    tenant: str | None = None


class CancelTaskRequest(_In):
    id: str
    tenant: str | None = None
    metadata: dict[str, Any] | None = None


class AgentInterface(_In):
    url: str
    protocol_binding: str
    protocol_version: str | None = None
    tenant: str | None = None


class AgentCapabilities(_In):
    streaming: bool | None = None
    push_notifications: bool | None = None
    extended_agent_card: bool | None = None


class AgentSkill(_In):
    id: str
    name: str
    description: str = ""
    tags: list[str] = []
    examples: list[str] | None = None
    input_modes: list[str] | None = None
    output_modes: list[str] | None = None


class AgentCard(_In):
    name: str
    description: str = ""
    supported_interfaces: list[AgentInterface] = []
    version: str = ""
    capabilities: AgentCapabilities = msgspec.field(default_factory=AgentCapabilities)
    default_input_modes: list[str] = []
    default_output_modes: list[str] = []
    skills: list[AgentSkill] = []
    provider: dict[str, Any] | None = None
    documentation_url: str | None = None
    security_schemes: dict[str, Any] | None = None
    security_requirements: list[dict[str, Any]] | None = None


_encoder = msgspec.json.Encoder()
card_decoder: Final = msgspec.json.Decoder(AgentCard)
task_decoder: Final = msgspec.json.Decoder(Task)
send_response_decoder: Final = msgspec.json.Decoder(SendMessageResponse)
stream_decoder: Final = msgspec.json.Decoder(StreamResponse)
send_request_decoder: Final = msgspec.json.Decoder(SendMessageRequest)


def encode(value: Any) -> bytes:
    return _encoder.encode(value)
