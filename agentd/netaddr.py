"""What counts as a loopback host: the one test behind every secure-by-default
listener and endpoint rule (config checks, the served listeners, the metrics
listener). A leaf, so every layer that binds or dials may ask it."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback_host"]


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback IP literal (brackets allowed); a name is not."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
