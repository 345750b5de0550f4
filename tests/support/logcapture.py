"""agentd's JSON log lines captured in a test: the `logs` fixture (conftest.py)
points the logger at a buffer; `events` reads back the lines of one event."""

from __future__ import annotations

import io

import orjson

__all__ = ["events"]


def events(buf: io.StringIO, name: str) -> list[dict]:
    """The decoded log lines whose event is `name`, in order."""
    return [r for r in map(orjson.loads, buf.getvalue().splitlines()) if r["event"] == name]
