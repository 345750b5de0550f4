"""A2A (Agent2Agent protocol 1.0) peers, behind `--features a2a`.

* `client.py` (transport): one `A2AClient` per `--a2a-peer`: the Agent Card
  fetched from the well-known path and validated, then the JSON-RPC or
  HTTP+JSON binding spoken over aiohttp (SendMessage, SendStreamingMessage,
  GetTask, CancelTask). Wire types live in `agentd.wire.a2a`.
* `peers.py` (client API, beside the MCP Toolbox): `A2APeers` connects every
  declared peer (a required one failing is exit 6), follows tasks to a terminal
  state, and presents `a2a://{peer}/task/{id}` as subscribable resources to the
  reactive machinery.

The `a2a.delegate` self-tool is `agentd.agent.a2a_delegate` (one delegation, which
the tree's broker performs for subagents too, is `delegation.py`); the served side
(`--serve-a2a`) is `agentd.served.a2a`. docs/a2a.md is the operator's page.
"""
