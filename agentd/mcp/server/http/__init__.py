"""Streamable HTTP serving on aiohttp.web, split by concern: the engine
(``server``), who may ask (``guard``, ``checks``), bounds (``limits``), 2025-11-25
sessions, 2026-07-28 listens, and the answers' shapes (``responses``)."""
