"""Health: is the process alive, and is it ready for work?

`/healthz` answers 200 while the event loop turns (the process is alive).
`/readyz` answers 200 when every registered check passes and the process is
not draining; 503 with the failing reasons otherwise. Readiness goes false at
the very start of a drain (the first SIGTERM/SIGINT), before anything is
closed, so a load balancer stops routing new work while in-flight runs finish
within `--drain-timeout`.

Checks are registered by whoever owns the state they look at (the toolbox:
every required MCP server connected; the supervisor: its forkserver up) and
removed when that owner closes. A check returns None when healthy, or a short
reason (no secrets: names only).

The reactive daemon also publishes what it watches (`set_watched`): each URI,
its server and how it is watched (`subscribe`, `listen`, `poll`), so an
operator sees from `/readyz` (and `agent://status`) whether a daemon is
polling instead of being woken. That list is information, not a check.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["add_check", "draining", "readiness", "reset", "set_draining", "set_watched",
           "watched"]

_checks: dict[str, Callable[[], str | None]] = {}
_draining = False
_watched: list[Callable[[], list[dict[str, str]]]] = []
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@]*@")


def add_check(name: str, check: Callable[[], str | None]) -> Callable[[], None]:
    """Register a readiness check; returns the function that removes it."""
    _checks[name] = check

    def remove() -> None:
        if _checks.get(name) is check:
            del _checks[name]
    return remove


def set_draining(value: bool = True) -> None:
    """The process started (or, False, finished) draining: not ready."""
    global _draining
    _draining = value


def draining() -> bool:
    return _draining


def readiness() -> tuple[bool, list[str]]:
    """(ready, reasons it is not)."""
    reasons = []
    if _draining:
        reasons.append("draining")
    for name, check in list(_checks.items()):
        try:
            why = check()
        except Exception as exc:  # a broken check reports itself, never crashes a probe
            why = f"check failed: {type(exc).__name__}"
        if why:
            reasons.append(f"{name}: {why}")
    return not reasons, reasons


def set_watched(report: Callable[[], list[dict[str, str]]]) -> Callable[[], None]:
    """Publish a watch report (`[{uri, server, mode}]`); returns its remover."""
    _watched.append(report)

    def remove() -> None:
        if report in _watched:
            _watched.remove(report)
    return remove


def watched() -> list[dict[str, str]]:
    """Every published watch report's entries, in publication order; a URI's
    userinfo (`scheme://user:secret@…`) is replaced by `***`."""
    return [{**entry, "uri": _USERINFO.sub(r"\1***@", entry["uri"])}
            for report in list(_watched) for entry in report()]


def reset() -> None:
    """Forget every check, watch report and the draining flag (tests, a fresh
    run in-process)."""
    global _draining
    _checks.clear()
    _watched.clear()
    _draining = False
