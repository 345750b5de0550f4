"""``WWW-Authenticate`` challenges (RFC 9110 §11.6.1, RFC 6750 §3, RFC 9728 §5.1).

Sans-IO: a header value in, the ``Bearer`` challenge's parameters out.  The
values are untrusted server text: ``resource_metadata`` becomes a URL only
after :mod:`agentd.mcp.client.oauth.discovery` has checked it names the MCP server's
own origin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

__all__ = ["Challenge", "parse_challenge"]

_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_WS: Final = re.compile(r"[ \t]*")
_MAX_HEADER: Final = 8192


@dataclass(frozen=True)
class Challenge:
    """The parameters of a ``Bearer`` challenge (names lower-cased)."""

    params: dict[str, str] = field(default_factory=dict)

    @property
    def resource_metadata(self) -> str | None:
        return self.params.get("resource_metadata") or None

    @property
    def scope(self) -> str | None:
        value = (self.params.get("scope") or "").strip()
        return " ".join(value.split()) or None

    @property
    def error(self) -> str | None:
        return self.params.get("error") or None

    @property
    def insufficient_scope(self) -> bool:
        return self.error == "insufficient_scope"


def _quoted(s: str, i: int) -> tuple[str, int]:
    out = []
    i += 1
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            out.append(s[i + 1])
            i += 2
            continue
        if c == '"':
            return "".join(out), i + 1
        out.append(c)
        i += 1
    return "".join(out), i  # unterminated: take what there is


def parse_challenge(values: list[str] | tuple[str, ...] | str | None) -> Challenge | None:
    """The ``Bearer`` challenge among ``values`` (one header or several), else None."""
    if not values:
        return None
    if isinstance(values, str):
        values = [values]
    for value in values:
        found = _parse_one(value[:_MAX_HEADER])
        if found is not None:
            return found
    return None


def _parse_one(s: str) -> Challenge | None:
    i, n = 0, len(s)
    scheme: str | None = None
    params: dict[str, str] = {}
    bearer: dict[str, str] | None = None
    while i < n:
        i = _WS.match(s, i).end()  # type: ignore[union-attr]
        if i < n and s[i] == ",":
            i += 1
            continue
        m = _TOKEN.match(s, i)
        if not m:
            i += 1  # garbage: skip a character
            continue
        word, j = m.group(0), m.end()
        k = _WS.match(s, j).end()  # type: ignore[union-attr]
        if k < n and s[k] == "=" and not (k + 1 < n and s[k + 1] == "=" and scheme is None):
            # an auth-param of the current challenge
            k = _WS.match(s, k + 1).end()  # type: ignore[union-attr]
            if k < n and s[k] == '"':
                val, i = _quoted(s, k)
            else:
                vm = _TOKEN.match(s, k)
                val, i = (vm.group(0), vm.end()) if vm else ("", k)
            params.setdefault(word.lower(), val)
            continue
        # a new challenge (scheme), possibly followed by a token68
        if scheme is not None and scheme.lower() == "bearer":
            bearer = params
            break
        scheme, params, i = word, {}, k  # a token68 after it is skipped as garbage
    if bearer is None and scheme is not None and scheme.lower() == "bearer":
        bearer = params
    return Challenge(bearer) if bearer is not None else None
