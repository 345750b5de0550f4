"""Two small sans-IO rules of agentd's 2026-07-28 client, beside the session.

* :func:`ttl_ms` -- a list result's ``ttlMs`` (how long the catalogue may be
  kept without re-listing), clamped to a day; 0 when absent or unusable.
* :func:`traceparent_for` -- the W3C ``traceparent`` of a run (SEP-414, in
  every 2026-07-28 ``_meta``): one trace id per run, a fresh span id per
  connection.
"""

from __future__ import annotations

from typing import Final

import msgspec
from msgspec import Raw

from agentd.wire.guard import PEER_FAULTS

__all__ = ["MAX_TTL_MS", "traceparent_for", "ttl_ms"]

MAX_TTL_MS: Final = 24 * 3600 * 1000  # a longer ttlMs (2026-07-28 lists) is clamped (a day)


class _TTL(msgspec.Struct, gc=False):
    ttlMs: int | None = None


_dec_ttl = msgspec.json.Decoder(_TTL)


def ttl_ms(raw: Raw) -> int:
    """A 2026-07-28 list result's ``ttlMs``, clamped; 0 when absent or unusable."""
    try:
        v = _dec_ttl.decode(raw).ttlMs
    except PEER_FAULTS:
        return 0
    return min(v, MAX_TTL_MS) if isinstance(v, int) and v > 0 else 0


def traceparent_for(run_id: str) -> str:
    """``00-{trace id}-{span id}-01`` (SEP-414, in every 2026-07-28 ``_meta``): the
    trace id derived from the run id (stable for the whole run, across servers),
    a fresh span id per connection."""
    import hashlib  # here: a subagent process imports this module but connects nowhere
    import secrets

    trace_id = (hashlib.sha256(run_id.encode()).hexdigest()[:32] if run_id
                else secrets.token_hex(16))
    if trace_id == "0" * 32:  # the all-zero id is invalid in W3C trace context
        trace_id = secrets.token_hex(16)
    return f"00-{trace_id}-{secrets.token_hex(8)}-01"
