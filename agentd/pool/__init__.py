"""A pool of workers behind one URL (issue 31, docs/operations.md "Pool").

The sans-IO rules live here, importing only the base layer: :mod:`.handles`
(owner-naming, MAC'd handles and session ids; the worker-to-worker relay's
request authentication) and :mod:`.membership` (which peers are alive,
suspect or dead, fed probe outcomes and an injected clock).
"""
