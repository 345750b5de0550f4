"""Shared helpers of the tree tests: playback scripts, /proc checks (polling: tests/support/waiting.py)."""

from __future__ import annotations

import compileall
import json
import os
from pathlib import Path

import agentd
from agentd.config.model import Config

PLAYBACK = {
    "playback": 1,
    "scripts": [
        {"name": "nested", "match": "spawn-child",
         "turns": [
             {"tool_calls": [{"name": "agentd__subagent_spawn",
                              "arguments": {"instruction": "leaf task"}}]},
             {"content": "{\"parent\": \"done\"}"}]},
        {"name": "widen", "match": "widen-scope",
         "turns": [
             {"tool_calls": [{"name": "agentd__subagent_spawn",
                              "arguments": {"instruction": "leaf", "tool_scope": ["web"]}}]},
             {"content": "{\"widen\": \"answered\"}"}]},
        {"name": "strays", "match": "stray-handles",  # spawned first, as 0.1
         "turns": [
             {"tool_calls": [{"name": "agentd__subagent_spawn",
                              "arguments": {"instruction": "leaf task"}}]},
             {"expect": '"handle":"0.1.1"',
              "tool_calls": [
                  {"name": "agentd__subagent_send",  # ended, and no warm session
                   "arguments": {"handle": "0.1.1", "message": "more?"}},
                  {"name": "agentd__subagent_cancel", "arguments": {"handle": "0.1.7"}},
                  {"name": "agentd__subagent_status", "arguments": {"handle": "0.1.9"}},
                  {"name": "agentd__subagent_send",  # not under 0.1: never asked for
                   "arguments": {"handle": "0.2", "message": "yours?"}}]},
             {"expect": ["unknown handle: 0.1.1", "unknown handle: 0.1.7",
                         "unknown handle: 0.1.9", "unknown handle: 0.2"],
              "content": "{\"strays\": \"answered\"}"}]},
        {"name": "costly", "match": "costly",
         "turns": [{"content": "{\"cost\": 15}",
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5}}]},
        {"name": "combine", "match": "combine",
         "turns": [{"expect": ["<<<input b>>>", "<<<input c>>>"],
                    "content": "{\"combined\": true}"}]},
        {"name": "any", "match": "",
         "turns": [{"content": "{\"ok\": true}",
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2}}],
         "repeat_last": True},
    ],
}


def precompile() -> None:
    """Byte-compile agentd once, so that 256 re-exec'd children do not each compile it."""
    import agentd_native

    for package in (agentd, agentd_native):
        compileall.compile_dir(str(Path(package.__file__).parent), quiet=1)


def playback_file(tmp_path: Path) -> str:
    path = tmp_path / "playback.json"
    path.write_text(json.dumps(PLAYBACK))
    return str(path)


def make_config(tmp_path: Path, **over) -> Config:
    values = {"intelligence": f"playback:{playback_file(tmp_path)}", "drain_timeout": 3.0,
              "init_timeout": 30.0, "spawn": "exec"}
    values.update(over)
    return Config(**values)


def _stat(pid: int) -> tuple[str, int, bytes] | None:
    """(state letter, ppid, cmdline) of a process, or None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[1]), cmdline


def _ours(ppid: int) -> bool:
    """A child of this test process, or of a forkserver (itself a child of ours)."""
    if ppid == os.getpid():
        return True
    info = _stat(ppid)
    return info is not None and b"--forkserver" in info[2] and info[1] == os.getpid()


def parent_of(pid: int) -> int | None:
    """The parent pid of a live process, or None if it is gone."""
    info = _stat(pid)
    return None if info is None else info[1]


def forkservers() -> list[int]:
    """The pids of the live forkservers of this test process (from /proc: a
    forkserver is our child whose command line says `--forkserver`)."""
    out = []
    for pid in children_of(os.getpid()):
        info = _stat(pid)
        if info is None or info[0] in "ZX":
            continue
        if b"--forkserver" in info[2].split(b"\0"):
            out.append(pid)
    return out


def proc_state(pid: int) -> str | None:
    """The /proc state letter of a subagent process, or None if it is gone.

    Pids are reused (other work on the machine spawns too): a process counts
    only if it is a subagent (its command line says so) or, once a zombie
    (no command line), a child of ours.
    """
    info = _stat(pid)
    if info is None:
        return None
    state, ppid, cmdline = info
    if b"--agentd-control-child" in cmdline or (state in "ZX" and _ours(ppid)):
        return state
    return None


def exists(pid: int) -> bool:
    """Still there for us at all, zombie included (a reaped child is not)."""
    info = _stat(pid)
    if info is None or not _ours(info[1]):
        return False
    return proc_state(pid) is not None


def running(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z", "X")


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


# a playback book: the root spawns one child, which answers {"ok": true}
SPAWN_ONE = {"playback": 1, "scripts": [
    {"match": "orchestrate",
     "turns": [{"tool_calls": [{"name": "agentd__subagent_spawn",
                                "arguments": {"instruction": "child work"}}]},
               {"content": "{\"done\": true}"}]},
    {"match": "", "turns": [{"content": "{\"ok\": true}"}], "repeat_last": True}]}
