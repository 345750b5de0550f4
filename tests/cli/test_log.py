"""The log's two forms: JSON lines for machines, one short text line per event for
people (summarised values, children flattened under their handle, the level in
colour on a terminal only), and nothing but log lines on stderr -- Python's
warnings and an unexpected exception included.  The terminal cases run on a
real pseudo-terminal (os.openpty, pexpect for the CLI)."""

from __future__ import annotations

import io
import json
import os
import sys
import warnings

import orjson
import pytest
from agentd_proc import ANSI, TEXT_LINE, agentd_env, assert_log_only, run_agentd
from tree_helpers import SPAWN_ONE

from agentd import log as agentd_log
from agentd.log_bridge import route_python
from agentd.tree.procs import child_record


@pytest.fixture
def restore_log():
    """The log as a test found it is not assumed: each starts with no run id (an
    earlier test may have set one) and leaves the default sink behind."""
    agentd_log.configure(run_id="")
    yield
    agentd_log.configure(stream=sys.stderr, fmt="auto", level="info", run_id="")


def lines_of(fmt: str, emit, **kw) -> list[str]:
    out = io.StringIO()
    agentd_log.configure(stream=out, fmt=fmt, **kw)
    emit()
    return out.getvalue().splitlines()


def test_text_summarises_long_values_json_keeps_them(restore_log):
    instructions = "Use these tools well. " * 100  # 2.1 KB
    tools = [{"name": f"t{i}", "description": "d" * 40} for i in range(12)]

    def emit():
        agentd_log.log.bind(server="everything").info(
            "mcp.handshake", instructions=instructions, tools=tools, servers=["a", "b"],
            capabilities={"tools": {}}, error="refused: " + "why " * 150)

    (text,) = lines_of("text", emit)
    assert TEXT_LINE.match(text) and "\x1b" not in text  # not a terminal: no colour
    assert " mcp.handshake server=everything instructions=2.1 KB tools=12 " in text
    assert 'servers=["a","b"] capabilities={"tools":{}}' in text
    # what a person acts on is kept (cut at TEXT_PROSE_MAX), on one line
    assert 'error="refused: why why' in text and text.endswith('…"')
    assert len(text) < 600
    (line,) = lines_of("json", emit)
    record = orjson.loads(line)
    assert record["instructions"] == instructions and record["tools"] == tools


def test_auto_is_text_with_colour_on_a_terminal_json_elsewhere(restore_log, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    master, slave = os.openpty()
    tty = open(slave, "w", encoding="utf-8")  # closed below
    try:
        agentd_log.configure(stream=tty, fmt="auto")
        agentd_log.log.warning("mcp.stale", misses=3)
        monkeypatch.setenv("NO_COLOR", "1")
        agentd_log.configure(stream=tty)  # decided again for the stream
        agentd_log.log.error("run.end", status="failed")
        seen = ""
        while seen.count("\n") < 2:  # both lines, however the pty splits them
            seen += os.read(master, 4096).decode()
    finally:
        tty.close()
        os.close(master)
    first, second = seen.replace("\r", "").splitlines()
    assert "\x1b[33mWARNING\x1b[0m mcp.stale misses=3" in first
    assert "\x1b" not in second and "ERROR   run.end status=failed" in second
    # the same setting on a file or pipe: JSON lines
    (piped,) = lines_of("auto", lambda: agentd_log.log.info("run.start", mode="task"))
    assert orjson.loads(piped)["event"] == "run.start"


def test_a_childs_lines_flatten_under_its_handle(restore_log):
    """The child's JSON line (and a grandchild's it relayed) become one line each
    with one timestamp and level; a child's raw text is kept under its handle."""
    own = json.dumps({"ts": 1.0, "level": "warning", "event": "intelligence.turn",
                      "run_id": "r", "step": 2})
    relayed = json.dumps({"ts": 2.0, "level": "info", "event": "subagent.stderr",
                          "run_id": "r", "handle": "0.1.1", "pid": 9, "line": own})
    assert child_record(own) == (None, json.loads(own))
    assert child_record(relayed) == ("0.1.1", json.loads(own))
    assert child_record("Traceback (most recent call last):") == (None, None)
    child = agentd_log.log.bind(handle="0.1", pid=8)

    def emit():
        for line in (own, relayed, "Traceback (most recent call last):"):
            handle, record = child_record(line)
            child.relay(line, handle=handle, record=record)

    a, b, c = lines_of("text", emit)
    assert a.endswith("WARNING 0.1 │ intelligence.turn step=2") and a.count(":") == 2
    assert b.endswith("WARNING 0.1.1 │ intelligence.turn step=2")
    assert c.endswith("INFO    0.1 │ Traceback (most recent call last):")
    # JSON: the line as the child wrote it, in subagent.stderr (unchanged)
    (j,) = lines_of("json", lambda: child.relay(own))
    assert orjson.loads(j) | {"ts": 0} == {"ts": 0, "level": "info", "event": "subagent.stderr",
                                           "run_id": "", "handle": "0.1", "pid": 8,
                                           "line": own}


def test_python_warnings_are_log_lines(restore_log, monkeypatch):
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    route_python()

    def emit():
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("coroutine 'x' was never awaited", RuntimeWarning, stacklevel=1)

    (line,) = lines_of("json", emit)
    record = orjson.loads(line)
    assert record["event"] == "python.warning" and record["level"] == "warning"
    assert record["category"] == "RuntimeWarning" and "never awaited" in record["message"]
    assert record["where"].startswith(__file__)


@pytest.mark.parametrize("level", ["info", "debug"])
def test_an_unexpected_exception_is_one_log_line_and_exit_1(restore_log, monkeypatch, level):
    """A bug past every handler: `run.crashed` (type and message) and exit 1; the
    traceback only at --log-level debug, as a field of its own line."""
    from agentd.cli import main as cli_main

    def boom(**_kw):
        raise RuntimeError("the bug")

    monkeypatch.setattr(cli_main.cli, "main", boom)
    out = io.StringIO()
    agentd_log.configure(stream=out, fmt="json", level=level)
    with pytest.raises(SystemExit) as ended:
        cli_main.main([])
    assert ended.value.code == 1
    records = [orjson.loads(ln) for ln in out.getvalue().splitlines()]
    assert records[0]["event"] == "run.crashed" and records[0]["level"] == "error"
    assert records[0]["error"] == "RuntimeError: the bug" and "--log-level debug" in records[0]["fix"]
    if level == "info":
        assert len(records) == 1 and "Traceback" not in out.getvalue()
    else:
        assert records[1]["event"] == "run.crashed.traceback"
        assert "RuntimeError: the bug" in records[1]["traceback"]


# ---------------------------------------------------------------- the real CLI


def test_a_run_on_a_terminal_logs_text_in_colour_children_flattened(agentd_bin, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(SPAWN_ONE))
    env = agentd_env(TERM="xterm")
    env.pop("NO_COLOR", None)
    child = pexpect.spawn(agentd_bin, ["--instruction", "orchestrate", "--intelligence",
                                       f"playback:{pb}", "--spawn", "exec"],
                          env=env, encoding="utf-8", timeout=90)
    child.expect(pexpect.EOF)
    seen = child.before
    child.close()
    assert child.exitstatus == 0, seen
    lines = [ln for ln in seen.replace("\r", "").splitlines() if ln.strip()]
    logs = [ln for ln in lines if not ln.startswith('{"run_id"')]  # stdout's result
    assert_log_only("\n".join(logs), form="text")
    assert any("\x1b[32mINFO   \x1b[0m run.start mode=task" in ln for ln in logs), seen
    plain = [ANSI.sub("", ln) for ln in logs]
    # the child's own lines, one timestamp and level, under its handle
    assert any(" INFO    0.1 │ run.end status=completed" in ln for ln in plain), seen
    assert not any("subagent.stderr" in ln or 'line="' in ln for ln in plain)


async def test_piped_the_default_is_json_and_text_has_no_colour(agentd_bin, tmp_path):
    pb = tmp_path / "pb.json"
    pb.write_text(json.dumps(SPAWN_ONE))
    argv = ["--instruction", "orchestrate", "--intelligence", f"playback:{pb}",
            "--spawn", "exec"]
    env = agentd_env(TERM="xterm")
    env.pop("NO_COLOR", None)
    default = await run_agentd(agentd_bin, argv, env=env)
    assert default.rc == 0, default.stderr
    assert_log_only(default.stderr, form="json")
    assert default.events("subagent.stderr")  # the child's lines relayed whole
    text = await run_agentd(agentd_bin, [*argv, "--log-format", "text"], env=env)
    assert text.rc == 0, text.stderr
    assert_log_only(text.stderr, form="text")
    assert "\x1b" not in text.stderr and " 0.1 │ run.end " in text.stderr
