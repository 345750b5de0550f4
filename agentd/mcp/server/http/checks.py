"""Header checks of the served endpoint that must follow the RFCs exactly.

* Media types (RFC 9110 §8.3.1): ``type/subtype`` is case-insensitive and may
  be followed by ``; parameters``; a prefix is not a match
  (``application/jsonp`` is not ``application/json``).  ``Accept`` is a list
  of media ranges (``*/*``, ``application/*``) with optional ``q``; ``q=0``
  refuses a type.
* The request target (RFC 9112 §3.2): the endpoint is served in origin form
  (``/mcp``).  An absolute-form target (``http://host/mcp``) names a host of
  its own; it is accepted only when that host passes the same check as
  ``Host``, otherwise it is refused like a foreign origin.
* ``Host`` and ``Origin`` must each appear at most once: a duplicate could be
  read differently by a proxy, the browser and us (``403``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from multidict import CIMultiDictProxy

__all__ = ["accepts", "duplicate_identity_header", "is_json", "target_host"]

_IDENTITY: Final = ("Host", "Origin")


def _essence(media: str) -> str:
    return media.split(";", 1)[0].strip().lower()


@lru_cache(maxsize=64)  # a handful of distinct header values in practice; bounded for a hostile peer
def is_json(content_type: str | None) -> bool:
    """``Content-Type`` is ``application/json`` (any case, any parameters)."""
    return content_type is not None and _essence(content_type) == "application/json"


@lru_cache(maxsize=64)
def accepts(accept: str | None, media: str) -> bool:
    """Whether an ``Accept`` value admits ``media`` (no header admits everything)."""
    if accept is None or not accept.strip():
        return True
    kind = media.split("/", 1)[0]
    for item in accept.split(","):
        parts = item.split(";")
        rng = parts[0].strip().lower()
        if rng not in (media, f"{kind}/*", "*/*"):
            continue
        q = 1.0
        for param in parts[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
        if q > 0:
            return True
    return False


def target_host(raw_target: str) -> str | None:
    """The host an absolute-form request target names (None for origin form)."""
    if raw_target.startswith("/"):
        return None
    rest = raw_target.split("://", 1)
    authority = rest[1] if len(rest) == 2 else rest[0]
    return authority.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]


def duplicate_identity_header(headers: CIMultiDictProxy[str]) -> str | None:
    """The name of ``Host``/``Origin`` when it appears more than once."""
    for name in _IDENTITY:
        if len(headers.getall(name, ())) > 1:
            return name
    return None
