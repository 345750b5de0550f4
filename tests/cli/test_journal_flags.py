"""The journal's configuration (issue 42): `--journal DIR` / `journal` and
`--journal-run-bytes N` / `journal_run_bytes`, on a run and on `agentd batch`.

What must hold: the flag and the file key give the same frozen config (an
absolute directory, never created by the check), nothing turns a journal on by
default (not `--state-dir`, not `$XDG_STATE_HOME`), and every bad value is exit 2
with one line naming the flag, before any side effect."""

from __future__ import annotations

import os
import subprocess

import pytest
from agentd_proc import assert_log_only

from agentd.cli.flags import config_from_flags
from agentd.config.model import DEFAULT_JOURNAL_RUN_BYTES, JOURNAL_RUN_BYTES_BOUNDS
from agentd.errors import ConfigError

SERVE = {"instruction": "x", "serve_mcp": "http://127.0.0.1:1"}


def run(agentd_bin: str, *args: str, cwd) -> subprocess.CompletedProcess:
    proc = subprocess.run([agentd_bin, *args], capture_output=True, text=True, timeout=30,
                          cwd=cwd)
    assert_log_only(proc.stderr)
    return proc


def test_flag_and_file_key_give_the_same_absolute_journal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    toml = tmp_path / "agentd.toml"
    toml.write_text('journal = "runs/j"\njournal_run_bytes = 2097152\n')
    from_file = config_from_flags({**SERVE, "config_file": str(toml)})
    from_flags = config_from_flags({**SERVE, "journal": "runs/j", "journal_run_bytes": 2097152})
    assert from_file.journal == from_flags.journal == str(tmp_path / "runs" / "j")
    assert from_file.journal_run_bytes == from_flags.journal_run_bytes == 2097152
    assert not (tmp_path / "runs").exists()  # created by the journal when it opens, not here
    # a flag overrides the file, as for every key
    over = config_from_flags({**SERVE, "config_file": str(toml), "journal": str(tmp_path / "k"),
                              "journal_run_bytes": JOURNAL_RUN_BYTES_BOUNDS[1]})
    assert (over.journal, over.journal_run_bytes) == (str(tmp_path / "k"),
                                                      JOURNAL_RUN_BYTES_BOUNDS[1])


def test_an_existing_directory_and_the_bounds_themselves_are_accepted(tmp_path):
    low, high = JOURNAL_RUN_BYTES_BOUNDS
    for size in (low, high):
        config = config_from_flags({**SERVE, "journal": str(tmp_path), "journal_run_bytes": size})
        assert (config.journal, config.journal_run_bytes) == (str(tmp_path), size)


def test_never_on_by_default_not_even_under_the_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("AGENTD_STATE_DIR", str(tmp_path / "state"))
    config = config_from_flags({**SERVE, "state_dir": str(tmp_path / "state")})
    assert config.journal is None
    assert config.journal_run_bytes == DEFAULT_JOURNAL_RUN_BYTES == 256 << 20
    with pytest.raises(AttributeError):
        config.journal = str(tmp_path)  # type: ignore[misc]


@pytest.mark.parametrize(("toml", "needle"), [
    ("journal = 5\n", "config key `journal`"),
    ('journal = ""\n', "config key `journal`"),
    ('journal = "j"\njournal_run_bytes = "big"\n', "--journal-run-bytes 'big'"),
    ('journal = "j"\njournal_run_bytes = true\n', "--journal-run-bytes True"),
    ('journal = "j"\njournal_run_bytes = 1048575\n', "config key `journal_run_bytes`"),
])
def test_bad_file_values_name_the_flag_and_the_key(tmp_path, monkeypatch, toml, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agentd.toml").write_text(toml)
    with pytest.raises(ConfigError) as info:
        config_from_flags({**SERVE, "config_file": "agentd.toml"})
    assert needle in str(info.value)


RUN = ("--instruction", "x", "--serve-mcp", "http://127.0.0.1:1")
BATCH = ("batch", "--tasks", "tasks.jsonl", "--out", "out.jsonl")


@pytest.mark.parametrize(("args", "needle"), [
    ((*RUN, "--journal", "afile"), "--journal afile: exists and is not a directory"),
    ((*RUN, "--journal", "dangling"), "--journal dangling: exists and is not a directory"),
    ((*RUN, "--journal", "j", "--journal-run-bytes", "1048575"),
     "--journal-run-bytes 1048575: must be 1048576 (1 MiB) to 17179869184 (16 GiB)"),
    ((*RUN, "--journal", "j", "--journal-run-bytes", "17179869185"), "--journal-run-bytes"),
    ((*RUN, "--journal-run-bytes", "2097152"), "--journal-run-bytes needs --journal"),
    (("--instruction", "x", "--journal", "j"), "--journal needs --serve-mcp"),
    (("--journal", "j", "acp"), "without --serve-mcp, --subscribe or --journal"),
    ((*BATCH, "--journal", "afile"), "--journal afile: exists and is not a directory"),
    (("--journal", "afile", *BATCH), "--journal afile: exists and is not a directory"),
    ((*BATCH, "--journal", "j", "--journal-run-bytes", "0"), "--journal-run-bytes 0"),
])
def test_bad_values_exit_2_naming_the_flag_before_any_side_effect(agentd_bin, tmp_path, args,
                                                                 needle):
    (tmp_path / "afile").write_text("")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    (tmp_path / "tasks.jsonl").write_text('{"id": "a", "instruction": "x"}\n')
    before = sorted(os.listdir(tmp_path))
    proc = run(agentd_bin, *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentd: error: "), proc.stderr
    assert needle in lines[0]
    assert sorted(os.listdir(tmp_path)) == before  # no journal, no results file


@pytest.mark.parametrize("command", [(), ("batch",)])
def test_help_lists_the_journal_flags(agentd_bin, tmp_path, command):
    out = run(agentd_bin, *command, "--help", cwd=tmp_path).stdout
    assert "--journal DIR" in out and "--journal-run-bytes N" in out
    words = " ".join(out.split())  # the help is wrapped at any space
    assert '"Durable runs"' in words and "memory only" in words
    if not command:  # the run's flag sits with the listener it journals
        assert "--journal DIR" in out.split("SERVE:")[1].split("POOL:")[0]
