"""`agentd top`, driven in a pseudo-terminal (pexpect) against a worker whose
served run is three levels deep."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess

from agentd_proc import agentd_env
from obs_worker import TOKEN, spawn_served, start_worker, write_book
from peers import free_port, require_modules

# ------------------------------------------------------------------ agentd top


def test_top_age_is_a_handles_age_a_finished_one_says_how_long_it_ran() -> None:
    """A handle that ran 2 s and ended 58 s ago is 60 s old: AGE says 1m00s and
    its status `completed in 2.0s` (the row used to give its run time as age)."""
    from agentd.cli.top import rows
    from agentd.tree.child_run import ChildRun

    run = ChildRun("0.1", "0", frozenset(), "sync", None)
    run.spawned_at, run.finished_at = 100.0, 102.0
    run.state.status = "completed"
    row = run.row(160.0)
    assert (row["age_ms"], row["ran_ms"]) == (60_000, 2_000)
    live = ChildRun("0.2", "0", frozenset(), "sync", None)
    live.spawned_at = 150.0
    assert "ran_ms" not in live.row(160.0) and live.row(160.0)["age_ms"] == 10_000
    (done, running) = rows({"tree": [row, live.row(160.0)]})
    assert done[1] == "completed in 2.0s" and done[5] == "1m00s"
    assert running[5] == "10.0s" and " in " not in running[1]

THREE_LEVELS = [
    {"name": "level3", "match": "[level3]", "turns": [{"delay": 60, "content": "c done"}]},
    {"name": "level2", "match": "[level2]", "turns": [
        {"tool_calls": [{"name": "agentd__subagent_spawn",
                         "arguments": {"instruction": "[level3] wait"}}]},
        {"content": "b done"}]},
    {"name": "level1", "match": "[level1]", "turns": [
        {"tool_calls": [{"name": "agentd__subagent_spawn",
                         "arguments": {"instruction": "[level2] go"}}]},
        {"content": "a done"}]},
    {"name": "worker", "turns": [{"content": "idle"}]},
]


async def test_top_in_a_terminal_shows_a_three_level_tree(agentd_bin, tmp_path) -> None:
    """`agentd top URL --bearer` in a pseudo-terminal: the served run and its two
    levels of subagents, running, each with its depth and last event; Ctrl-C quits."""
    require_modules("pexpect", "rich")
    import pexpect

    book = write_book(tmp_path, THREE_LEVELS)
    port = free_port()
    worker = await start_worker(agentd_bin, book, port)
    url = f"http://127.0.0.1:{port}"
    try:
        await worker.wait_for_event("reactive.ready")
        await spawn_served(url + "/mcp", "[level1] start", wait=False)
        await worker.wait_for_event("subagent.spawn", handle="served.1.1.1")

        def drive() -> tuple[str, int | None]:
            child = pexpect.spawn(agentd_bin, ["top", url, "--interval", "0.5"],
                                  env={**agentd_env(AGENTD_BEARER=TOKEN), "TERM": "xterm",
                                       "COLUMNS": "140", "LINES": "40"},
                                  dimensions=(40, 140), encoding="utf-8", timeout=60)
            try:
                child.expect(r"served\.1\.1\.1")
                screen = child.before + child.after
                child.expect("step 1: thinking")  # the deepest run's last event
                screen += child.before + child.after
                child.sendcontrol("c")
                child.expect(pexpect.EOF)
            finally:
                child.close()
            return screen, child.exitstatus

        screen, code = await asyncio.to_thread(drive)
        assert code == 0
        screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)  # colours, cursor moves
        assert re.search(r"served\.1\.1\.1\s+running\s+4\s", screen), screen
        assert "served.1 " in screen and "served.1.1 " in screen
        assert "HANDLE" in screen and "LAST EVENT" in screen
        assert TOKEN not in screen

        # --once: one plain frame, the same rows; a wrong bearer is exit 6, no token shown
        once = await asyncio.to_thread(
            subprocess.run, [agentd_bin, "top", url, "--once"], capture_output=True,
            text=True, timeout=60, env=agentd_env(AGENTD_BEARER=TOKEN))
        assert once.returncode == 0, once.stderr
        lines = once.stdout.splitlines()
        assert any(ln.split()[:3] == ["served.1.1.1", "running", "4"] for ln in lines)
        bad = await asyncio.to_thread(
            subprocess.run, [agentd_bin, "top", url, "--once", "--bearer", "wrong-token"],
            capture_output=True, text=True, timeout=60)
        assert bad.returncode == 6 and "wrong-token" not in bad.stderr + bad.stdout
    finally:
        worker.signal(signal.SIGTERM)
        done = await worker.done()
    assert done.rc == 130, done.stderr


def test_top_usage_errors(agentd_bin) -> None:
    for argv, needle in ((["top", "ftp://x"], "expected http(s)://host:port"),
                         (["top", "http://10.1.2.3:8443"], "must be https://"),
                         (["top", "https://h:1", "--client-cert", "c.pem"], "go together")):
        proc = subprocess.run([agentd_bin, *argv], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and needle in proc.stderr, (argv, proc.stderr)
