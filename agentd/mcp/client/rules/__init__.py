"""The client's protocol rules, sans-IO: fed messages and ``now``, they return
what to send or decide; nothing here opens a socket or starts a task."""
