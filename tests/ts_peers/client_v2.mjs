// A TypeScript SDK 2.x client (@modelcontextprotocol/client) of agentd's
// self-MCP, as a third-party harness drives it: connect -> tools/list ->
// subagent.spawn {async} -> subscribe agent://subagent/<handle> -> wait for
// notifications/resources/updated -> resources/read; then the subscribes the
// server must refuse.  Prints one JSON object on stdout.
//
//   node client_v2.mjs <url> [--mode legacy|auto] [--late]
//
// --mode legacy (the SDK's default) runs the 2025-11-25 initialize handshake
// and resources/subscribe; --mode auto probes server/discover and, at
// 2026-07-28, subscribes with subscriptions/listen (refused URIs are then
// reported as what the acknowledgement honoured).  --late waits until
// subagent.status says the run is done before subscribing.  The SDK is found
// under $MCP_PEERS_NODE_MODULES (default: ../peers/node_modules next to this file).
import { pathToFileURL } from "node:url";
import path from "node:path";

const nm = process.env.MCP_PEERS_NODE_MODULES
  ?? path.join(path.dirname(new URL(import.meta.url).pathname), "..", "peers", "node_modules");
const { Client, StreamableHTTPClientTransport } = await import(
  pathToFileURL(path.join(nm, "@modelcontextprotocol", "client", "dist", "index.mjs")).href);

const args = process.argv.slice(2);
const url = args[0];
const late = args.includes("--late");
const mode = args.includes("--mode") ? args[args.indexOf("--mode") + 1] : "legacy";
const updated = [];
let wake = () => {};

const client = new Client({ name: "agentd-interop-ts-v2", version: "2.0.0" },
                          { versionNegotiation: { mode } });
client.setNotificationHandler("notifications/resources/updated", (n) => {
  updated.push(n.params.uri);
  wake();
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const modern = client.getNegotiatedProtocolVersion() === "2026-07-28";

const until = (pred, ms) => new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`timed out waiting (${ms} ms)`)), ms);
  const check = () => { if (pred()) { clearTimeout(timer); resolve(); } };
  wake = check;
  check();
});

const out = { protocolVersion: client.getNegotiatedProtocolVersion() ?? null };
out.tools = (await client.listTools()).tools.map((t) => t.name);
const spawn = await client.callTool({ name: "subagent.spawn",
                                      arguments: { instruction: "quick job", async: true } });
out.spawn = spawn.structuredContent;
const handle = spawn.structuredContent.handle;
const uri = `agent://subagent/${handle}`;
if (late) {
  for (let i = 0; i < 2400; i++) {  // the run is a real child process: bounded, not timed
    const st = await client.callTool({ name: "subagent.status", arguments: { handle } });
    if (st.structuredContent.done) { out.doneBeforeSubscribe = true; break; }
    await new Promise((r) => setTimeout(r, 50));
  }
}
let sub = null;
if (modern) {
  sub = await client.listen({ resourceSubscriptions: [uri] });
  out.honored = sub.honoredFilter;
} else {
  out.subscribe = await client.subscribeResource({ uri });
}
await until(() => updated.includes(uri), 60000);
out.updated = [...updated];
if (sub !== null) {
  out.closed = await sub.closed;  // the run's one update consumed its subscription
}
const read = await client.readResource({ uri });
out.body = JSON.parse(read.contents[0].text);
out.refused = {};
const bad = ["agent://subagent/served.999", "file:///etc/passwd"];
if (modern) {
  const probe = await client.listen({ resourceSubscriptions: bad });
  out.refusedHonored = probe.honoredFilter;
  out.refusedClosed = await probe.closed;
} else {
  for (const b of [...bad, "agent://status"]) {
    try {
      await client.subscribeResource({ uri: b });
      out.refused[b] = { ok: true };
    } catch (e) {
      out.refused[b] = { code: e.code, data: e.data ?? null };
    }
  }
}
out.updatedAtEnd = [...updated];
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
