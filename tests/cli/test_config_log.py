"""Config merging, secret resolution and the log/stdout contracts."""

from __future__ import annotations

import io
import os

import orjson
import pytest

from agentd import log as agentd_log
from agentd.cli.flags import config_from_flags
from agentd.config.build import build
from agentd.config.endpoints import parse_mcp_flag, resolve_headers
from agentd.config.model import ServerSpec
from agentd.errors import ConfigError
from agentd.output import RunResult, Usage, print_result


def test_config_is_frozen_with_documented_defaults():
    config = build({"instruction": "x"})
    assert (config.max_depth, config.max_children, config.max_subagents) == (4, 16, 256)
    assert (config.init_timeout, config.ping_interval, config.drain_timeout) == (10.0, 30.0, 25.0)
    with pytest.raises(AttributeError):
        config.max_depth = 9  # type: ignore[misc]


def test_file_then_flags(tmp_path):
    path = tmp_path / "agentd.toml"
    path.write_text(
        "max_steps = 7\nmodel = 'from-file'\n"
        "[[mcp_servers]]\nname = 'fs'\nurl = 'https://fs.example/mcp'\nrequired = false\n"
        "headers = { Authorization = 'Bearer {{secret:FS_TOKEN}}' }\n"
    )
    config = config_from_flags({"config_file": str(path), "instruction": "go", "model": "flag",
                                "mcp": ("web=http://localhost:8000/mcp",)})
    assert config.max_steps == 7
    assert config.model == "flag"
    assert [s.name for s in config.mcp] == ["fs", "web"]
    assert config.mcp[0].required is False
    # unresolved in the config: secrets are substituted at connect time only
    assert config.mcp[0].headers == {"Authorization": "Bearer {{secret:FS_TOKEN}}"}


def test_loopback_forms_accepted():
    for url in ("http://127.0.0.1:1/mcp", "http://127.3.4.5/mcp", "http://localhost:9/x",
                "http://[::1]:8080/mcp", "https://anything.example/mcp"):
        assert parse_mcp_flag(f"s={url}").url == url


def test_secret_from_env_and_file(tmp_path, monkeypatch):
    spec = ServerSpec(name="fs", url="https://x/mcp",
                      headers={"Authorization": "Bearer {{secret:TOK}}", "X-Plain": "v"})
    monkeypatch.setenv("AGENTD_SECRET_TOK", "env-value-1234")
    assert resolve_headers(spec, str(tmp_path)) == {
        "Authorization": "Bearer env-value-1234", "X-Plain": "v"}
    monkeypatch.delenv("AGENTD_SECRET_TOK")
    (tmp_path / "TOK").write_text("file-value-5678\n")
    assert resolve_headers(spec, str(tmp_path))["Authorization"] == "Bearer file-value-5678"
    (tmp_path / "TOK").unlink()
    with pytest.raises(ConfigError, match="TOK"):
        resolve_headers(spec, str(tmp_path))


def test_resolved_secret_never_reaches_logs_or_stdout(tmp_path, monkeypatch):
    err, out = io.StringIO(), io.StringIO()
    agentd_log.configure(stream=err, run_id="r1", fmt="json")
    try:
        monkeypatch.setenv("AGENTD_SECRET_API", "hunter2-very-secret")
        spec = ServerSpec(name="fs", url="https://x/mcp",
                          headers={"Authorization": "Bearer {{secret:API}}"})
        headers = resolve_headers(spec)
        # even a careless caller that logs the resolved header is redacted
        agentd_log.log.bind(server="fs").info("mcp.connect", headers=headers)
        agentd_log.log.error("mcp.error", detail=f"401 for {headers['Authorization']}")
        print_result(RunResult(run_id="r1", status="completed", partial=False,
                               result="done", steps=1, usage=Usage()), stream=out)
    finally:
        agentd_log.configure(stream=__import__("sys").stderr)
    assert "hunter2-very-secret" not in err.getvalue()
    assert "***" in err.getvalue()
    assert "hunter2" not in out.getvalue()


def test_log_line_shape_and_text_format():
    err = io.StringIO()
    agentd_log.configure(stream=err, run_id="run-9", fmt="json")
    try:
        agentd_log.log.bind(server="fs").info("mcp.handshake", version="2025-11-25")
        agentd_log.log.debug("invisible.at.info")
        agentd_log.configure(fmt="text")
        agentd_log.log.warning("tool.call", tool="fs__read")
    finally:
        agentd_log.configure(stream=__import__("sys").stderr, fmt="json")
    first, second = err.getvalue().splitlines()
    record = orjson.loads(first)
    assert list(record)[:4] == ["ts", "level", "event", "run_id"]
    assert record["event"] == "mcp.handshake" and record["run_id"] == "run-9"
    assert record["server"] == "fs" and record["version"] == "2025-11-25"
    assert "WARNING tool.call tool=fs__read" in second



def test_throttled_logs_at_the_level_it_names_then_drops(monkeypatch):
    """`log_bridge.throttled` logs through the bound logger at the level it is
    given (its context included) and drops lines past the burst; a window that
    never ends (no clock involved) keeps the drop deterministic."""
    from agentd import log_bridge

    monkeypatch.setattr(log_bridge, "_throttle", log_bridge.Throttle(period=1e9, burst=2))
    err = io.StringIO()
    agentd_log.configure(stream=err, fmt="json")
    try:
        bound = agentd_log.log.bind(peer="p1")
        log_bridge.throttled(bound, "warning", "http.limit", key="p1", limit="body")
        log_bridge.throttled(bound, "error", "http.limit", key="p1", limit="body")
        log_bridge.throttled(bound, "warning", "http.limit", key="p1", limit="body")
        log_bridge.throttled(bound, "debug", "http.other")  # under the level: not counted
    finally:
        agentd_log.configure(stream=__import__("sys").stderr)
    records = [orjson.loads(line) for line in err.getvalue().splitlines()]
    assert [(r["level"], r["event"], r["peer"], r["limit"]) for r in records] == [
        ("warning", "http.limit", "p1", "body"), ("error", "http.limit", "p1", "body")]

def test_result_object_shape():
    out = io.StringIO()
    print_result(RunResult(run_id="r", status="budget_exhausted", partial=True,
                           result={"k": 1}, steps=3, usage=Usage(1, 2, 3)), stream=out)
    line = out.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    obj = orjson.loads(line)
    assert list(obj) == ["run_id", "status", "partial", "result", "steps", "usage"]
    assert obj["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}


def test_log_level_is_a_value_never_published_through_the_environment(tmp_path, monkeypatch):
    """--log-level (or the file's log_level) lands on the Config, validated; the
    process environment is left alone (children get it in child/configure)."""
    monkeypatch.delenv("AGENTD_LOG_LEVEL", raising=False)
    config = config_from_flags({"instruction": "go", "log_level": " DEBUG "})
    assert config.log_level == "debug"
    assert "AGENTD_LOG_LEVEL" not in os.environ
    assert config_from_flags({"instruction": "go"}).log_level is None  # nobody asked
    path = tmp_path / "agentd.toml"
    path.write_text("log_level = 'warning'\n")
    assert config_from_flags({"config_file": str(path), "instruction": "go"}).log_level == \
        "warning"
    assert config_from_flags({"config_file": str(path), "instruction": "go",
                              "log_level": "error"}).log_level == "error"  # the flag wins
    with pytest.raises(ConfigError, match="--log-level 'loud'"):
        config_from_flags({"instruction": "go", "log_level": "loud"})
    path.write_text("log_level = 3\n")
    with pytest.raises(ConfigError, match="--log-level 3"):
        config_from_flags({"config_file": str(path), "instruction": "go"})
