"""An inspect_ai task whose host tool reaches agentd through inspect's own bridged MCP server.

Run by tests/e2e/test_inspect_bridge.py with the inspect venv's python
(tests/support/inspect_peer.py builds it): `inspect eval` of this file, not an
import (inspect_ai is not a dependency of agentd or of its suite's interpreter).

Adapted from examples/inspect_agentd.py, with the MCP server swapped for
inspect's: the task defines a host-side Python tool `add`, and
`sandbox_agent_bridge(bridged_tools=[BridgedToolsSpec(name="host", ...)])`
serves it inside the `local` sandbox as an MCP server at
`http://localhost:<bridge port>/mcp/host` (inspect's compiled `model_proxy`
binary speaks the MCP side; each `tools/call` is executed on the host by the
bridge service). agentd runs in the sandbox with `--mcp host=<that URL>` and
`--intelligence` at the same proxy's OpenAI endpoint; the scripted mockllm
proposes the `host__add` call agentd offers it, agentd calls the tool through
inspect's server, and the model answers with the result. The store keeps
agentd's stdout object (`agentd`), its stderr (`agentd_stderr`), the server's
URL (`mcp_url`) and the arguments the host tool ran with (`add_calls`).

Two tasks, one per setting of inspect's proposal check (a host tool runs only
for a call the bridge matched to a model proposal by the tool's description as
the agent declared it): `proposal_exempt` serves the tool with
`require_proposal=False`, `proposal_checked` with inspect's default, which finds
the served description behind agentd's mark (docs/harnesses.md, "inspect_swe").
"""

from __future__ import annotations

import sys
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.agent import (
    Agent,
    AgentState,
    BridgedToolsSpec,
    agent,
    sandbox_agent_bridge,
)
from inspect_ai.dataset import Sample
from inspect_ai.model import get_model
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, tool
from inspect_ai.util import sandbox, store

# the example's scripted model (call `…__add` with the question's numbers, then answer
# with the tool's result, reporting its own usage so the run stays offline) and its
# port picker and how it turns agentd's stdout into the completion, reused so the
# example's pieces are exercised too
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from inspect_agentd import _free_port, completed, scripted_model

MAX_STEPS = 4
SERVER = "host"


@tool
def add() -> Tool:
    async def execute(a: int, b: int) -> str:
        """Add two integers on the host machine and return their sum, written as decimal text.

        Args:
          a: The first addend.
          b: The second addend.
        """
        calls = store().get("add_calls", [])
        store().set("add_calls", [*calls, {"a": a, "b": b}])
        return str(a + b)

    return execute


@agent
def agentd_agent(require_proposal: bool, max_steps: int = MAX_STEPS) -> Agent:
    """Run agentd in the sandbox; its model and its `host` MCP server are inspect's bridge."""

    async def execute(state: AgentState) -> AgentState:
        port = _free_port()
        async with sandbox_agent_bridge(
                state, port=port,
                bridged_tools=[BridgedToolsSpec(
                    name=SERVER, tools=[add()],
                    require_proposal=require_proposal)]) as bridge:
            (config,) = bridge.mcp_server_configs
            run = await sandbox().exec(
                [sys.executable, "-m", "agentd",
                 "--instruction", state.messages[-1].text,
                 "--intelligence", f"http://127.0.0.1:{port}/v1",
                 "--model", "inspect",
                 "--mcp", f"{SERVER}={config.url}",
                 "--max-steps", str(max_steps),
                 "--log-format", "json", "--log-level", "info"])
            store().set("agentd_stderr", run.stderr)
            store().set("mcp_url", config.url)
            return completed(bridge.state, run)

    return execute


def _task(require_proposal: bool) -> Task:
    return Task(
        dataset=[Sample(input="What is 17 + 25?", target="42")],
        solver=agentd_agent(require_proposal),
        scorer=includes(),
        sandbox="local",
        model=get_model("mockllm/model", custom_outputs=scripted_model),
    )


@task
def proposal_exempt() -> Task:
    """The host tool served with `require_proposal=False`: any `tools/call` runs it."""
    return _task(require_proposal=False)


@task
def proposal_checked() -> Task:
    """inspect's default: the host tool runs only for a call it matched to a proposal."""
    return _task(require_proposal=True)
