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
`require_proposal=False`, `proposal_checked` with inspect's default, which
cannot match agentd's fenced descriptions (docs/batch.md).
"""

from __future__ import annotations

import json
import re
import socket
import sys

from inspect_ai import Task, task
from inspect_ai.agent import (
    Agent,
    AgentState,
    BridgedToolsSpec,
    agent,
    sandbox_agent_bridge,
)
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessage, GenerateConfig, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, ToolChoice, ToolInfo, tool
from inspect_ai.util import sandbox, store

MAX_STEPS = 4
SERVER = "host"


def _free_port() -> int:
    """A free loopback port (bound then released: the local sandbox shares the host)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@tool
def add() -> Tool:
    async def execute(a: int, b: int) -> str:
        """Add two integers on the host and return their sum as text.

        Args:
          a: The first addend.
          b: The second addend.
        """
        calls = store().get("add_calls", [])
        store().set("add_calls", [*calls, {"a": a, "b": b}])
        return str(a + b)

    return execute


def scripted_model(
    input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice,
    config: GenerateConfig,
) -> ModelOutput:
    """Deterministic stand-in for a model: call `…__add` with the question's numbers, then
    answer with the number the tool returned. It reports its own usage so mockllm does not
    download tiktoken's encoding (the run stays offline)."""
    last = input[-1]
    add_name = next((t.name for t in tools if t.name.endswith("__add")), None)
    if last.role == "tool":
        numbers = re.findall(r"-?\d+", last.text)
        out = ModelOutput.from_content("mockllm/model", f"The sum is {numbers[-1]}.")
    elif add_name is None:
        out = ModelOutput.from_content("mockllm/model", "no add tool was offered")
    else:
        question = next(m.text for m in reversed(input) if m.role == "user")
        a, b = (int(n) for n in re.findall(r"-?\d+", question)[:2])
        out = ModelOutput.for_tool_call("mockllm/model", add_name, {"a": a, "b": b})
    out.usage = ModelUsage(input_tokens=len(input), output_tokens=1,
                           total_tokens=len(input) + 1)
    return out


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
            if not run.stdout.strip():
                raise RuntimeError(f"agentd exited {run.returncode}: {run.stderr[-2000:]}")
            out = json.loads(run.stdout)
            store().set("agentd", out)
            result = out["result"]
            bridge.state.output.completion = (
                result if isinstance(result, str) else json.dumps(result))
            return bridge.state

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
