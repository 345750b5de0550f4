"""The suite's one process harness: the real `agentd` console script as a child
process, from a plain test or an async one.

Its stdout and stderr go to files, so a test can read the log events at any time
(also after the process ended) and a chatty process never blocks on a full pipe.
Every run ended through `done()` (or `stop()`) has its stderr checked by
`assert_log_only`: nothing but log lines -- no Python warning, no traceback --
whatever the outcome (`agentd demo`'s readable trace aside).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from waiting import until, until_sync

WAIT = 60.0  # the hang guard of a wait on a log event


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
    """A running agentd with its stdout and stderr in files; events read from stderr.

    Plain tests wait with `wait_event` / `wait_until` and end it with `stop`;
    async tests (started by `start_agentd`) use `await wait_for_event(...)` and
    `await done()`. ``env`` is added to this process's environment; ``environ``
    (as `start_agentd` passes) replaces it whole."""

    def __init__(self, argv: Sequence[str], tmp: Path | None = None, name: str = "agentd",
                 env: dict[str, str] | None = None, prefix: Sequence[str] | None = None, *,
                 environ: dict[str, str] | None = None, stdin: int | None = None,
                 checked: bool = True) -> None:
        self.checked = checked  # `done()` asserts stderr is log lines only (not: the demo's)
        if tmp is None:
            self._dir = tempfile.TemporaryDirectory(prefix="agentd-proc-")
            tmp = Path(self._dir.name)
        self.out = tmp / f"{name}.out"
        self.err = tmp / f"{name}.err"
        base = os.environ if environ is None else environ
        with open(self.out, "wb") as o, open(self.err, "wb") as e:
            self.proc = subprocess.Popen([*(prefix or []), *argv], stdin=stdin, stdout=o,
                                         stderr=e, env={**base, **(env or {})})

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def events(self, name: str | None = None) -> list[dict]:
        return [r for r in _parse_logs(self.stderr()) if name is None or r.get("event") == name]

    def _waited(self, ready: Callable[[], Any], what: str) -> Any:
        """`until_sync` on ``ready``, failing early when the process has exited;
        a failure carries the tail of its stderr."""
        def check():
            value = ready()
            if not value and self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.poll()} first")
            return value
        try:
            return until_sync(check, limit=WAIT, what=what)
        except AssertionError as exc:
            tail = "\n".join(self.stderr().splitlines()[-30:])
            raise AssertionError(f"{what}: {exc}; stderr tail:\n{tail}") from None

    def wait_event(self, name: str, pred: Callable[[dict], bool] = lambda r: True,
                   count: int = 1) -> list[dict]:
        def hits() -> list[dict]:
            found = [r for r in self.events(name) if pred(r)]
            return found if len(found) >= count else []
        return self._waited(hits, f"{count}x {name}")

    def wait_until(self, pred: Callable[[], Any]) -> None:
        self._waited(pred, "the condition")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """End it (if it has not ended) and check its stderr: log lines only."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.exited()

    def exited(self) -> int:
        """Its exit code once it ends by itself; its stderr checked: log lines only."""
        try:
            code = self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        if self.checked:
            assert_log_only(self.stderr())
        return code

    def result(self) -> dict:
        """The final result object: stdout's last line; every line before it is a
        wake's (JSON Lines, docs/reactive.md)."""
        lines = [json.loads(ln) for ln in self.out.read_text().splitlines() if ln.strip()]
        assert lines and "wake" not in lines[-1], lines
        assert all("wake" in ln for ln in lines[:-1]), lines
        return lines[-1]

    def wake_lines(self) -> list[dict]:
        """The wake lines written so far (every stdout line carrying `wake`)."""
        done = self.out.read_text().split("\n")[:-1]  # a line still being written: not yet
        return [rec for ln in done if ln.strip() and "wake" in (rec := json.loads(ln))]

    async def wait_for_event(self, event: str, *, limit: float = WAIT, **match: Any) -> None:
        """A readiness wait on the log: ``event`` with the fields ``match`` (or the
        process's end, which fails the wait)."""
        def found() -> bool:
            return any(all(e.get(k) == v for k, v in match.items()) for e in self.events(event))

        await until(lambda: found() or self.proc.poll() is not None, limit=limit,
                    what=f"agentd logging {event} {match}")
        assert found(), f"agentd never logged {event} {match}:\n{self.stderr()}"

    def signal(self, sig: int = signal.SIGINT) -> None:
        self.proc.send_signal(sig)

    async def done(self, *, limit: float = 120.0) -> Done:
        """Its end: exit code, stdout, stderr and the log events."""
        try:
            rc = await asyncio.to_thread(self.proc.wait, limit)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)
            raise AssertionError(f"agentd did not finish:\n{self.stderr()}") from None
        err = self.stderr()
        if self.checked:
            assert_log_only(err)
        return Done(rc=rc, stdout=self.out.read_bytes().decode(), stderr=err,
                    logs=_parse_logs(err))


async def start_agentd(agentd_bin: str, args: Sequence[str], *,
                       env: dict[str, str] | None = None) -> Agentd:
    """``agentd_bin args`` started with no stdin in ``env`` (default: `agentd_env()`)."""
    return Agentd([agentd_bin, *args], environ=env if env is not None else agentd_env(),
                  stdin=subprocess.DEVNULL, checked=list(args[:1]) != ["demo"])


async def run_agentd(agentd_bin: str, args: Sequence[str], *,
                     env: dict[str, str] | None = None, limit: float = 120.0) -> Done:
    return await (await start_agentd(agentd_bin, args, env=env)).done(limit=limit)
