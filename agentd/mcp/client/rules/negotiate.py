"""Which revision agentd speaks with one server, and when a server lost our session.

Sans-IO rules, fed what a server answered and returning the decision as data
(no I/O, no clock, no logging); :mod:`agentd.mcp.client.facade` acts on them.  Why
they are rules of their own: real servers differ from the specification's
happy path in ways a client must absorb without degrading silently
(docs/client.md, "Two revisions, chosen per server" and "Session recovery").

* :func:`choose_supported` -- a ``-32022`` (unsupported protocol version)
  names the versions the server speaks in ``data.supported``: agentd retries
  with the best of them it speaks (the newest 2026-era one, else the newest
  initialize-era one), and falls back to ``initialize`` only when the list is
  missing or unusable.
* :func:`listen_delivers` and :func:`renegotiate_for_updates` -- *negotiation
  by need*: a server whose 2026-07-28 surface cannot deliver resource updates
  (its ``server/discover`` says ``resources.subscribe: false``, or it answers
  ``subscriptions/listen`` with -32601) is spoken to at 2025-11-25 once the run
  needs a subscription on it, the specification's downgrade "where the feature
  use overlaps".
* :func:`unknown_session` -- a server that no longer knows our session answers
  HTTP 404 (the specification) or, as server-everything and the TypeScript
  SDK's example servers do after a restart, HTTP 400 with a body saying so.
  Either means "initialize again", never "a client error to give up on".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from msgspec import UNSET

from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt

__all__ = [
    "UNKNOWN_SESSION_WORDS",
    "VersionChoice",
    "choose_supported",
    "listen_delivers",
    "renegotiate_for_updates",
    "unknown_session",
]

# Words that, next to "session", make a 400's body an unknown-session answer
# ("Bad Request: No valid session ID provided", "Session not found", ...).
UNKNOWN_SESSION_WORDS: Final = ("not found", "no valid", "invalid", "unknown", "expired",
                                "missing", "terminated")


@dataclass(frozen=True, slots=True)
class VersionChoice:
    """What to do after a ``-32022``.

    ``version`` is the revision to retry with (None: none named that agentd
    speaks); ``modern`` says whether it is a 2026-era one (retry
    ``server/discover``) or an initialize-era one (``initialize`` offering it);
    ``incompatible`` is the one verdict that fails the connect: the server
    named versions, and agentd speaks none of them.
    """

    version: str | None
    modern: bool = False
    incompatible: bool = False


def choose_supported(data: Any) -> VersionChoice:
    """The best version of a ``-32022``'s ``data.supported`` that agentd speaks."""
    supported = data.get("supported") if isinstance(data, dict) else None
    if not isinstance(supported, list) or not supported:
        return VersionChoice(None)  # nothing usable said: initialize as for any server
    # the list is as long as the message cap lets it be: only agentd's own few
    # versions are looked up in it, never the other way round
    for v in m26.MODERN_PROTOCOL_VERSIONS:  # newest first
        if v in supported:
            return VersionChoice(v, modern=True)
    for v in mt.SUPPORTED_PROTOCOL_VERSIONS:  # newest first
        if v in supported:
            return VersionChoice(v)
    return VersionChoice(None, incompatible=True)


def listen_delivers(resources: mt.ResourcesCapability | Any) -> bool | None:
    """Whether a ``server/discover`` result says its ``subscriptions/listen``
    delivers resource updates: True (``resources.subscribe: true``), False
    (``false``, said explicitly: the SDK 2.3 says so when it serves no listen),
    None (not said, as some servers leave it out at this revision; the listen
    acknowledgement will tell).  agentd's own self-MCP says True."""
    if not isinstance(resources, mt.ResourcesCapability):
        return None
    sub = resources.subscribe
    return None if sub is UNSET else bool(sub)


def renegotiate_for_updates(*, stateless: bool, delivers: bool | None,
                            listen_unsupported: bool, legacy_refused: bool) -> bool:
    """Whether a subscription the run needs should move the server to 2025-11-25.

    Only a server spoken to at 2026-07-28 whose listen cannot deliver updates
    -- known from its capabilities (``delivers`` False) or from a -32601 to
    ``subscriptions/listen`` (``listen_unsupported``) -- and that has not
    already refused ``initialize`` (``legacy_refused``: then the subscription
    degrades, logged, as for a server without ``resources.subscribe``).
    """
    if not stateless or legacy_refused:
        return False
    return delivers is False or listen_unsupported


def unknown_session(status: int, body: str, *, had_session: bool) -> bool:
    """Whether an HTTP answer to a request carrying our session id means the
    server does not know that session (initialize again).

    404 is the specification's answer.  A 400 counts when its body speaks of
    the session as unknown (``UNKNOWN_SESSION_WORDS``); any other 400 stays a
    client error.  Without a session id sent, neither is about our session.
    """
    if not had_session:
        return False
    if status == 404:
        return True
    if status != 400:
        return False
    text = body.lower()
    return "session" in text and any(w in text for w in UNKNOWN_SESSION_WORDS)
