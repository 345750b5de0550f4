"""The agent loop: intelligence <-> toolbox, under budgets.

One *step* is one answer of the intelligence plus the tool calls it asked for
(several at once run concurrently, their results kept in the model's order).
The loop ends when the model answers without a tool call (completed), or a
budget is spent before the next model call: `max_steps` or the token ceiling
(budget_exhausted, exit 3, partial). The deadline and signals are enforced by
the caller (`agentd.app.run`) by cancelling the loop; the `LoopState` it was
given keeps the steps, usage and last words for the partial result.

Observations: a tool's result — `isError` content, -32002, argument-validation
failures — goes back to the model fenced as untrusted data, cut to
`observation_bytes` with a clear marker. A protocol/transport fault (`ToolFault`,
the client's decision under the one fault policy, agentd.mcp.client.rules.faults: any
re-send is already made) is never shown as tool output: the model gets an
`[agentd]` notice that the call failed, outside any fence.

Images a tool returns go to the model as image parts of a user message after
the step's tool messages (agentd.agent.images), unless `tool_images="text"`.

A partial result carries what was learned (`LoopState.partial_result`): the
model's last text, or else the last step's observations, bounded.

Logs: `intelligence.turn`, `tool.call`, `tool.result` (sizes, durations, no
bodies at info level; bodies at debug for audit).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from agentd.agent import prompt as P
from agentd.agent.images import ImageBudget, images_message
from agentd.agent.selftools import SelfTools
from agentd.config.model import RunLimits
from agentd.errors import IntelligenceError, ToolFault
from agentd.intelligence.base import (
    Completion,
    ImagePart,
    Intelligence,
    Message,
    TextPart,
    ToolCall,
    ToolDef,
    is_ceiling,
    model_label,
    system,
    tool_result,
    user,
)
from agentd.log import log
from agentd.obs import metrics, trace
from agentd.output import Usage
from agentd.wire import mcp_types as mt
from agentd.wire.guard import PEER_FAULTS, fault_text
from agentd.wire.shapes import ResourceInfo, ToolEntry

if TYPE_CHECKING:  # types only: a brokered child runs this loop without the HTTP stack
    from agentd.mcp.client.seams import AgentToolbox, Observed

# The loop's budgets are the run's limits (max_steps, token_ceiling, observation_bytes).
Budgets = RunLimits
# A partial result without the model's text: the last step's observations, at most
# this many, each text cut to this many bytes (README, docs/agent.md)
PARTIAL_OBSERVATIONS = 16
PARTIAL_OBSERVATION_BYTES = 4096


class LoopState:
    """What a run has done so far; survives cancellation for the partial result."""

    __slots__ = ("calls", "images", "last_content", "last_observations", "messages", "steps",
                 "usage")

    def __init__(self) -> None:
        self.steps = 0
        self.calls = 0
        self.usage = Usage()
        self.last_content: str | None = None
        self.last_observations: list[dict[str, Any]] = []  # the last step's, bounded
        self.messages: list[Message] = []
        self.images = ImageBudget()

    def partial_result(self) -> Any:
        """What a run that ends early hands back: the model's last text, else
        `{"observations": [{"step", "tool", "is_error", "bytes", "text"}]}` of the last
        step (None when nothing was learned)."""
        if self.last_content is not None:
            return self.last_content
        if self.last_observations:
            return {"observations": list(self.last_observations)}
        return None

    def observed(self, step: int, tool: str, text: str, *, is_error: bool) -> None:
        """Keep one observation of `step` for the partial result (bounded)."""
        if self.last_observations and self.last_observations[0]["step"] != step:
            self.last_observations.clear()
        if len(self.last_observations) >= PARTIAL_OBSERVATIONS:
            return
        cut, size = P.cut_utf8(text, PARTIAL_OBSERVATION_BYTES)
        self.last_observations.append({
            "step": step, "tool": tool, "is_error": is_error,
            "bytes": size if size >= 0 else len(text.encode("utf-8", "surrogatepass")),
            "text": cut})


class Outcome(msgspec.Struct):
    status: str  # completed | budget_exhausted (deadline/interrupted/failed: see run.py)
    partial: bool
    result: Any
    reason: str = ""


class Tracer:
    """Hooks on what a run does, in order: a readable trace (the demo), a
    trajectory (agentd.trajectory); the default does nothing. `prompt` is a
    user message the conversation starts or continues with; `call_id` is the
    model's id of the tool call a `call` or `result` is about."""

    def prompt(self, text: str) -> None:
        pass

    def turn(self, step: int, completion: Completion) -> None:
        pass

    def call(self, step: int, name: str, arguments: str, *, call_id: str = "") -> None:
        pass

    def result(self, step: int, name: str, text: str, is_error: bool, size: int,
               duration_ms: float, note: str | None, *, call_id: str = "") -> None:
        pass


class Tracers(Tracer):
    """Several tracers fed the same hooks, in the order given: a run has one
    tracer slot, and an ACP session fills it with its `session/update` stream
    and its trajectory at once (composed, not subclassed)."""

    def __init__(self, *parts: Tracer) -> None:
        self.parts = parts

    def prompt(self, text: str) -> None:
        for t in self.parts:
            t.prompt(text)

    def turn(self, step: int, completion: Completion) -> None:
        for t in self.parts:
            t.turn(step, completion)

    def call(self, step: int, name: str, arguments: str, *, call_id: str = "") -> None:
        for t in self.parts:
            t.call(step, name, arguments, call_id=call_id)

    def result(self, step: int, name: str, text: str, is_error: bool, size: int,
               duration_ms: float, note: str | None, *, call_id: str = "") -> None:
        for t in self.parts:
            t.result(step, name, text, is_error, size, duration_ms, note, call_id=call_id)


class Actions:
    """The action space: MCP tools (the Toolbox) plus the `agentd__*` self-tools."""

    def __init__(self, toolbox: AgentToolbox | None, selftools: SelfTools) -> None:
        self.toolbox = toolbox
        self.selftools = selftools
        self._catalogue: object = None
        self.mcp_names: set[str] = set()
        self.entries: list[ToolEntry] = []
        self.defs: list[ToolDef] = []
        self.refresh()

    def refresh(self) -> list[ToolDef]:
        """The tool definitions, rebuilt when a server re-listed its tools."""
        catalogue = self.toolbox.tools if self.toolbox is not None else None
        if catalogue is self._catalogue and self.defs:
            return self.defs
        self._catalogue = catalogue
        own = self.selftools.entries()
        offered: list[ToolEntry] = []
        for e in (catalogue or {}).values():
            if e.qualified in self.selftools:
                log.warning("tool.shadowed", tool=e.qualified,
                            reason="the name is taken by an agentd self-tool")
                continue
            offered.append(e)
        self.mcp_names = {e.qualified for e in offered}
        self.entries = own + offered
        self.defs = P.tool_defs(own, trusted=True) + P.tool_defs(offered)
        return self.defs

    async def call(self, name: str, arguments: dict[str, Any]) -> Observed:
        if name in self.selftools:
            return await self.selftools.call(name, arguments)
        if self.toolbox is None:
            raise LookupError(f"no tool named {name!r}")  # `knows` said no first
        return await self.toolbox.call(name, arguments)

    def knows(self, name: str) -> bool:
        return name in self.mcp_names or name in self.selftools


# --- reading the Toolbox (the MCP client's catalogue) ------------------------------

def toolbox_resources(toolbox: AgentToolbox | None) -> list[ResourceInfo]:
    return list(toolbox.resources) if toolbox is not None else []


def toolbox_instructions(toolbox: AgentToolbox | None) -> dict[str, str | None]:
    if toolbox is None:
        return {}
    return dict(toolbox.instructions)


# --- the result -------------------------------------------------------------------

def wants_json(contract: str | None) -> bool:
    if not contract:
        return False
    c = contract.strip()
    return "json" in c.lower() or c.startswith(("{", "["))


def distil(answer: str | None, contract: str | None) -> Any:
    """The distillate: JSON when the contract asks for it and the answer parses."""
    if answer is None:
        return None
    if not wants_json(contract):
        return answer
    text = answer.strip()
    if text.startswith("```"):
        body = text.split("\n", 1)[1] if "\n" in text else ""
        text = body.rsplit("```", 1)[0].strip()
    try:
        return orjson.loads(text)
    except PEER_FAULTS:  # the model's text: not JSON (or nested too deeply) stays text
        return answer


_decode_json = msgspec.json.decode


# --- the loop ---------------------------------------------------------------------

class Loop:
    def __init__(self, intelligence: Intelligence, actions: Actions, *, budgets: Budgets,
                 state: LoopState | None = None, tracer: Tracer | None = None,
                 on_step: Callable[[LoopState], None] | None = None,
                 spent: Callable[[], int] | None = None,
                 tool_images: str = "parts") -> None:
        self.intelligence = intelligence
        self.tool_images = tool_images
        self.actions = actions
        self.budgets = budgets
        self.state = state if state is not None else LoopState()
        self.tracer = tracer
        self.on_step = on_step  # after each answer: progress reports, tree accounting
        self.spent = spent  # tokens counted against the ceiling (default: this run's)
        self._debug = log.enabled("debug")
        self._model = model_label(intelligence)
        self._call_attrs: dict[str, Any] = {"gen_ai.request.model": self._model}
        self._steps: trace.Steps | trace.NoSteps = trace.NOSTEPS

    def conversation(self, instruction: str, *, output_contract: str | None = None,
                     toolbox: AgentToolbox | None = None,
                     framing: str | None = None) -> list[Message]:
        sys_text = P.system_prompt(instructions=toolbox_instructions(toolbox),
                                   resources=toolbox_resources(toolbox),
                                   output_contract=output_contract, framing=framing,
                                   reads="agentd__read_resource" in self.actions.selftools)
        return [system(sys_text), user(P.user_instruction(instruction))]

    async def run(self, messages: list[Message], *, output_contract: str | None = None
                  ) -> Outcome:
        """Drive the conversation to a final answer or an exhausted budget."""
        steps = self._steps = trace.steps()  # one `agent.step` span per step, when tracing
        try:
            return await self._run(messages, output_contract)
        except BaseException as exc:
            steps.close(exc)
            raise
        finally:
            steps.close(None)

    async def _run(self, messages: list[Message], output_contract: str | None) -> Outcome:
        st = self.state
        st.messages = messages
        b = self.budgets
        while True:
            if st.steps >= b.max_steps:
                return self._exhausted(f"max_steps={b.max_steps} reached")
            if b.token_ceiling is not None:
                spent = self.spent() if self.spent is not None else st.usage.total_tokens
                if spent >= b.token_ceiling:
                    return self._exhausted(f"token_ceiling={b.token_ceiling} reached "
                                           f"({spent} tokens)")
            self._tell_dropped(messages)
            if trace.enabled:
                self._steps.next(st.steps + 1)
            defs = self.actions.refresh()
            t0 = time.perf_counter()
            try:
                with trace.child("intelligence.call", "client", self._call_attrs.copy()) \
                        if trace.enabled else trace.NOSPAN as call_span:
                    try:
                        completion = await self.intelligence.complete(messages, defs)
                    except Exception as exc:
                        if not is_ceiling(exc):  # the ledger's refusal is no intelligence error
                            metrics.INTELLIGENCE.inc(self._model, "error")
                        raise
                    if trace.enabled:
                        call_span.update({
                            "gen_ai.usage.input_tokens": completion.usage.prompt_tokens,
                            "gen_ai.usage.output_tokens": completion.usage.completion_tokens,
                            "agentd.tool_calls": len(completion.tool_calls)})
            except IntelligenceError as exc:
                if exc.kind != "ceiling":
                    raise
                return self._exhausted(str(exc))  # the tree's ledger refused this call
            metrics.turn(self._model, completion.usage, time.perf_counter() - t0)
            st.steps += 1
            st.usage.add(completion.usage)
            step = st.steps
            log.info("intelligence.turn", step=step, tool_calls=len(completion.tool_calls),
                     content_bytes=len(completion.content or ""),
                     prompt_tokens=completion.usage.prompt_tokens,
                     completion_tokens=completion.usage.completion_tokens,
                     finish_reason=completion.finish_reason,
                     duration_ms=round((time.perf_counter() - t0) * 1000, 3))
            if self.tracer is not None:
                self.tracer.turn(step, completion)
            if self.on_step is not None:
                self.on_step(st)
            messages.append(completion.message())
            if completion.content:
                st.last_content = completion.content
            if not completion.tool_calls:
                return Outcome(status="completed", partial=False,
                               result=distil(completion.content or "", output_contract))
            calls = completion.tool_calls
            if len(calls) == 1:
                answers = [await self._call(step, calls[0])]
            else:
                async with asyncio.TaskGroup() as tg:
                    tasks = [tg.create_task(self._call(step, c)) for c in calls]
                answers = [t.result() for t in tasks]
            messages.extend(m for m, _ in answers)
            images = [p for _, parts in answers for p in parts]
            if images:  # after every tool message of the step, as Chat Completions wants
                messages.append(images_message(images))

    def _tell_dropped(self, messages: list[Message]) -> None:
        """Optional servers the fault policy left out since the last step: the
        model is told once, fenced (the fault text may carry server words)."""
        toolbox = self.actions.toolbox
        for server, fault in (toolbox.take_notices() if toolbox is not None else ()):
            messages.append(user(P.notice(f"MCP server {server!r} was left out of the "
                                          "catalogue; its tools are gone:") + "\n"
                                 + P.fence("fault", fault, server=server)))

    def _exhausted(self, reason: str) -> Outcome:
        log.warning("budget.exhausted", reason=reason, steps=self.state.steps,
                    total_tokens=self.state.usage.total_tokens)
        return Outcome(status="budget_exhausted", partial=True,
                       result=self.state.partial_result(), reason=reason)

    async def _call(self, step: int, call: ToolCall
                    ) -> tuple[Message, list[TextPart | ImagePart]]:
        """The tool message of one call, and the parts that carry its images."""
        name = call.function.name
        raw = call.function.arguments
        self.state.calls += 1
        if self._debug:
            log.debug("tool.call", step=step, tool=name, call_id=call.id, arguments=raw)
        else:
            log.info("tool.call", step=step, tool=name, call_id=call.id, args_bytes=len(raw))
        if self.tracer is not None:
            self.tracer.call(step, name, raw, call_id=call.id)
        t0 = time.perf_counter()
        note: str | None = None
        text = ""
        is_error = True
        images: list[TextPart | ImagePart] = []
        try:
            # msgspec keeps an integer beyond 64 bits exact (orjson would make it a
            # float): the client then refuses it by the wire's bound, visibly
            arguments = _decode_json(raw) if raw.strip() else {}
        except PEER_FAULTS as exc:  # the gateway's bytes: any refusal is the model's to fix
            note = (f"the arguments for {name} are not valid JSON ({fault_text(exc)}); "
                    "nothing was called")
            arguments = None
        if arguments is not None and not isinstance(arguments, dict):
            note = f"the arguments for {name} must be a JSON object; nothing was called"
        elif note is None and not self.actions.knows(name):
            note = (f"there is no tool named {name!r}; nothing was called. "
                    "Use one of the offered functions.")
        if note is None and isinstance(arguments, dict):  # (no note: a JSON object)
            try:
                obs = await self.actions.call(name, arguments)
            except ToolFault as exc:
                note = (f"the call to {name} failed with a protocol or transport fault "
                        f"({_fault_text(exc)}); this is not output from the tool")
                log.warning("tool.fault", step=step, tool=name, call_id=call.id,
                            fault=_fault_text(exc), retryable=exc.retryable, cause=exc.cause)
            else:
                text = obs.text or ""
                blocks = getattr(obs, "content", ())  # an MCP server's raw blocks, if any
                if self.tool_images == "parts" and any(
                        isinstance(b, mt.ImageContent) for b in blocks):
                    text, images = self.state.images.render(blocks, call.id, name)
                structured = obs.structured
                if not text and structured is not None:
                    text = orjson.dumps(structured, default=str).decode()
                is_error = bool(obs.is_error)
        duration_ms = round((time.perf_counter() - t0) * 1000, 3)
        if note is not None:
            content = P.notice(note)
            size, cut = len(content), False
        else:
            content, size, cut = P.observation(name, text, is_error=is_error,
                                               limit=self.budgets.observation_bytes)
        if self._debug:
            log.debug("tool.result", step=step, tool=name, call_id=call.id, bytes=size,
                      is_error=is_error, cut=cut, duration_ms=duration_ms,
                      fault=note is not None, body=text)
        else:
            log.info("tool.result", step=step, tool=name, call_id=call.id, bytes=size,
                     is_error=is_error, cut=cut, duration_ms=duration_ms,
                     fault=note is not None)
        if self.tracer is not None:
            self.tracer.result(step, name, text, is_error, size, duration_ms, note,
                               call_id=call.id)
        self.state.observed(step, name, P.notice(note) if note is not None else text,
                            is_error=is_error)
        return tool_result(call.id, content), images


def _fault_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())[:300]


async def run_task(intelligence: Intelligence, toolbox: AgentToolbox | None,
                   selftools: SelfTools, *,
                   instruction: str, output_contract: str | None, budgets: Budgets,
                   state: LoopState, tracer: Tracer | None = None,
                   history: Sequence[Message] = (),
                   on_step: Callable[[LoopState], None] | None = None,
                   spent: Callable[[], int] | None = None,
                   tool_images: str = "parts", framing: str | None = None) -> Outcome:
    """One task: build the prompt (`framing`: a serving worker's own instruction,
    agentd.agent.prompt.system_prompt), then loop to an outcome."""
    if tracer is not None:
        tracer.prompt(instruction)
    actions = Actions(toolbox, selftools)
    loop = Loop(intelligence, actions, budgets=budgets, state=state, tracer=tracer,
                on_step=on_step, spent=spent, tool_images=tool_images)
    messages = loop.conversation(instruction, output_contract=output_contract,
                                 toolbox=toolbox, framing=framing)
    messages.extend(history)
    return await loop.run(messages, output_contract=output_contract)
