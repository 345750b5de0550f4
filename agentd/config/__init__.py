"""The run's configuration: one validated, frozen `Config`, built before any side effect.

`model` holds the data every layer reads (the Structs and their defaults);
the rest parses and checks it, each subsystem its own part: `endpoints` (MCP
servers and A2A peers: the endpoint rule, `auth` tables, header secrets),
`serve` (the self-MCP's and the metrics' listeners: TLS, bearers),
`pool` (pool mode), `intelligence` (the gateway, the model, its key and the
sampling settings); `load` reads the `--config` file and `build` turns merged
values into a `Config`. Import a name from the module that holds it; this
package re-exports nothing.
"""
