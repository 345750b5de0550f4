"""A test-owned OpenAI-compatible gateway over HTTPS, answering by content (no script order).

    python tests/support/tls_gateway.py HOST PORT CERT KEY LOG

Used where agentd must run a command line exactly as printed, with
`--intelligence https://gw.example/v1` (tests/e2e/test_spec_section3.py): the test
points `gw.example` at this process and trusts its CA. Each request is one JSON
line in LOG (the model, the last message's role, the tool names offered).

Answers, decided by what the conversation holds:
* a conversation whose last message is a tool result: the final answer, quoting
  the first `LGTM-…` mark it finds in that result (or "no mark");
* an instruction containing `[review]` (a worker's subagent): `LGTM-S3-4471`;
* an instruction containing `Orchestrate` (spec §3's parent): a call of
  `reviewer__subagent_spawn {"instruction": "[review] review a.py"}`;
* anything else: "idle".
"""

from __future__ import annotations

import json
import re
import ssl
import sys

from aiohttp import web

MARK = "LGTM-S3-4471"


def reply(body: dict) -> dict:
    messages = body.get("messages") or []
    instruction = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        found = re.search(r"LGTM-[A-Z0-9-]+", str(last.get("content")))
        mark = found.group(0) if found else "no mark"
        return {"role": "assistant", "content": f"review collected: {mark}"}
    if "[review]" in instruction:
        return {"role": "assistant", "content": MARK}
    if "Orchestrate" in instruction:
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_spawn", "type": "function", "function": {
                "name": "reviewer__subagent_spawn",
                "arguments": json.dumps({"instruction": "[review] review a.py"})}}]}
    return {"role": "assistant", "content": "idle"}


def main(argv: list[str]) -> None:
    host, port, cert, key, log_path = argv[0], int(argv[1]), argv[2], argv[3], argv[4]

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        msg = reply(body)
        offered = [t["function"]["name"] for t in body.get("tools") or []]
        last_role = (body.get("messages") or [{}])[-1].get("role")
        line = json.dumps({"last_role": last_role, "tools": offered, "answer": msg}) + "\n"
        log_file.write(line)
        log_file.flush()
        return web.json_response({
            "id": "chatcmpl-s3", "object": "chat.completion", "model": body.get("model") or "t",
            "choices": [{"index": 0, "message": msg,
                         "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    log_file = open(log_path, "a")  # the process's whole life
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    print(f"listening {port}", flush=True)
    web.run_app(app, host=host, port=port, ssl_context=ctx, print=None, access_log=None)


if __name__ == "__main__":
    main(sys.argv[1:])
