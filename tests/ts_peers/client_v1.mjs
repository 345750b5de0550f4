// A TypeScript SDK 1.x client (@modelcontextprotocol/sdk) of agentd's self-MCP,
// as a third-party harness drives it: initialize -> tools/list ->
// subagent.spawn {async} -> resources/subscribe agent://subagent/<handle> ->
// wait for notifications/resources/updated -> resources/read; then the
// subscribes the server must refuse.  Prints one JSON object on stdout.
//
//   node client_v1.mjs <url> [--late]
//
// --late waits until subagent.status says the run is done before subscribing
// (the late subscribe: the update must still arrive).  The SDK is found under
// $MCP_PEERS_NODE_MODULES (default: ../peers/node_modules next to this file).
import { pathToFileURL } from "node:url";
import path from "node:path";

const nm = process.env.MCP_PEERS_NODE_MODULES
  ?? path.join(path.dirname(new URL(import.meta.url).pathname), "..", "peers", "node_modules");
const load = (p) => import(pathToFileURL(path.join(nm, "@modelcontextprotocol", "sdk", "dist", "esm", p)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
const { ResourceUpdatedNotificationSchema } = await load("types.js");

const [url, ...flags] = process.argv.slice(2);
const late = flags.includes("--late");
const updated = [];
let wake = () => {};

const client = new Client({ name: "agentd-interop-ts-v1", version: "1.0.0" });
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  updated.push(n.params.uri);
  wake();
});
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);

const until = (pred, ms) => new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`timed out waiting (${ms} ms)`)), ms);
  const check = () => { if (pred()) { clearTimeout(timer); resolve(); } };
  wake = check;
  check();
});

const out = { protocolVersion: transport.protocolVersion ?? null };
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
out.subscribe = await client.subscribeResource({ uri });
await until(() => updated.includes(uri), 60000);
out.updated = [...updated];
const read = await client.readResource({ uri });
out.body = JSON.parse(read.contents[0].text);
out.refused = {};
for (const bad of ["agent://subagent/served.999", "agent://status", "file:///etc/passwd"]) {
  try {
    await client.subscribeResource({ uri: bad });
    out.refused[bad] = { ok: true };
  } catch (e) {
    out.refused[bad] = { code: e.code, data: e.data ?? null };
  }
}
out.updatedAtEnd = [...updated];
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
