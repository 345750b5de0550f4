"""The ACP methods: sessions, prompts (each one run of the loop), cancel, load.

A session is what `session/new` made: its `cwd`, its declared MCP servers
(agentd.acp.servers), its model and its conversation.  Each `session/prompt`
runs the loop once, composed exactly as a CLI run is (`agentd.app.run.execute`:
the operator's `--mcp` servers plus the session's, the tree's Supervisor for
subagents, the deadline, the drain), on the conversation so far, so the model
sees every earlier turn (a warm loop history), with the limits of the flags
`agentd acp` was given: `--max-steps` and `--deadline` per prompt,
`--token-ceiling` for the whole session.  Its updates stream through
agentd.acp.updates; its answer is the stop reason:

| run status | stopReason |
|---|---|
| completed | `end_turn` (`refusal` when the model's last answer was filtered) |
| budget: `--max-steps` | `max_turn_requests` |
| budget: `--token-ceiling` | `max_tokens` |
| `--deadline` passed | `max_turn_requests` |
| cancelled (`session/cancel`) | `cancelled` |
| failed | a JSON-RPC error (-32603) naming the cause |

`session/cancel` interrupts the prompt as a signal interrupts a run: in-flight
tool calls are cancelled (`notifications/cancelled`), the subagents end through
the kill ladder, and the prompt answers `cancelled` once they are gone.
Sessions live as long as the process (`session/load` replays what agentd still
holds: at most `MAX_REPLAY` updates of each, the oldest dropped first), at
most `MAX_SESSIONS` at once; they share nothing but the process.

With `--trajectories DIR` each session is also recorded as an ATIF v1.8
trajectory (agentd.trajectory.recorder, the recorder a CLI or batch run uses),
fed by the same hooks as its updates (`Tracers`): `DIR/<sessionId>.json`,
rewritten whole after every prompt, however it ended (`extra.status`: the last
prompt's stop reason). Its subagents' own runs are not nested in it: each
prompt has its own tree, whose handles the next prompt's tree reuses, so they
could not be told apart; their spawn calls and results are there.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import uuid
from collections.abc import Callable
from typing import Any, Final

import msgspec

from agentd.agent.loop import LoopState, Tracers
from agentd.app.run import RunContext, execute, new_run_id
from agentd.config.model import Config, ServerSpec
from agentd.errors import RPCError
from agentd.intelligence.base import Message, tool_result
from agentd.log import log
from agentd.output import RunResult
from agentd.trajectory.files import sample_file, write_document
from agentd.trajectory.recorder import TrajectoryRecorder
from agentd.wire.guard import decode_peer
from agentd.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    Notification,
)

from . import schema as S
from .servers import declared
from .updates import Updates

MAX_SESSIONS: Final = 64
MAX_REPLAY: Final = 10_000
MODEL_NAME_MAX: Final = 200
CANCELLED_NOTE: Final = "[agentd] this call was cancelled by the client; it has no result"

Send = Callable[[Any], None]  # writes one JSON-RPC message (a Struct) as one line


def _invalid(message: str) -> RPCError:
    return RPCError(INVALID_PARAMS, message, side="local")


class Session:
    __slots__ = (
        "cwd",
        "history",
        "id",
        "interrupt",
        "log",
        "model",
        "recorder",
        "replay",
        "running",
        "servers",
        "tokens",
    )

    def __init__(self, sid: str, cwd: str, servers: list[ServerSpec], model: str | None
                 ) -> None:
        self.id = sid
        self.cwd = cwd
        self.servers = servers
        self.model = model
        self.history: list[Message] | None = None  # the conversation so far
        self.replay: collections.deque[S.Update] = collections.deque(maxlen=MAX_REPLAY)
        self.tokens = 0  # spent by its prompts (their whole trees)
        self.running: asyncio.Task[Any] | None = None
        self.interrupt: Callable[[], None] | None = None  # set once the run is composed
        self.log = log.bind(session=sid)
        self.recorder: TrajectoryRecorder | None = None  # with --trajectories


class Agent:
    """The methods over `config` (the flags of `agentd acp`); `send` writes a frame."""

    def __init__(self, config: Config, send: Send, *, version: str,
                 trajectories: str | None = None) -> None:
        self.config = config
        self.trajectories = trajectories  # --trajectories DIR
        self.send = send
        self.version = version
        self.sessions: dict[str, Session] = {}
        self._methods: dict[str, tuple[type[Any], Callable[[Any], Any]]] = {
            "initialize": (S.InitializeParams, self.initialize),
            "session/new": (S.NewSessionParams, self.new_session),
            "session/load": (S.LoadSessionParams, self.load_session),
            "session/prompt": (S.PromptParams, self.prompt),
            "session/set_config_option": (S.SetConfigOptionParams, self.set_config_option),
            "session/set_model": (S.SetModelParams, self.set_model),
        }
        self._decoders = {m: msgspec.json.Decoder(tp) for m, (tp, _) in self._methods.items()}
        self._cancel_decoder = msgspec.json.Decoder(S.CancelParams)

    # --- dispatch ------------------------------------------------------------------

    async def request(self, method: str, params: Any) -> Any:
        """The result of one request, or RPCError."""
        entry = self._methods.get(method)
        if entry is None:
            raise RPCError(METHOD_NOT_FOUND, f"Method not found: {method[:100]} (agentd "
                           "speaks ACP v1: initialize, session/new, session/load, "
                           "session/prompt, session/cancel, session/set_config_option)",
                           side="local")
        typed = self._params(method, self._decoders[method], params)
        return await entry[1](typed)

    def notify(self, method: str, params: Any) -> None:
        if method == "session/cancel":
            try:
                typed = self._params(method, self._cancel_decoder, params)
            except RPCError as exc:
                log.warning("acp.cancel.invalid", error=exc.message)
                return
            self.cancel(typed.session_id)
        else:
            log.debug("acp.notification.ignored", method=method[:100])

    @staticmethod
    def _params(method: str, decoder: msgspec.json.Decoder[Any], raw: Any) -> Any:
        data = b"{}" if raw is msgspec.UNSET else raw
        return decode_peer(decoder.decode, data, lambda text: _invalid(
            f"Invalid params for {method}: {text}"))

    # --- initialize, sessions ------------------------------------------------------

    async def initialize(self, p: S.InitializeParams) -> S.InitializeResult:
        log.info("acp.initialize", client_version=p.protocol_version,
                 client=(p.client_info or {}).get("name"))
        return S.InitializeResult(
            S.PROTOCOL_VERSION,
            S.AgentCapabilities(True, S.PromptCapabilities(False, False, True),
                                S.McpCapabilities(True, True)),
            S.Implementation("agentd", self.version, "agentd"), [])

    def _declare(self, entries: list[S.McpServer]) -> list[ServerSpec]:
        return declared(entries, {s.name for s in self.config.mcp})

    @staticmethod
    def _check_cwd(cwd: str) -> None:
        if not os.path.isabs(cwd):
            raise _invalid(f"cwd {cwd[:200]!r}: must be an absolute path")

    async def new_session(self, p: S.NewSessionParams) -> S.NewSessionResult:
        self._check_cwd(p.cwd)
        servers = self._declare(p.mcp_servers)
        if len(self.sessions) >= MAX_SESSIONS:
            raise RPCError(INVALID_REQUEST, f"this agentd holds {MAX_SESSIONS} sessions, its "
                           "bound; start another `agentd acp` for more", side="local")
        session = Session(uuid.uuid4().hex, p.cwd, servers, self.config.model)
        if self.trajectories is not None:
            session.recorder = TrajectoryRecorder(session_id=session.id)
        self.sessions[session.id] = session
        session.log.info("acp.session.new", servers=[s.name for s in servers])
        return S.NewSessionResult(session.id, self._options(session))

    def _session(self, sid: str) -> Session:
        session = self.sessions.get(sid)
        if session is None:
            raise _invalid(f"unknown sessionId {sid[:100]!r}: agentd holds its sessions "
                           "while this process runs; start one with session/new")
        return session

    async def load_session(self, p: S.LoadSessionParams) -> S.LoadSessionResult:
        session = self._session(p.session_id)
        self._check_cwd(p.cwd)
        if session.running is not None:
            raise RPCError(INVALID_REQUEST, "a prompt is running in this session; load it "
                           "once the prompt has answered", side="local")
        session.servers = self._declare(p.mcp_servers)
        session.cwd = p.cwd
        session.log.info("acp.session.load", updates=len(session.replay),
                         servers=[s.name for s in session.servers])
        for update in list(session.replay):
            self.send_update(session.id, update)
        return S.LoadSessionResult(self._options(session))

    # --- the model -----------------------------------------------------------------

    def _options(self, session: Session) -> list[S.ConfigOption] | msgspec.UnsetType:
        """The model as a `select` config option (category `model`), when there is one."""
        if session.model is None:
            return msgspec.UNSET
        models = dict.fromkeys([m for m in (self.config.model, session.model) if m])
        return [S.ConfigOption("model", "Model", session.model,
                               [S.SelectOption(m, m) for m in models], "select", "model")]

    def _set_model(self, sid: str, value: str) -> Session:
        session = self._session(sid)
        if not value.strip() or len(value) > MODEL_NAME_MAX or not value.isprintable():
            raise _invalid(f"model {value[:80]!r}: expected a model name of at most "
                           f"{MODEL_NAME_MAX} printable characters")
        session.model = value
        session.log.info("acp.session.model", model=value)
        return session

    async def set_config_option(self, p: S.SetConfigOptionParams) -> S.SetConfigOptionResult:
        if p.config_id != "model" or not isinstance(p.value, str):
            raise _invalid(f"configId {p.config_id[:80]!r}: agentd's one session option is "
                           "\"model\" (a model name)")
        session = self._set_model(p.session_id, p.value)
        options = self._options(session)
        return S.SetConfigOptionResult(options if isinstance(options, list) else [])

    async def set_model(self, p: S.SetModelParams) -> S.Empty:
        self._set_model(p.session_id, p.model_id)
        return S.Empty()

    # --- prompts -------------------------------------------------------------------

    def send_update(self, sid: str, update: S.Update) -> None:
        self.send(Notification("session/update", S.SessionNotification(sid, update)))

    async def prompt(self, p: S.PromptParams) -> S.PromptResult:
        session = self._session(p.session_id)
        if session.running is not None:
            raise RPCError(INVALID_REQUEST, "a prompt is already running in this session; "
                           "wait for its answer or send session/cancel", side="local")
        instruction = prompt_text(p.prompt)
        session.replay.append(S.UserMessageChunk(S.text(instruction)))

        def emit(update: S.Update) -> None:
            session.replay.append(update)
            self.send_update(session.id, update)

        updates = Updates(emit, observation_bytes=self.config.observation_bytes)
        recorder = session.recorder
        if recorder is not None:
            recorder.model = session.model
        config = self._run_config(session, instruction)
        ctx_box: list[RunContext] = []
        prior = session.history

        async def setup(_stack: contextlib.AsyncExitStack, ctx: RunContext) -> None:
            ctx.prior = prior
            ctx_box.append(ctx)
            session.interrupt = ctx.interrupt

        run_id = new_run_id()
        session.log.info("acp.prompt.start", run_id=run_id, bytes=len(instruction),
                         turns_before=len(prior or ()))
        run = session.running = asyncio.create_task(
            execute(config, run_id=run_id, serve=False, signals=False,
                    tracer=updates if recorder is None else Tracers(updates, recorder),
                    extra=setup), name=f"agentd-acp-{session.id}")
        cancelled = False
        try:
            result, _code, state = await run
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the process is shutting down
            cancelled, result, state = True, None, (
                ctx_box[0].state if ctx_box else LoopState())
        finally:
            session.running = session.interrupt = None
        if ctx_box:
            ctx = ctx_box[0]
            session.tokens += ctx.spent() if ctx.spent is not None \
                else state.usage.total_tokens
        if state.messages:
            session.history = answered(state.messages)
        try:
            reason = self._stop_reason(result, state, config, updates, cancelled)
        finally:
            if recorder is not None:
                self._record(session, recorder, result, cancelled)
        session.log.info("acp.prompt.end", run_id=run_id, stop_reason=reason,
                         status=result.status if result is not None else "cancelled",
                         steps=state.steps)
        return S.PromptResult(reason)

    def _run_config(self, session: Session, instruction: str) -> Config:
        ceiling = self.config.token_ceiling
        return msgspec.structs.replace(
            self.config, instruction=instruction, mode="task",
            mcp=(*self.config.mcp, *session.servers), model=session.model,
            token_ceiling=None if ceiling is None else max(0, ceiling - session.tokens))

    @staticmethod
    def _stop_reason(result: RunResult | None, state: LoopState, config: Config,
                     updates: Updates, cancelled: bool) -> S.StopReason:
        if cancelled or result is None or result.status == "interrupted":
            return "cancelled"
        if result.status == "completed":
            return "refusal" if updates.finish_reason == "content_filter" else "end_turn"
        if result.status == "budget_exhausted":
            return "max_turn_requests" if state.steps >= config.max_steps else "max_tokens"
        if result.status == "deadline":
            return "max_turn_requests"
        failure = result.result if isinstance(result.result, dict) else {}
        raise RPCError(INTERNAL_ERROR, f"the run failed: {failure.get('error') or 'see the log'}",
                       {k: v for k, v in failure.items() if k in ("server", "fault")} or
                       msgspec.UNSET, side="local")

    def _record(self, session: Session, recorder: TrajectoryRecorder,
                result: RunResult | None, cancelled: bool) -> None:
        """The session's trajectory so far, rewritten whole; a file that cannot be
        written is an error line, never a different answer to the prompt."""
        assert self.trajectories is not None
        status = "cancelled" if cancelled or result is None else result.status
        failure = result.result.get("error") if result is not None and isinstance(
            result.result, dict) else None
        recorder.extra.pop("reason", None)
        recorder.end(status, reason=str(failure) if failure else None)
        path = sample_file(self.trajectories, session.id)
        try:
            write_document(path, recorder.dump())
        except OSError as exc:
            session.log.error("trajectory.write_failed", path=path,
                              error=exc.strerror or str(exc),
                              fix="agentd acp --trajectories: a writable directory")
            return
        session.log.info("trajectory.written", path=path, steps=len(recorder.steps))

    def cancel(self, sid: str) -> None:
        session = self.sessions.get(sid)
        if session is None or session.running is None:
            log.info("acp.cancel.idle", session=sid[:100])
            return
        session.log.info("acp.cancel")
        if session.interrupt is not None:
            session.interrupt()  # as a signal: the run drains and answers `interrupted`
        else:
            session.running.cancel()  # still composing: execute drains what it opened

    async def aclose(self) -> None:
        """End every running prompt (the client went away): each drains its tree."""
        running = [s.running for s in self.sessions.values() if s.running is not None]
        for sid in list(self.sessions):
            self.cancel(sid)
        if running:
            await asyncio.wait(running)


def prompt_text(blocks: list[S.ContentBlock]) -> str:
    """The instruction a prompt's blocks make: text as is, a resource link as its
    URI, an embedded text resource under its URI."""
    parts: list[str] = []
    for block in blocks:
        if block.type == "text" and isinstance(block.text, str):
            parts.append(block.text)
        elif block.type == "resource_link" and isinstance(block.uri, str):
            parts.append(f"[resource: {block.uri}]")
        elif block.type == "resource" and isinstance(block.resource, S.EmbeddedResource) \
                and isinstance(block.resource.text, str):
            parts.append(f"[resource: {block.resource.uri}]\n{block.resource.text}")
        else:
            raise _invalid(f"prompt block of type {block.type[:40]!r}: agentd reads text, "
                           "resource_link and text resources (promptCapabilities)")
    instruction = "\n\n".join(parts)
    if not instruction.strip():
        raise _invalid("the prompt holds no text")
    return instruction


def answered(messages: list[Message]) -> list[Message]:
    """The conversation with every tool call answered: a cancelled prompt can end
    between a model's tool calls and their results, which no gateway accepts next
    time; each unanswered call gets a result saying it was cancelled."""
    done = {m.tool_call_id for m in messages if m.role == "tool"}
    out: list[Message] = []
    unanswered: list[str] = []
    for m in messages:
        if m.role != "tool" and unanswered:
            out.extend(tool_result(cid, CANCELLED_NOTE) for cid in unanswered)
            unanswered = []
        out.append(m)
        if m.role == "assistant" and isinstance(m.tool_calls, list):
            unanswered = [c.id for c in m.tool_calls if c.id not in done]
    out.extend(tool_result(cid, CANCELLED_NOTE) for cid in unanswered)
    return out
