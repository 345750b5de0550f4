"""The server's protocol revision, as an object chosen once per arriving request.

agentd serves two families of MCP on one endpoint: the session revisions
(2025-11-25 and its three older revisions: an ``initialize`` negotiates a
session, ``Mcp-Session-Id`` names it, its GET stream carries its updates,
DELETE ends it; every answer is HTTP 200) and the stateless one (2026-07-28:
each request carries its own envelope in ``_meta`` and the
``MCP-Protocol-Version`` header, no session, no GET or DELETE, updates through
``subscriptions/listen``, errors with their own HTTP statuses).

:func:`arriving` picks the revision of a POST once, from what the request
declares; :func:`by_version` that of a GET or DELETE from its header.  The
:class:`~agentd.mcp.server.handler.ServerSession` serving it holds the
answer, :data:`SESSION` or :data:`STATELESS`, and its driver and the HTTP
concerns ask it instead of testing which revision they are at (the
client's half has the same shape: ``agentd.mcp.client.rules.revision``).
Sans-IO: the routes and answers are ``agentd.mcp.server.rules.sessions``'s
and ``agentd.mcp.server.rules.stateless``'s, chosen here.
"""

from __future__ import annotations

from typing import Any, Final

from agentd.errors import RPCError
from agentd.mcp.server.rules import stateless
from agentd.mcp.server.rules.sessions import ROUTES, SessionState
from agentd.wire import mcp2026 as m
from agentd.wire import mcp_types as t
from agentd.wire.jsonrpc import METHOD_NOT_FOUND, Request

__all__ = ["SESSION", "STATELESS", "Revision", "arriving", "by_version"]


class Revision:
    """The questions the server's code asks of a revision, with the session
    revisions' answers; :class:`_Stateless` overrides what 2026-07-28 changes.

    ``name`` is the family's label; ``versions`` the ``MCP-Protocol-Version``
    values that name it; ``sessions`` whether it has sessions (``initialize``
    mints ``Mcp-Session-Id``; GET opens the session's stream, DELETE ends
    it: without sessions both are ``405``).  :meth:`route` is the sans-IO
    rule of one request (a result, or a
    :class:`~agentd.mcp.server.rules.sessions.Dispatch` for the handler),
    :meth:`answer`, :meth:`refuse` and :meth:`internal_error` its response
    bytes and HTTP status.
    """

    __slots__ = ()
    name: str = "session"
    versions: tuple[str, ...] = tuple(t.SUPPORTED_PROTOCOL_VERSIONS)
    sessions: bool = True

    def route(self, s: SessionState, req: Request, env: stateless.Envelope | None,
              headers: Any) -> Any:
        """The result of ``req`` on ``s``, or a ``Dispatch``; raises the ``RPCError``
        the rules answer (``env``/``headers``: a 2026-07-28 request's own)."""
        rule = ROUTES.get(req.method)
        if rule is None:
            raise RPCError(METHOD_NOT_FOUND, f"Method not found: {req.method}", side="local")
        return rule(s, req)

    def answer(self, s: SessionState, req: Request, env: stateless.Envelope | None,
               result: Any) -> tuple[bytes, int]:
        """The response carrying ``result`` and its HTTP status."""
        return SessionState.answer(req.id, result), 200

    def refuse(self, request_id: Any, exc: RPCError) -> tuple[bytes, int]:
        """The error response for what the rules or the handler refused, and its status."""
        return SessionState.refuse(request_id, exc), 200

    def internal_error(self, request_id: Any) -> tuple[bytes, int]:
        """What a client sees of a handler bug (the driver logs the detail)."""
        return SessionState.internal_error(request_id), 200


class _Stateless(Revision):
    """2026-07-28 (see :class:`Revision` for what each answer means)."""

    __slots__ = ()
    name = "stateless"
    versions = tuple(m.MODERN_PROTOCOL_VERSIONS)
    sessions = False

    def route(self, s: SessionState, req: Request, env: stateless.Envelope | None,
              headers: Any) -> Any:
        assert env is not None  # a stateless exchange is born with its envelope
        return stateless.route(s, req, env, headers)

    def answer(self, s: SessionState, req: Request, env: stateless.Envelope | None,
               result: Any) -> tuple[bytes, int]:
        assert env is not None
        return stateless.answer(s.handler, req, env, result)

    def refuse(self, request_id: Any, exc: RPCError) -> tuple[bytes, int]:
        return stateless.refuse(request_id, exc)

    def internal_error(self, request_id: Any) -> tuple[bytes, int]:
        return stateless.internal_error(request_id)


SESSION: Final[Revision] = Revision()
STATELESS: Final[Revision] = _Stateless()

_BY_VERSION: Final = {v: rev for rev in (SESSION, STATELESS) for v in rev.versions}


def by_version(version: str) -> Revision | None:
    """The revision an ``MCP-Protocol-Version`` value names (None: one we do not serve)."""
    return _BY_VERSION.get(version)


def arriving(version: str | None, session_id: str | None, req: Request | None) -> Revision:
    """The revision of one arriving POST, chosen once.

    2026-07-28 when its ``MCP-Protocol-Version`` names no session revision
    (an unsupported one included: the stateless rules answer it -32022), or
    when a request without ``Mcp-Session-Id`` carries a 2026-07-28 envelope
    (``_meta`` protocolVersion); else the session revisions (``initialize``,
    or a message of a session)."""
    if version is not None and _BY_VERSION.get(version) is not SESSION:
        return STATELESS
    if session_id is None and req is not None and stateless.carries_envelope(req):
        return STATELESS
    return SESSION

