"""DNS discovery of pool peers (``--pool-dns NAME[:PORT]``): addresses in, peers out.

Sans-IO (h11 style): one :class:`Discovery` holds what this worker knows of
the addresses a name resolves to; the IO around it resolves the name when
:meth:`Discovery.due` says so, feeds the answer (:meth:`resolved`), probes
each address it returns as unidentified and feeds back the id each probe's
signed answer carried (:meth:`identified`).  :meth:`peers` is then the pool's
peer list, ``id -> base URL``, for the relay and the membership.

Why ids come from probes and not from DNS: on Kubernetes a headless Service
answers pod addresses, and a pod rescheduled keeps its name (its
``--pool-id``) but not its address, so a handle's owner is found again at its
new address.  Rules:

* a new address is probed until one answer names its id; this worker's own
  address is recognised by its own id and skipped;
* an address that leaves the DNS answer does not remove its peer: the peer
  keeps its last URL and the membership rules decide (a gone pod stops
  answering probes and is ``dead`` within the membership's bound, so its
  handles read "worker lost"; a DNS blip over a live pod changes nothing);
* the same id at a new address moves there (the probe's incarnation then
  tells the membership whether its runs survived);
* a failed resolution keeps the last answer (logged by the IO);
* over ``http`` only loopback addresses are taken (the rule ``--pool-peer``
  URLs follow: the pool key's MACs never cross a network in clear); others
  are counted in ``refused`` and logged by the IO.

Bounds: at most ``MAX_ADDRESSES`` addresses are taken from one answer (the
rest ignored, sorted first so the choice is stable) and at most
``MAX_ADDRESSES`` peers are remembered.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

__all__ = ["DEFAULT_DNS_INTERVAL", "MAX_ADDRESSES", "MAX_DNS_INTERVAL", "Discovery", "address_url",
           "parse_name"]

DEFAULT_DNS_INTERVAL: Final = 5.0  # seconds between resolutions of the --pool-dns name
MAX_DNS_INTERVAL: Final = 300.0  # a longer --pool-dns-interval is refused (exit 2)
MAX_ADDRESSES: Final = 64  # addresses taken from one answer, and peers remembered


_NAME_RE: Final = re.compile(r"(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
                             r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)*\.?")


def parse_name(value: str, default_port: int) -> tuple[str, int]:
    """``NAME[:PORT]`` as (host name, port); raises ValueError with the reason."""
    name, colon, port_text = value.partition(":")
    port = default_port
    if colon:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError("expected NAME[:PORT] with a port in 1..65535")
        port = int(port_text)
    if _NAME_RE.fullmatch(name) is None:
        raise ValueError("expected a DNS name")
    return name, port


def address_url(scheme: str, address: str, port: int) -> str:
    """``scheme://A:PORT`` (an IPv6 address bracketed); raises ValueError on a non-address."""
    ip = ipaddress.ip_address(address)
    host = f"[{ip}]" if ip.version == 6 else str(ip)
    return f"{scheme}://{host}:{port}"


@dataclass(slots=True)
class Discovery:
    """What one worker knows of its ``--pool-dns`` name's addresses."""

    me: str
    scheme: str
    port: int
    interval: float = DEFAULT_DNS_INTERVAL
    next_resolve: float = 0.0
    current: set[str] = field(default_factory=set)  # URLs in the last answer
    refused: int = 0  # the last answer's addresses not taken (not loopback over http)
    ids: dict[str, str] = field(default_factory=dict)  # URL -> the id its probe named
    _peers: dict[str, str] = field(default_factory=dict)  # id -> its latest URL

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError("pool DNS interval must be positive")

    def due(self, now: float) -> bool:
        """Whether to resolve now (the next one is then ``interval`` away)."""
        if now < self.next_resolve:
            return False
        self.next_resolve = now + self.interval
        return True

    def resolved(self, addresses: Iterable[str]) -> list[str]:
        """One resolution's addresses; returns the URLs to probe for their id.
        Strings that are not IP addresses are ignored."""
        urls: set[str] = set()
        self.refused = 0
        for address in sorted(set(addresses)):
            try:
                url = address_url(self.scheme, address, self.port)
            except ValueError:
                continue
            if self.scheme == "http" and not ipaddress.ip_address(address).is_loopback:
                self.refused += 1
                continue
            urls.add(url)
            if len(urls) >= MAX_ADDRESSES:
                break
        self.current = urls
        for url in set(self.ids) - urls:  # forgotten as an address; its peer stays
            del self.ids[url]
        return sorted(urls - set(self.ids))

    def identified(self, url: str, peer_id: str) -> None:
        """A probe of ``url`` answered, signed, with ``peer_id``."""
        if url not in self.current:
            return  # left the answer while the probe ran
        self.ids[url] = peer_id
        if peer_id == self.me:
            return
        self._peers.pop(peer_id, None)
        self._peers[peer_id] = url  # the latest address wins, and is the newest entry
        while len(self._peers) > MAX_ADDRESSES:  # the oldest-learned peer goes first
            del self._peers[next(iter(self._peers))]

    def peers(self) -> dict[str, str]:
        """The peer list: every id learned, at its latest URL (never this worker)."""
        return dict(self._peers)
