"""The pool's IO: the worker-to-worker link (``relay``), the liveness probes
(``prober``), ``--pool-dns`` discovery (``dns``) and the 2025-11-25 session proxy
(``session_relay``), over the sans-IO rules of ``agentd.pool``."""
