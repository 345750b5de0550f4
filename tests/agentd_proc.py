"""Run the real `agentd` console script as a subprocess from an async test.

Every run finished here (`Agentd.done`, `run_agentd`) has its stderr checked by
`assert_log_only`: nothing but log lines -- no Python warning, no traceback --
whatever the run's outcome (`agentd demo`'s readable trace aside).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Done:
    rc: int
    stdout: str
    stderr: str
    logs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        # a reactive daemon's wake lines come first (docs/reactive.md): the result is last
        lines = [ln for ln in self.stdout.splitlines() if ln.strip() and '"wake":' not in ln]
        assert len(lines) == 1, f"expected one stdout object, got {self.stdout!r}\n{self.stderr}"
        return json.loads(lines[0])

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.logs if e.get("event") == name]


# the one line of a usage error (exit 2, before logging starts; `agentd auth` too)
_USAGE = re.compile(r"agentd: error: \S")
# the text form: HH:MM:SS LEVEL event-or-handle ... (agentd.log), colour codes aside
TEXT_LINE = re.compile(r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR) +\S")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def assert_log_only(stderr: str, *, form: str = "any") -> None:
    """Every line of `stderr` is a log line: a JSON record (`form` json), a text
    line (`form` text), either (`any`: a log file's warnings are echoed as text
    beside it), or the usage error's one line."""
    for line in stderr.splitlines():
        if _USAGE.match(line):
            continue
        record = None
        with contextlib.suppress(ValueError):
            record = json.loads(line)
        is_json = isinstance(record, dict) and {"ts", "level", "event"} <= record.keys()
        is_text = TEXT_LINE.match(ANSI.sub("", line)) is not None
        ok = {"json": is_json, "text": is_text, "any": is_json or is_text}[form]
        assert ok, f"not a {form} log line on stderr: {line!r}\n{stderr}"


def _parse_logs(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict):
                out.append(obj)
    return out


def agentd_env(**extra: str) -> dict[str, str]:
    """The test's environment without the operator's model settings (agentd reads
    AGENTD_INTELLIGENCE*, AGENTD_MODEL and OPENAI_*), naming the model `test-model`
    unless `extra` says otherwise (AGENTD_MODEL="": none)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AGENTD_INTELLIGENCE", "AGENTD_MODEL", "OPENAI_"))}
    env["AGENTD_MODEL"] = "test-model"
    env.update(extra)
    return env


class Agentd:
    """A running agentd; `wait_for_event()` is a readiness wait on its stderr log."""

    def __init__(self, proc: asyncio.subprocess.Process, *, checked: bool = True) -> None:
        self.proc = proc
        self.checked = checked  # stderr must be log lines only (not: the demo's trace)
        self._stderr: list[str] = []
        self._seen = asyncio.Condition()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            async with self._seen:
                self._stderr.append(line.decode(errors="replace"))
                self._seen.notify_all()

    async def wait_for_event(self, event: str, *, limit: float = 60.0, **match: Any) -> None:
        def found() -> bool:
            for e in _parse_logs("".join(self._stderr)):
                if e.get("event") == event and all(e.get(k) == v for k, v in match.items()):
                    return True
            return False

        async with asyncio.timeout(limit), self._seen:
            await self._seen.wait_for(lambda: found() or self._reader.done())
        assert found(), f"agentd never logged {event} {match}:\n{''.join(self._stderr)}"

    def signal(self, sig: int = signal.SIGINT) -> None:
        self.proc.send_signal(sig)

    async def done(self, *, limit: float = 120.0) -> Done:
        assert self.proc.stdout is not None
        try:
            async with asyncio.timeout(limit):
                out = await self.proc.stdout.read()
                rc = await self.proc.wait()
                await self._reader
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"agentd did not finish:\n{''.join(self._stderr)}") from None
        err = "".join(self._stderr)
        if self.checked:
            assert_log_only(err)
        return Done(rc=rc, stdout=out.decode(), stderr=err, logs=_parse_logs(err))


async def start_agentd(agentd_bin: str, args: Sequence[str], *,
                       env: dict[str, str] | None = None) -> Agentd:
    proc = await asyncio.create_subprocess_exec(
        agentd_bin, *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env if env is not None else agentd_env())
    return Agentd(proc, checked=list(args[:1]) != ["demo"])


async def run_agentd(agentd_bin: str, args: Sequence[str], *,
                     env: dict[str, str] | None = None, limit: float = 120.0) -> Done:
    return await (await start_agentd(agentd_bin, args, env=env)).done(limit=limit)
