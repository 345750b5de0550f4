"""The CLI surface: every exit-2 case through the real console script.

Each case must fail before any side effect: we also point it at a port that
nothing listens on and check that stdout stays empty and stderr is one line.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from agentd_proc import assert_log_only

from agentd import __version__

LOOPBACK = "http://127.0.0.1:9/mcp"  # discard port: a connection would fail, not hang


def run(agentd_bin: str, *args: str, **kw) -> subprocess.CompletedProcess:
    """The run, its stderr checked: log lines (or the usage line) only."""
    proc = subprocess.run([agentd_bin, *args], capture_output=True, text=True, timeout=30, **kw)
    assert_log_only(proc.stderr)
    return proc


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--instruction", "x", "--mcp", f"={LOOPBACK}"], "name is empty"),
        (["--instruction", "x", "--mcp", f"a={LOOPBACK}", "--mcp", f"a={LOOPBACK}"], "duplicate"),
        (["--instruction", "x", "--mcp", "fs"], "name=<endpoint>"),
        (["--instruction", "x", "--mcp", "fs=http://example.com/mcp"], "loopback"),
        (["--instruction", "x", "--mcp", "fs=ftp://127.0.0.1/mcp"], "https://"),
        (["--instruction", "x", "--mcp", "fs=http://10.0.0.1/mcp"], "loopback"),
        (["--instruction", "x", "--mode", "reactive"], "--subscribe"),
        (["--instruction", "x", "--mode", "sometimes"], "--mode"),
        (["--instruction", "x", "--mode", "reactive", "--subscribe", "file:///{id}"], "template"),
        (["--instruction", "x", "--serve-mcp", "http://0.0.0.0:8443"], "non-loopback"),
        (["--instruction", "x", "--serve-mcp", "https://0.0.0.0:8443"], "--serve-cert"),
        (["--instruction", "x", "--serve-mcp", "https://127.0.0.1:8443",
          "--serve-cert", "/etc/hostname"], "go together"),
        (["--intelligence", "playback:/dev/null"], "--instruction"),
        (["--instruction", "x", "--config", "/nonexistent/agentd.toml"], "--config"),
        (["--instruction", "x", "--max-depth", "0"], "--max-depth"),
        (["--instruction", "x", "--tool-idle-timeout", "-1"], "--tool-idle-timeout"),
        (["--instruction", "x", "--tool-timeout", "-5"], "--tool-timeout"),
        (["--instruction", "x", "--spawn", "vfork"], "--spawn"),
        (["--instruction", "x", "--log-format", "xml"], "--log-format"),
        (["--no-such-flag"], "no-such-flag"),
    ],
)
def test_usage_errors_exit_2_with_one_line(agentd_bin, args, needle):
    proc = run(agentd_bin, *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("agentd: error: ")
    assert needle in lines[0]


def test_invalid_config_file(agentd_bin, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("mcp_servers = [ {name = 'fs' ")
    proc = run(agentd_bin, "--instruction", "x", "--config", str(bad))
    assert proc.returncode == 2
    assert "invalid TOML" in proc.stderr

    wrong = tmp_path / "wrong.toml"
    wrong.write_text("[[mcp_servers]]\nname = 'fs'\nurl = 'http://example.com/mcp'\n")
    proc = run(agentd_bin, "--instruction", "x", "--config", str(wrong))
    assert proc.returncode == 2
    assert "loopback" in proc.stderr

    unknown = tmp_path / "unknown.toml"
    unknown.write_text("colour = 'blue'\n")
    proc = run(agentd_bin, "--instruction", "x", "--config", str(unknown))
    assert proc.returncode == 2
    assert "colour" in proc.stderr


def test_flag_sets_the_endpoint_of_a_config_file_server(agentd_bin, tmp_path):
    # file below flags: --mcp fs=<url> sets the endpoint of the file's `fs`, which
    # keeps its headers (spec §3's parent line names the worker by flag alone)
    good = tmp_path / "good.toml"
    good.write_text("[[mcp_servers]]\nname = 'fs'\nurl = 'http://127.0.0.1:9/mcp'\n"
                    "headers = { Authorization = 'Bearer {{secret:FS_TOKEN}}' }\n")
    proc = run(agentd_bin, "--instruction", "x", "--intelligence", "https://gw.invalid/v1",
               "--config", str(good), "--mcp", "fs=http://127.0.0.1:1/other")
    assert proc.returncode == 2 and "FS_TOKEN" in proc.stderr  # the file's header is kept
    proc = run(agentd_bin, "--instruction", "x", "--intelligence", "https://gw.invalid/v1",
               "--model", "m", "--config", str(good), "--mcp", "fs=http://127.0.0.1:1/other",
               env={**os.environ, "AGENTD_SECRET_FS_TOKEN": "tok-fs-0b7d"})
    assert proc.returncode == 6, proc.stderr
    failed = [ln for ln in proc.stderr.splitlines() if '"mcp.server.failed"' in ln]
    assert failed and "127.0.0.1:1" in failed[0] and "127.0.0.1:9" not in failed[0]
    assert "tok-fs-0b7d" not in proc.stderr


def test_version(agentd_bin):
    proc = run(agentd_bin, "--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"agentd {__version__}"


def test_help_groups_flags_and_lists_exit_codes(agentd_bin):
    proc = run(agentd_bin, "--help")
    assert proc.returncode == 0
    out = proc.stdout
    for heading in ("TOOLS / MCP:", "SERVE:", "BUDGETS:", "SUBAGENTS:", "REACTIVE:"):
        assert heading in out
    for flag in ("--instruction", "--intelligence", "--mcp", "--serve-mcp", "--serve-cert",
                 "--serve-key", "--serve-client-ca", "--serve-bearer", "--mode", "--subscribe",
                 "--max-depth", "--drain-timeout", "--config", "--model", "--max-steps",
                 "--deadline", "--max-children", "--max-subagents", "--token-ceiling",
                 "--init-timeout", "--ping-interval", "--log-format", "--version"):
        assert flag in out
    tools_section = out.split("TOOLS / MCP:")[1].split("\n\n")[0]
    assert "--mcp name=<endpoint>" in tools_section
    assert "declare a remote MCP server" in tools_section
    assert "130" in out and "a required MCP server failed its handshake" in out


@pytest.mark.parametrize("command", [(), ("batch",), ("acp",), ("top",)])
def test_every_flag_of_help_is_in_the_cli_page(agentd_bin, command):
    # --help and docs/cli.md must agree: a flag --help lists and the page does not
    # name (`--flag`, in a table row or a synopsis) is undocumented
    out = run(agentd_bin, *command, "--help").stdout
    flags = set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", out, re.M)) - {"--help"}
    assert len(flags) > 3, out
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    missing = sorted(f for f in flags if not re.search(f"`{re.escape(f)}[ `/=]", page))
    assert missing == []


def test_python_dash_m_is_the_same_cli(python):
    proc = subprocess.run([python, "-m", "agentd", "--mcp", "=x"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.startswith("agentd: error: ")


def test_serve_bearer_never_echoed(agentd_bin):
    secret = "s3cr3t-bearer-value-123"
    proc = run(agentd_bin, "--instruction", "x", "--serve-mcp", "http://0.0.0.0:8443",
               "--serve-bearer", secret, "--mode", "nonsense")
    assert proc.returncode == 2
    assert secret not in proc.stderr + proc.stdout


def test_reserved_server_name(agentd_bin):
    proc = run(agentd_bin, "--instruction", "x", "--mcp", f"agentd={LOOPBACK}")
    assert proc.returncode == 2
    assert "reserved" in proc.stderr


@pytest.mark.parametrize("args,needle", [
    (["--instruction", "x"], "--intelligence is required"),
    (["--instruction", "x", "--intelligence", "ftp://gw/v1"], "--intelligence 'ftp://gw/v1'"),
    (["--instruction", "x", "--intelligence", "playback:/nonexistent/book.json"],
     "/nonexistent/book.json"),
    (["--instruction", "x", "--intelligence", "playback:/nonexistent/book.json",
      "--subscribe", "mem://watched"], "--subscribe needs --mode reactive"),
])
def test_intelligence_and_subscribe_usage_errors_are_one_line(agentd_bin, tmp_path, args,
                                                              needle):
    proc = run(agentd_bin, *args, "--serve-mcp", "http://127.0.0.1:1", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentd: error: ") and needle in lines[0]
    assert list(tmp_path.iterdir()) == []  # before any side effect
