"""`playback:PATH` — a deterministic, offline, scripted intelligence.

A real provider, not a test double: the loop cannot tell it from the HTTP one.
It reads a JSON file of *scripts*; each conversation picks one script by its
instruction (the first user message) and then plays that script's *turns* in
order, one per model call. Because the choice depends only on the conversation,
one file scripts a whole tree of subagents (each child process loads the same
file and finds its own script by its own instruction). See docs/playback.md.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import msgspec
import orjson

from agentd.errors import IntelligenceError
from agentd.intelligence.base import (
    Completion,
    FunctionCall,
    IntelligenceUnavailable,
    Message,
    ToolCall,
    ToolDef,
    Usage,
)
from agentd.intelligence.flow import FlowGate

FORMAT_VERSION = 1


def _bad_file(message: str) -> IntelligenceError:
    """The playback file is missing or malformed (a config error: exit 2)."""
    return IntelligenceError(message, kind="playback")


class PCall(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    arguments: dict[str, Any] = {}
    id: str | None = None


class PUsage(msgspec.Struct, forbid_unknown_fields=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int | None = None

    def usage(self) -> Usage:
        total = self.total_tokens
        if total is None:
            total = self.prompt_tokens + self.completion_tokens
        return Usage(self.prompt_tokens, self.completion_tokens, total)


class PTurn(msgspec.Struct, forbid_unknown_fields=True):
    content: str | None = None
    tool_calls: list[PCall] = []
    expect: str | list[str] | None = None  # must appear in what the model was just shown
    usage: PUsage | None = None
    delay: float = 0.0  # seconds to "think" before answering
    fail: str | None = None  # answer by failing: the intelligence is unavailable (exit 5)


class PScript(msgspec.Struct, forbid_unknown_fields=True):
    name: str | None = None
    match: str | None = None  # a substring of the instruction
    match_regex: str | None = None  # a regular expression searched in the instruction
    turns: list[PTurn] = []
    repeat_last: bool = False  # after the last turn, play it again forever
    usage: PUsage | None = None  # default usage of each turn


class PFile(msgspec.Struct, forbid_unknown_fields=True):
    playback: int = FORMAT_VERSION
    scripts: list[PScript] = []
    turns: list[PTurn] | None = None  # shorthand: one script that matches anything
    repeat_last: bool = False
    usage: PUsage | None = None


_decoder = msgspec.json.Decoder(PFile)


class _Compiled:
    __slots__ = ("calls", "index", "regex", "script")

    def __init__(self, index: int, script: PScript) -> None:
        self.index = index
        self.script = script
        self.regex = re.compile(script.match_regex) if script.match_regex else None
        # Prebuilt tool calls per turn: playback must cost nothing per step.
        self.calls: list[list[ToolCall]] = []
        for t, turn in enumerate(script.turns):
            self.calls.append([
                ToolCall(id=c.id or f"call_{t + 1}_{i + 1}",
                         function=FunctionCall(name=c.name,
                                               arguments=orjson.dumps(c.arguments).decode()))
                for i, c in enumerate(turn.tool_calls)
            ])

    @property
    def label(self) -> str:
        return self.script.name or f"#{self.index}"

    def matches(self, instruction: str) -> bool:
        s = self.script
        if s.match is not None and s.match not in instruction:
            return False
        if self.regex is not None and not self.regex.search(instruction):
            return False
        return True


def load(path: str) -> list[PScript]:
    """Read and validate a playback file (raises an IntelligenceError of kind "playback")."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise _bad_file(f"playback:{path}: {exc.strerror or exc}") from None
    try:
        pf = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise _bad_file(f"playback:{path}: {exc}") from None
    if pf.playback != FORMAT_VERSION:
        raise _bad_file(f"playback:{path}: format version {pf.playback} "
                            f"(this agentd reads {FORMAT_VERSION})")
    scripts = list(pf.scripts)
    if pf.turns is not None:
        scripts.append(PScript(name="default", turns=pf.turns,
                               repeat_last=pf.repeat_last, usage=pf.usage))
    if not scripts:
        raise _bad_file(f"playback:{path}: no scripts and no turns")
    for i, s in enumerate(scripts):
        if not s.turns:
            raise _bad_file(f"playback:{path}: script {s.name or i} has no turns")
        if s.match_regex:
            try:
                re.compile(s.match_regex)
            except re.error as exc:
                raise _bad_file(
                    f"playback:{path}: script {s.name or i}: bad match_regex: {exc}") from None
        for t, turn in enumerate(s.turns):
            if turn.fail is None and turn.content is None and not turn.tool_calls:
                raise _bad_file(f"playback:{path}: script {s.name or i} turn {t + 1}: "
                                    "needs content, tool_calls or fail")
    return scripts


def _instruction(messages: Sequence[Message]) -> str:
    for m in messages:
        if m.role == "user" and isinstance(m.content, str):
            return m.content
    return ""


def _shown_since_last_turn(messages: Sequence[Message]) -> str:
    parts: list[str] = []
    for m in reversed(messages):
        if m.role == "assistant":
            break
        if isinstance(m.content, str):
            parts.append(m.content)
    return "\n".join(reversed(parts))


class Playback:
    """The provider: `complete()` answers with the script's next turn."""

    name = "playback"
    model: str | None = None  # the gateway chooses

    def __init__(self, path: str) -> None:
        self.path = path
        self._scripts = [_Compiled(i, s) for i, s in enumerate(load(path))]
        self._chosen: dict[str, _Compiled] = {}
        # (conversation list, messages seen, assistant turns among them): counting
        # is incremental while the loop appends to the same conversation.
        self._seen: tuple[Any, int, int] = (None, 0, 0)

    def choose(self, instruction: str) -> _Compiled:
        hit = self._chosen.get(instruction)
        if hit is None:
            hit = next((s for s in self._scripts if s.matches(instruction)), None)
            if hit is None:
                raise IntelligenceUnavailable(
                    f"playback:{self.path}: no script matches the instruction "
                    f"{instruction[:80]!r}")
            self._chosen[instruction] = hit
        return hit

    async def complete(self, messages: Sequence[Message],
                       tools: Sequence[ToolDef]) -> Completion:
        compiled = self.choose(_instruction(messages))
        script = compiled.script
        conv, seen, count = self._seen
        if conv is not messages or seen > len(messages):
            seen = count = 0
        count += sum(1 for m in messages[seen:] if m.role == "assistant")
        self._seen = (messages, len(messages), count)
        n = step = count
        if n >= len(script.turns):
            if not script.repeat_last:
                raise IntelligenceUnavailable(
                    f"playback:{self.path}: script {compiled.label} has no turn {n + 1} "
                    f"(it has {len(script.turns)})")
            n = len(script.turns) - 1
        turn = script.turns[n]
        calls = compiled.calls[n]
        if step != n:  # a repeated turn: fresh call ids, so every id stays unique
            calls = [ToolCall(id=f"call_{step + 1}_{i + 1}", function=c.function)
                     for i, c in enumerate(calls)]
        if turn.delay > 0:
            await asyncio.sleep(turn.delay)
        if turn.fail is not None:
            raise IntelligenceUnavailable(f"playback: {turn.fail}")
        if turn.expect is not None:
            shown = _shown_since_last_turn(messages)
            for want in [turn.expect] if isinstance(turn.expect, str) else turn.expect:
                if want not in shown:
                    raise IntelligenceUnavailable(
                        f"playback:{self.path}: script {compiled.label} turn {n + 1} "
                        f"expected {want!r} in what it was shown")
        pu = turn.usage or script.usage
        return Completion(
            content=turn.content,
            tool_calls=list(calls),
            usage=pu.usage() if pu is not None else Usage(),
            finish_reason="tool_calls" if turn.tool_calls else "stop",
        )

    def share_gate(self, gate: FlowGate) -> None:
        """A script never waits on a gateway: nothing to pause."""

    async def aclose(self) -> None:
        return None
