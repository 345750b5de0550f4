"""`agentd demo`: the embedded default, run as an operator would (the console script)."""

from __future__ import annotations

import subprocess

from agentd_proc import agentd_env, run_agentd


async def test_demo_runs_offline_and_prints_trace_and_result(agentd_bin) -> None:
    # Offline: no gateway, no proxy, nothing but loopback.
    env = agentd_env(http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9",
                     no_proxy="")
    env.pop("AGENTD_LOG_LEVEL", None)
    done = await run_agentd(agentd_bin, ["demo"], env=env, limit=60)
    assert done.rc == 0, done.stderr
    r = done.result  # exactly one object on stdout
    assert r["status"] == "completed" and r["partial"] is False and r["steps"] == 7
    assert r["result"] == {"sum": 42, "half": 21, "lemons": 42,
                           "divide_by_zero": "refused by the tool",
                           "subagent": "3 notes: inbox, shopping, todo",
                           "saved": "notes://note/answer"}
    trace = done.stderr
    for expected in (
        "server notes", "server calc",
        "→ notes__list_notes", "→ calc__add",  # tools listed and called, two at once
        "→ agentd__read_resource {\"uri\":\"notes://note/shopping\"}",
        "← agentd__read_resource  ok",
        "← calc__divide  isError",  # the tool's error came back as an observation
        "cannot divide by zero",
        "→ calc__divide {\"a\":42,\"b\":2}",  # ... and the agent adapted
        "← agentd__subagent_spawn  ok",  # a real child process answered
        "\"status\":\"completed\"",
        "result: status=completed steps=7 exit=0",
        # act 2: a reactive worker serving its self-MCP, driven by a parent agentd
        "[worker]   · Woken: the inbox changed",
        "[worker]   ← notes__add_note  ok",
        "[parent]   ← worker__subagent_spawn  ok",
        "[parent]   ← worker__subagent_spawn  isError",
        "spawn refused: tool_scope widens",
        "[parent] result: status=completed exit=0",
        "notifications/resources/updated agent://subagent/served.",
        "\"status\":\"completed\",\"done\":true",
        "[worker] stopped: status=interrupted exit=130",
    ):
        assert expected in trace, f"{expected!r} not in the trace:\n{trace}"
    assert trace.index("isError") < trace.index('"a":42,"b":2')
    assert "act failed" not in trace


def test_demo_help_explains(agentd_bin) -> None:
    out = subprocess.run([agentd_bin, "demo", "--help"], capture_output=True, text=True,
                         timeout=30, env=agentd_env())
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "offline" in text and "playback" in text
