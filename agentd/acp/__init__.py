"""`agentd acp`: agentd as an Agent Client Protocol v1 agent over stdio.

Harnesses (Harbor, inspect_swe's ACPAgent) and editors (Zed, ...) run the
agent they are given as a child process and speak newline-delimited JSON-RPC
2.0 to it on its stdin/stdout.  The folder, by concern:

* `schema`  -- the ACP messages agentd reads and writes (msgspec Structs);
* `framing` -- the sans-IO line framer and its bound;
* `servers` -- a session's `mcpServers` -> declared MCP servers (or a refusal);
* `updates` -- the loop's `Tracer` hooks -> `session/update` notifications;
* `agent`   -- the methods: sessions, prompts (each one run of the loop), cancel;
* `stdio`   -- the process: stdin/stdout, stdout kept for protocol frames only.

docs/harnesses.md is the user's page; docs/cli.md lists the command.
"""
