"""One shape per concept: a tool, an observation, a resource.

Every layer above names these instead of defining its own: the MCP client
fills them from a server's listings and answers, the toolbox offers them, the
prompt renders them, the self-tools build them and the control wire carries
them to a brokered child as they are. Nothing converts between look-alikes at
each hop, so a field cannot be dropped or renamed on the way.

* :class:`ToolInfo` -- a tool as its server listed it (after admission,
  `agentd.mcp.client.rules.catalogue`), with what the client needs to call it.
* :class:`ToolEntry` -- a tool as offered to the model under its qualified
  name: the toolbox's catalogue line, the self-tools' entry, the prompt's
  input, and the control wire's `Catalogue.tools` element (its fields are
  those frames' keys, in their order).
* :class:`Observed` -- what the model sees of a tool call or a resource read;
  the control wire's `io/request` answer (tag ``kind: "observation"``).
  :class:`Observation` adds the raw content blocks an MCP server answered
  with; they stay in the process that read them.
* :class:`ResourceInfo` -- one resource catalogue line, never a body; the
  control wire's `Catalogue.resources` element.

Untrusted text (descriptions, names, results) stays untrusted here: these are
data; fencing is the prompt's (`agentd.agent.prompt`).
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "Observation",
    "Observed",
    "ParamHeader",
    "ResourceInfo",
    "ToolEntry",
    "ToolInfo",
]


class ParamHeader(tuple):
    """``(header_name, path)``: ``Mcp-Param-{name}`` and the ``properties`` chain
    of one ``x-mcp-header`` declaration (2026-07-28, `agentd.mcp.client.rules.param_headers`)."""

    __slots__ = ()

    def __new__(cls, header: str, path: tuple[str, ...]) -> ParamHeader:
        return tuple.__new__(cls, (header, path))

    @property
    def header(self) -> str:
        return self[0]

    @property
    def path(self) -> tuple[str, ...]:
        return self[1]


class ToolInfo(msgspec.Struct, kw_only=True):
    """A server's tool as listed.  ``description``/``annotations`` are untrusted.

    ``name_json``/``name_header``/``param_headers`` are the call's wire forms,
    computed once at listing; ``input_check``/``output_check`` hold the compiled
    schema validators, filled on first use by `agentd.mcp.client.rules.schema` (False: not
    compiled yet; None: no usable schema)."""

    name: str
    input_schema: dict[str, Any]
    description: str = ""
    title: str = ""
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] = msgspec.field(default_factory=dict)
    name_json: bytes = b""
    name_header: str = ""  # Mcp-Name (2026-07-28), encoded as the revision says
    param_headers: tuple[ParamHeader, ...] = ()  # its x-mcp-header declarations
    input_check: Any = False
    output_check: Any = False


class ToolEntry(msgspec.Struct, kw_only=True, frozen=True):
    """A tool as offered to the model.  ``qualified`` is the function name the
    model calls (``{server}__{tool}``, sanitised); ``name`` the server's own
    name for it; ``description`` is untrusted server text (the self-tools'
    are agentd's own, and the prompt is told so: `agentd.agent.prompt.tool_defs`)."""

    qualified: str
    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)


class Observed(msgspec.Struct, frozen=True, tag="observation", tag_field="kind"):
    """What the model sees of a tool call or a resource read.

    ``text`` renders every content block; ``is_error`` is the tool's own
    ``isError`` (or an argument/URI problem the model can fix); ``structured``
    is ``structuredContent`` (validated; None below 2025-06-18) or a
    self-tool's body."""

    text: str = ""
    is_error: bool = False
    structured: Any = None

    def bare(self) -> Observed:
        """The observation without anything local to this process: what
        crosses the control wire."""
        return self


class Observation(Observed, frozen=True):
    """An MCP server's answer: the observation plus ``content``, its raw blocks
    (or resource contents) for richer consumers (a blob's bytes).  A brokered
    child is sent the :class:`Observed` part (`Observation.bare`)."""

    content: tuple = ()

    def bare(self) -> Observed:
        return Observed(self.text, self.is_error, self.structured)


class ResourceInfo(msgspec.Struct, kw_only=True, frozen=True):
    """A resource catalogue entry (never a body).  ``name``/``description`` are
    untrusted server text."""

    server: str
    uri: str
    name: str = ""
    description: str = ""
    mime_type: str = ""
    size: int | None = None
