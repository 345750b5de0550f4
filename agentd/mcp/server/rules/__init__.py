"""The server's protocol rules per revision, sans-IO: 2025-11-25 sessions
(``sessions``) and 2026-07-28 stateless requests (``stateless``)."""
