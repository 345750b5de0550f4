"""agentd as the agent of an inspect_ai task, through inspect's own extension points.

Not part of agentd's test suite (inspect_ai is heavy and not a dependency):
a documented, re-runnable example (docs/batch.md, "agentd inside an
inspect_ai task"). In a virtual environment of its own:

    python3.11 -m venv /tmp/inspect-venv
    /tmp/inspect-venv/bin/pip install inspect-ai openai -e /path/to/agentd
    /tmp/inspect-venv/bin/inspect eval examples/inspect_agentd.py \
        --model mockllm/model --max-samples 1

(`openai` is what inspect's bridge needs; `--max-samples 1` because with
the `local` sandbox concurrent samples race on inspect's injection of its
sandbox tools into the shared `/var/tmp`: docs/batch.md.)

What it wires, per sample, with no fork of inspect:

* `sandbox_agent_bridge()` serves an OpenAI-compatible endpoint in the
  sample's sandbox (the `local` sandbox here: no Docker needed) and routes
  every request to the task's model, so the model calls are inspect's own
  (recorded in the eval log as model events, counted in its usage).
* In the sandbox the agent starts an MCP server (agentd's `calc` demo server,
  `python -m agentd.demo.servers calc PORT`) and runs `agentd --instruction
  <the sample's input> --intelligence http://127.0.0.1:<bridge port>/v1
  --model inspect --mcp calc=…`; agentd's stdout object is kept in the
  sample's store (`agentd`), its `result` becomes the completion.
* inspect's `includes()` scorer judges that completion against the target.

The model is inspect's `mockllm/model` with a scripted `custom_outputs`
(offline and deterministic): it asks for the `calc__add` tool agentd offers
it, then answers with the tool's result — so the run goes model → agentd →
MCP tool → model → answer, and the scorer sees what agentd returned.

The `local` sandbox shares the host's network, so each sample's bridge and
MCP server get ports of their own (a fixed bridge port would collide between
concurrent samples); in a Docker sandbox the bridge's default port does.
"""

from __future__ import annotations

import json
import re
import socket
import sys
from typing import Any

from inspect_ai import Task, task
from inspect_ai.agent import Agent, AgentState, agent, sandbox_agent_bridge
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessage, GenerateConfig, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.tool import ToolChoice, ToolInfo
from inspect_ai.util import ExecCompleted, ExecResult, ExecStdout, sandbox, store

MAX_STEPS = 4


def _free_port() -> int:
    """A free loopback port (bound then released: the local sandbox shares the host)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scripted_model(
    input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice,
    config: GenerateConfig,
) -> ModelOutput:
    """A deterministic stand-in for a real model, served over inspect's bridge.

    First turn: call the `…__add` tool agentd offers with the two numbers of
    the question. After the tool's answer: reply with the number it returned.

    It reports its own usage (one token per message in, one out): mockllm
    otherwise counts tokens with tiktoken's o200k_base encoding, which it
    downloads on first use — the run would not be offline.
    """
    last = input[-1]
    add = next((t.name for t in tools if t.name.endswith("__add")), None)
    if last.role == "tool":
        numbers = re.findall(r"-?\d+(?:\.\d+)?", last.text)
        out = ModelOutput.from_content("mockllm/model", f"The sum is {numbers[-1]}.")
    elif add is None:
        out = ModelOutput.from_content("mockllm/model", "no add tool was offered")
    else:
        question = next(m.text for m in reversed(input) if m.role == "user")
        a, b = (int(n) for n in re.findall(r"-?\d+", question)[:2])
        out = ModelOutput.for_tool_call("mockllm/model", add, {"a": a, "b": b})
    out.usage = ModelUsage(input_tokens=len(input), output_tokens=1,
                           total_tokens=len(input) + 1)
    return out


async def _start_calc_server(port: int) -> Any:
    """Start agentd's calc demo MCP server in the sandbox; return once it listens."""
    proc = await sandbox().exec_remote(
        [sys.executable, "-m", "agentd.demo.servers", "calc", str(port)])
    async for event in proc:
        if isinstance(event, ExecStdout) and "listening" in event.data:
            return proc
        if isinstance(event, ExecCompleted):
            raise RuntimeError(f"calc MCP server exited {event.exit_code} before listening")
    raise RuntimeError("calc MCP server ended before listening")


def completed(state: AgentState, run: ExecResult[str]) -> AgentState:
    """`state` with agentd's `result` as its completion; agentd's stdout object kept
    in the sample's store (`agentd`), for the log to show its status, steps and usage."""
    if not run.stdout.strip():
        raise RuntimeError(f"agentd exited {run.returncode}: {run.stderr[-2000:]}")
    out = json.loads(run.stdout)
    store().set("agentd", out)
    result = out["result"]
    state.output.completion = result if isinstance(result, str) else json.dumps(result)
    return state


@agent
def agentd_agent(max_steps: int = MAX_STEPS) -> Agent:
    """Run agentd in the sample's sandbox, its model calls bridged to inspect's model."""

    async def execute(state: AgentState) -> AgentState:
        bridge_port, mcp_port = _free_port(), _free_port()
        async with sandbox_agent_bridge(state, port=bridge_port) as bridge:
            server = await _start_calc_server(mcp_port)
            try:
                run = await sandbox().exec(
                    [sys.executable, "-m", "agentd",
                     "--instruction", state.messages[-1].text,
                     "--intelligence", f"http://127.0.0.1:{bridge_port}/v1",
                     "--model", "inspect",
                     "--mcp", f"calc=http://127.0.0.1:{mcp_port}/mcp",
                     "--max-steps", str(max_steps),
                     "--log-level", "warning"])
            finally:
                await server.kill()
            return completed(bridge.state, run)

    return execute


@task
def agentd_calc() -> Task:
    """Two additions agentd does with an MCP tool; inspect scores its answers."""
    return Task(
        dataset=[Sample(input="What is 17 + 25?", target="42"),
                 Sample(input="What is 1000 + 337?", target="1337")],
        solver=agentd_agent(),
        scorer=includes(),
        sandbox="local",
        model=get_model("mockllm/model", custom_outputs=scripted_model),
    )
