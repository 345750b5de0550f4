"""Composition of the tree: the provider, the Toolbox, the broker, the Supervisor.

The Supervisor (agentd.tree.supervisor) builds nothing of its own: whoever owns
it hands it its `Broker` (the tree's metered provider and the run's Toolbox,
agentd.tree.broker) and closes what it opened.  Three owners:

* a run (`start_supervisor`, from agentd.app.run): the root's own provider and
  Toolbox, already open, shared with the root's loop;
* the batch runner (agentd.batch.runner): its recording/replaying broker;
* `open_supervisor(config)`: a Supervisor on its own (the pool worker's tests,
  benchmarks), with a provider and a Toolbox built from its config.

The ledger: one per tree, the metered provider's (agentd.intelligence.ledger).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from agentd.config.model import Config
from agentd.intelligence import for_config
from agentd.intelligence.base import Intelligence
from agentd.intelligence.flow import FlowGate
from agentd.intelligence.ledger import Ledger, Metered
from agentd.journal.exchange import AnswerBounds
from agentd.journal.store import Journal
from agentd.mcp.client.rules.call_limits import tool_limits
from agentd.mcp.client.seams import AgentToolbox
from agentd.mcp.client.toolbox import Toolbox
from agentd.tree.broker import Broker
from agentd.tree.journaling import Journaling
from agentd.tree.registry import DEFAULT_TERMINAL_TTL
from agentd.tree.supervisor import SERVED, Supervisor

__all__ = ["metered_provider", "open_journaling", "open_supervisor", "open_toolbox",
           "start_supervisor"]


def open_toolbox(config: Config, run_id: str) -> Toolbox:
    """The run's Toolbox over every declared MCP server (enter it to connect)."""
    # a stale server: the reactive daemon reconnects with backoff; a task run
    # hands it to the fault policy (agentd.mcp.client.rules.faults)
    return Toolbox(config.mcp, run_id=run_id, init_timeout=config.init_timeout,
                   ping_interval=config.ping_interval, secrets_dir=config.secrets_dir,
                   reconnect_stale=config.mode == "reactive", tool_limits=tool_limits(config),
                   stream_bounds=config.stream_bounds)


def metered_provider(config: Config, provider: Intelligence, ceiling: int | None) -> Metered:
    """The tree's provider: one `Ledger` (refusing calls past `ceiling`, the tree's
    tokens) and one flow gate (`--max-inflight-intelligence`) over `provider`."""
    return Metered(provider, Ledger(ceiling), "0",
                   FlowGate(config.max_inflight_intelligence),
                   enforce_own=config.mode != "reactive")


async def start_supervisor(stack: contextlib.AsyncExitStack, config: Config, *,
                           run_id: str, provider: Metered,
                           toolbox: AgentToolbox | None) -> Supervisor:
    """The root's Supervisor on the run's own metered provider and Toolbox (one
    ledger and one flow gate for the tree: the root's calls and every subagent's)."""
    broker = Broker(intelligence=provider, toolbox=toolbox)
    journaling = None
    if config.journal is not None and config.serve is not None:
        journaling = open_journaling(config, SERVED, toolbox)
        stack.push_async_callback(journaling.aclose)  # after the Supervisor closed
    sup = await stack.enter_async_context(Supervisor(config, run_id=run_id, broker=broker,
                                                     ledger=provider.ledger,
                                                     journaling=journaling))
    if config.serve is not None:  # a worker: its instruction frames the runs it serves
        sup.framing = config.instruction
    if sup.durable is not None:  # what the last process on the journal left
        await sup.durable.resume(await sup.durable.journaling.journal.load(
            retention=DEFAULT_TERMINAL_TTL))
    return sup


def open_journaling(config: Config, under: str, toolbox: AgentToolbox | None) -> Journaling:
    """`--journal`: the directory taken (exit 2 if another process holds it) and the
    tree's side of it for the top runs under `under` (agentd.tree.journaling)."""
    assert config.journal is not None
    key = config.pool.key.encode() if config.pool is not None and config.pool.key else None
    journal = Journal.open(config.journal, key=key, run_bytes=config.journal_run_bytes)
    return Journaling(journal, under=under, bounds=AnswerBounds(
        completion=config.intelligence_max_bytes, observation=config.mcp_max_bytes),
        idempotent=toolbox.idempotent if toolbox is not None else lambda _name: False)


@contextlib.asynccontextmanager
async def open_supervisor(config: Config, **options: Any) -> AsyncIterator[Supervisor]:
    """A Supervisor on its own: a provider and (with MCP servers) a Toolbox built from
    `config`, closed with it; `options` are the Supervisor's (scope, spawn, run_id,
    terminal_ttl, keep_terminal, max_frame)."""
    ledger = Ledger(config.token_ceiling)

    def provider() -> Metered:  # built at the first brokered call: most runs need none
        return Metered(for_config(config), ledger, "0",
                       FlowGate(config.max_inflight_intelligence))

    async with contextlib.AsyncExitStack() as stack:
        toolbox = None
        if config.mcp:
            toolbox = await stack.enter_async_context(Toolbox(
                config.mcp, run_id=options.get("run_id", ""), init_timeout=config.init_timeout,
                ping_interval=config.ping_interval, secrets_dir=config.secrets_dir,
                tool_limits=tool_limits(config)))
        broker = Broker(intelligence=provider, toolbox=toolbox)
        stack.push_async_callback(broker.aclose)
        yield await stack.enter_async_context(Supervisor(config, broker=broker, ledger=ledger,
                                                         **options))
