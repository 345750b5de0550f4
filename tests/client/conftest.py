"""The client folder's fixture: `fault`, the programmable fault server
(tests/support/fault_server.py), for the tests that need a misbehaviour no real
peer can be made to produce."""

from fault_server import fault  # noqa: F401  (the fixture, for every test in this folder)
