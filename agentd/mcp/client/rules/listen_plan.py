"""The 2026-07-28 listen state machine of the client, sans-IO.

At 2026-07-28 updates arrive on one ``subscriptions/listen`` stream whose
filter names what the client watches.  :class:`ListenPlan` holds what the
stream manager (:mod:`agentd.mcp.client.listen_stream`, the IO) must agree on with the
callers of ``subscribe``/``unsubscribe``:

* the *filter epoch*: every subscribe/unsubscribe bumps it
  (:meth:`ListenPlan.changed`); a stream acknowledged for epoch ``e``
  satisfies every caller that waits for an epoch ``<= e``
  (:meth:`ListenPlan.acked`);
* what the open stream honours (its acknowledgement's
  ``resourceSubscriptions``) and what its request asked for;
* the URIs a re-opened stream no longer honours (*ended*: nothing is left to
  fire for them, so they leave the filter until subscribed again);
* whether the server serves ``subscriptions/listen`` at all (a -32601 or an
  HTTP 404/405 to it: :meth:`ListenPlan.refused`).

No clock, no IO: transitions are methods, the state is data, and a test
drives it by hand (tests/test_client_units.py).
"""

from __future__ import annotations

from collections.abc import Set

from msgspec import UNSET

from agentd.wire import mcp2026 as m26

__all__ = ["ListenPlan"]


class ListenPlan:
    """What one client listens for at 2026-07-28; see the module docstring."""

    __slots__ = ("acked_epoch", "asked", "ended", "epoch", "listening", "opens", "unsupported")

    def __init__(self) -> None:
        self.epoch = 0  # bumped by every subscribe/unsubscribe
        self.acked_epoch = -1  # the filter epoch of the open, acknowledged stream
        self.listening: frozenset[str] = frozenset()  # URIs the open stream honours
        self.asked: frozenset[str] = frozenset()  # URIs its request named
        self.ended: set[str] = set()  # watched URIs a re-opened stream no longer honours
        self.unsupported = False  # the server answered listen with -32601 (or 404/405)
        self.opens = 0  # streams acknowledged (re-opens included)

    # ------------------------------------------------------------ callers

    def changed(self, uri: str) -> int:
        """``uri`` was (un)subscribed: it may be asked for again; the new epoch."""
        self.ended.discard(uri)
        self.epoch += 1
        return self.epoch

    def acked(self, want: int) -> bool:
        """Whether a stream opened with epoch ``want``'s filter (or a later one)."""
        return self.acked_epoch >= want

    def honours(self, uri: str) -> bool:
        return uri in self.listening

    def watched(self, subscriptions: Set[str]) -> list[str]:
        """The subscribed URIs still in the filter, in order (the resync's set)."""
        return sorted(subscriptions - self.ended)

    def filter(self, subscriptions: Set[str], *, subscribe: bool, tools_changed: bool,
               resources_changed: bool) -> m26.SubscriptionFilter | None:
        """The filter of the next stream; None when there is nothing to listen for.
        The flags are the server's capabilities (``resources.subscribe``,
        ``tools.listChanged``, ``resources.listChanged``)."""
        uris = self.watched(subscriptions) if subscribe else []
        if not (uris or tools_changed or resources_changed):
            return None
        return m26.SubscriptionFilter(
            toolsListChanged=True if tools_changed else UNSET,
            resourcesListChanged=True if resources_changed else UNSET,
            resourceSubscriptions=uris if uris else UNSET)

    # ------------------------------------------------------------ the stream

    def adopted(self) -> None:
        """A (re)discovered server: whether it serves listen is asked again."""
        self.unsupported = False

    def idle(self, epoch: int) -> None:
        """Nothing to listen for at ``epoch``: no stream, and that settles it."""
        self.listening = frozenset()
        self.acked_epoch = epoch

    def refused(self) -> None:
        """The server does not serve ``subscriptions/listen``: every waiter settles
        (and finds its URI not honoured)."""
        self.unsupported = True
        self.listening = frozenset()
        self.acked_epoch = self.epoch

    def opened(self, epoch: int, asked: m26.SubscriptionFilter,
               honoured: m26.SubscriptionFilter, *, reopened: bool) -> frozenset[str]:
        """A stream for ``epoch``'s filter ``asked`` was acknowledged with
        ``honoured``.  Returns the URIs that ended: asked again after a close and
        no longer honoured (only a re-open can tell)."""
        got = honoured.resourceSubscriptions
        self.listening = frozenset(got if isinstance(got, list) else ())
        self.asked = frozenset(asked.resourceSubscriptions or ())
        ended = self.asked - self.listening if reopened else frozenset()
        self.ended |= ended
        self.acked_epoch = epoch
        self.opens += 1
        return ended

    def lost(self) -> None:
        """The stream broke or the server closed it: nothing is honoured until a
        new one is acknowledged."""
        self.listening = frozenset()
