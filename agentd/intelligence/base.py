"""The intelligence provider contract, and the messages it speaks.

Messages are the OpenAI Chat Completions wire shapes, as msgspec Structs: the
HTTP provider encodes them as they are, and the playback provider reads the
same objects, so both providers go through exactly the same loop code.

A provider is anything with

    async def complete(messages, tools) -> Completion
    async def aclose() -> None

`IntelligenceUnavailable` means the gateway is unreachable or keeps failing
(after the provider's own bounded retries): the run ends with exit 5.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from msgspec import UNSET, Struct, UnsetType

from agentd.errors import IntelligenceError
from agentd.exitcodes import ExitCode
from agentd.output import Usage

if TYPE_CHECKING:
    from agentd.intelligence.flow import FlowGate

__all__ = [
    "Completion",
    "FunctionCall",
    "FunctionDef",
    "ImagePart",
    "ImageURL",
    "Intelligence",
    "IntelligenceUnavailable",
    "Message",
    "TextPart",
    "ToolCall",
    "ToolDef",
    "Usage",
    "assistant",
    "ceiling_reached",
    "is_ceiling",
    "system",
    "tool_result",
    "user",
]


class IntelligenceUnavailable(IntelligenceError):
    """The intelligence is unreachable or keeps failing: exit 5."""

    exit_code = ExitCode.INTELLIGENCE
    event = "intelligence.unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="unavailable")


def ceiling_reached(message: str) -> IntelligenceError:
    """The tree's token ledger refused an intelligence call: the run ends
    `budget_exhausted` (exit 3) with its partial result (agentd.intelligence.ledger)."""
    return IntelligenceError(message, kind="ceiling")


def is_ceiling(exc: BaseException) -> bool:
    """Whether `exc` is the ledger's refusal (not the intelligence failing)."""
    return isinstance(exc, IntelligenceError) and exc.kind == "ceiling"


class FunctionCall(Struct, omit_defaults=True):
    name: str
    arguments: str = ""  # a JSON text, exactly as the model wrote it


class ToolCall(Struct):
    id: str
    function: FunctionCall
    type: str = "function"

    @property
    def name(self) -> str:
        return self.function.name


class TextPart(Struct, tag="text", tag_field="type"):
    """A text part of a user message's content (`{"type": "text", "text": ...}`)."""

    text: str


class ImageURL(Struct):
    url: str  # a `data:<mime>;base64,<data>` URL: the bytes travel in the request


class ImagePart(Struct, tag="image_url", tag_field="type"):
    """An image part (`{"type": "image_url", "image_url": {"url": ...}}`): a tool
    message cannot carry one in Chat Completions, so a user message after the
    step's tool messages does (agentd.agent.images)."""

    image_url: ImageURL


class Message(Struct, omit_defaults=True):
    """One chat message (system, user, assistant or tool); a user message's
    content may be parts (text and images)."""

    role: str
    content: str | list[TextPart | ImagePart] | UnsetType | None = UNSET
    tool_calls: list[ToolCall] | UnsetType = UNSET
    tool_call_id: str | UnsetType = UNSET


class FunctionDef(Struct, omit_defaults=True):
    name: str
    description: str | UnsetType = UNSET
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}})


class ToolDef(Struct):
    """A tool offered to the model (`type: function`)."""

    function: FunctionDef
    type: str = "function"


class Completion(Struct):
    """One answer of the intelligence: text and/or tool calls, and usage."""

    content: str | None = None
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    usage: Usage = msgspec.field(default_factory=Usage)
    finish_reason: str | None = None

    def message(self) -> Message:
        """The assistant message that goes back into the conversation."""
        if self.tool_calls:
            return Message(role="assistant", content=self.content, tool_calls=self.tool_calls)
        return Message(role="assistant", content=self.content or "")


class Intelligence(Protocol):
    """What the loop needs of a provider."""

    name: str  # for logs: "openai" or "playback"

    @property
    def model(self) -> str | None:
        """The `--model` it asks the gateway for; None when the gateway chooses."""
        ...

    async def complete(self, messages: Sequence[Message],
                       tools: Sequence[ToolDef]) -> Completion: ...

    def share_gate(self, gate: FlowGate) -> None:
        """Take the tree's flow gate (from the ledger's meter that wraps it): a
        provider that retries pauses the whole tree on it when the gateway says
        wait (429, `Retry-After`); one that never retries ignores it."""
        ...

    async def aclose(self) -> None: ...


def model_label(intelligence: Intelligence) -> str:
    """The model's name for metrics and spans: `--model`, else the provider's kind
    (a wrapper such as the tree's metered provider answers with its provider's)."""
    return intelligence.model or intelligence.name


def system(text: str) -> Message:
    return Message(role="system", content=text)


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str) -> Message:
    return Message(role="assistant", content=text)


def tool_result(call_id: str, text: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=text)
