"""A subagent's turns of the agent loop, composed inside the child.

Every child is brokered: its intelligence and its toolbox are the control
wire's (agentd.child.brokered), its subagent backend is the root's Supervisor
through the same wire (agentd.child.remote). So a child's composition is small
and lives here, not in the root's (agentd.app.run): no provider built from a
config, no MCP connection, no serving, no signal handlers (the child entry owns
the wire, the parent the kill ladder). What it keeps of the root's run is what
the parent and the logs see: the deadline and its drain (`--drain-timeout`),
the `agentd__*` self-tools (with `graph.run`, `a2a.delegate` through the root
when the scope has A2A peers, and the resource await tool), and the same
`run.*` log events.

`ChildLoop` is one per child process: a warm session's conversation stays on
it between turns, so nothing of a turn is kept in module state.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agentd.agent import graph
from agentd.agent.loop import Actions, Loop, LoopState, Outcome, Tracer, run_task
from agentd.agent.selftools import SelfTools
from agentd.child.brokered import BrokeredIntelligence, BrokeredToolbox
from agentd.child.control import ChildConfig, RunOutcome
from agentd.child.remote import RemoteBackend
from agentd.config.model import DEFAULT_MAX_SUBSCRIPTIONS
from agentd.errors import classify, leaf_error
from agentd.exitcodes import EXIT_BY_STATUS, ExitCode
from agentd.intelligence.base import Message, user
from agentd.log import log
from agentd.reactive.awaiting import await_resource_tool, watch_updates

__all__ = ["ChildLoop"]


class ChildLoop:
    """The agent loop of one child process, a turn at a time (`turn`)."""

    def __init__(self, cfg: ChildConfig, intelligence: BrokeredIntelligence,
                 toolbox: BrokeredToolbox, backend: RemoteBackend,
                 tracer: Tracer | None) -> None:
        self.cfg = cfg
        self.intelligence = intelligence
        self.toolbox = toolbox
        self.backend = backend
        self.tracer = tracer
        self.conversation: list[Message] | None = None  # a warm session's, between turns

    def _selftools(self) -> SelfTools:
        """The turn's `agentd__*` self-tools, as the root's run makes them."""
        cfg, toolbox = self.cfg, self.toolbox
        tools = SelfTools(resources=toolbox, backend=self.backend, caller=cfg.handle,
                          max_subscriptions=DEFAULT_MAX_SUBSCRIPTIONS)
        if toolbox.a2a_peers:  # the scope's A2A peers, each call through the root
            from agentd.agent.a2a_delegate import install

            install(tools, toolbox.a2a_peers, perform=toolbox.a2a_delegate)
        graph.install(tools, self.backend, cfg.handle)
        return tools

    async def turn(self, message: str, *, first: bool) -> RunOutcome:
        """One turn: `first` runs `message` as the instruction on a fresh
        conversation, else (a warm session's `child/send`) continues the last one.
        Cancelling it drains the turn first (in-flight calls are cancelled upstream),
        within `drain_timeout`."""
        cfg = self.cfg
        state = LoopState()
        prior = None if first else self.conversation
        loop = asyncio.get_running_loop()
        scope = asyncio.timeout_at(loop.time() + cfg.deadline if cfg.deadline else None)
        interrupted: list[bool] = []

        def interrupt() -> None:
            interrupted.append(True)
            if not scope.expired():
                scope.reschedule(loop.time())

        body = asyncio.create_task(self._body(message, prior, state, scope, interrupted),
                                   name=f"agentd-run-{cfg.handle}")
        hard: asyncio.Future[None] = loop.create_future()

        def drain_over() -> None:
            if not hard.done():
                hard.set_result(None)

        timer = None
        if cfg.deadline:  # a deadline exit drains within drain_timeout too
            timer = loop.call_later(cfg.deadline + cfg.drain_timeout, drain_over)
        try:
            either: set[asyncio.Future[Any]] = {body, hard}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # child/cancel
            interrupt()  # soft first: in-flight calls get notifications/cancelled
            await asyncio.wait({body}, timeout=cfg.drain_timeout)
            if not body.done():
                body.cancel()
                await asyncio.wait({body}, timeout=1.0)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if not body.done():
            log.error("run.drain.timeout", drain_timeout_s=cfg.drain_timeout)
            body.cancel()
            await asyncio.wait({body}, timeout=1.0)
        outcome = self._ended(body, hard, state)
        if cfg.mode == "warm" and state.messages:
            self.conversation = state.messages
        return outcome

    async def _body(self, message: str, prior: list[Message] | None, state: LoopState,
                    scope: asyncio.Timeout, interrupted: list[bool]) -> Outcome:
        cfg = self.cfg
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(self.intelligence.aclose)
            try:
                async with scope:
                    if interrupted:
                        raise TimeoutError
                    toolbox = await stack.enter_async_context(self.toolbox)
                    selftools = self._selftools()
                    async with watch_updates(toolbox) as waiters:
                        selftools.add(await_resource_tool(toolbox, waiters))
                        outcome = await self._loop(message, prior, state, selftools)
                    if selftools.subscriptions:
                        log.info("subscribe.unapplied", uris=selftools.subscriptions,
                                 reason="task mode: subscriptions apply in reactive mode")
                    return outcome
            except TimeoutError:
                if interrupted:
                    return Outcome(status="interrupted", partial=True,
                                   result=state.partial_result(), reason="signal")
                if not scope.expired():
                    raise
                log.warning("run.deadline", deadline_s=cfg.deadline, steps=state.steps)
                return Outcome(status="deadline", partial=True, result=state.partial_result(),
                               reason=f"deadline={cfg.deadline}s passed")

    async def _loop(self, message: str, prior: list[Message] | None, state: LoopState,
                    selftools: SelfTools) -> Outcome:
        cfg = self.cfg
        if prior is None:
            return await run_task(self.intelligence, self.toolbox, selftools,
                                  instruction=message, output_contract=cfg.output_contract,
                                  budgets=cfg.limits, state=state, tracer=self.tracer,
                                  framing=cfg.framing)
        prior.append(user(message))
        if self.tracer is not None:
            self.tracer.prompt(message)
        loop = Loop(self.intelligence, Actions(self.toolbox, selftools),
                    budgets=cfg.limits, state=state, tracer=self.tracer)
        return await loop.run(prior, output_contract=cfg.output_contract)

    def _ended(self, body: asyncio.Task[Outcome], hard: asyncio.Future[None],
               state: LoopState) -> RunOutcome:
        """The turn's answer, logged as the root logs its run's end."""
        def answer(status: str, partial: bool, result: Any) -> RunOutcome:
            return RunOutcome(status="cancelled" if status == "interrupted" else status,
                              partial=partial, result=result, steps=state.steps,
                              tokens=state.usage.total_tokens)

        if body.cancelled() and hard.done():
            log.warning("run.end", status="deadline", steps=state.steps,
                        exit_code=int(ExitCode.DEADLINE), reason="the drain overran")
            return answer("deadline", True, state.partial_result())
        if body.cancelled():
            log.error("run.cancelled", steps=state.steps)
            return answer("interrupted", True, state.partial_result())
        err = body.exception()
        if err is None:
            outcome = body.result()
            code = EXIT_BY_STATUS.get(outcome.status, ExitCode.FAILED)
            log.info("run.end", status=outcome.status, steps=state.steps, calls=state.calls,
                     total_tokens=state.usage.total_tokens,
                     tree_tokens=self.backend.tree_tokens, exit_code=int(code),
                     reason=outcome.reason or None)
            return answer(outcome.status, outcome.partial, outcome.result)
        leaf = leaf_error(err)
        code, event, text = classify(leaf)
        if code == ExitCode.FAILED:
            log.error(event, error=text, exc_type=type(leaf).__name__)
        else:
            log.error(event, error=text)
        return answer("failed", False, {"error": text})
