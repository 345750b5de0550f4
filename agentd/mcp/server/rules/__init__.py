"""The server's protocol rules per revision, sans-IO: 2025-11-25 sessions
(``sessions``), 2026-07-28 stateless requests (``stateless``), and the revision
objects that choose between them once per request (``revision``)."""
