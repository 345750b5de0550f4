"""Durable runs: each served run's (or batch sample's) journal, resumed after a restart.

`exchange` is the one shape of a recorded request and answer (cassettes use it
too), `records` the run's own record, `store` the SQLite files and their
writer threads, `resume` the sans-IO rule that answers a resumed run from its
record. docs/operations.md "Durable runs" is the operator's page.
"""
