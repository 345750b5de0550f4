"""What the model receives per request for one task, and how much of each
request repeats the previous one as a prefix (provider-side prompt caching).

The task: two MCP servers (server-everything, the official npm server, and the
SDK server of tests/sdk_servers.py), three turns (a call to each, then the
answer), through the real `agentd` CLI against the OpenAI-shaped gateway of
tests/gateway.py, which records every body. Extra arguments go to agentd
(`--self-tools none`). One JSON line per turn: the body's bytes, the tools',
the system message's, and the share of the request (tools, then messages, as a
provider renders them) that the previous request's rendering already held.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from agentd_proc import agentd_env, run_agentd  # noqa: E402
from gateway import Gateway, Reply  # noqa: E402
from peers import everything_peer, python_peer  # noqa: E402


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _common(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False))
                 if x != y), min(len(a), len(b)))


async def main(extra: list[str]) -> None:
    with everything_peer() as everything, python_peer("sdk_servers.py") as sdk:
        script = [Reply.tools(("everything__echo", {"message": "hi"}, "c1")),
                  Reply.tools(("sdk__echo", {"text": "hello"}, "c2")),
                  Reply.text("done")]
        async with Gateway(script) as gw:
            done = await run_agentd(
                shutil.which("agentd") or "agentd",
                ["--instruction", "do the task", "--intelligence", gw.url, "--model", "m",
                 "--mcp", f"everything={everything.url}", "--mcp", f"sdk={sdk.url}", *extra],
                env=agentd_env())
    if done.rc != 0:
        raise SystemExit(done.stderr)
    before = None
    for turn, body in enumerate(gw.bodies, 1):
        rendered = _compact(body.get("tools", [])) + _compact(body["messages"])
        repeated = _common(before, rendered) if before else 0
        print(_compact({"bench": "prompt", "args": " ".join(extra), "turn": turn,
                        "body_bytes": len(_compact(body)),
                        "tools_bytes": len(_compact(body.get("tools", []))),
                        "tools": len(body.get("tools", [])),
                        "system_bytes": len(body["messages"][0]["content"].encode()),
                        "prefix_repeated": round(repeated / len(rendered), 3)}))
        before = rendered


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
