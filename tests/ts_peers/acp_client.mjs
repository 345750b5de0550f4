// The TypeScript ACP SDK (@agentclientprotocol/sdk 2.x, stable v1 API) as the
// client of a real `agentd acp` child process, sending the sequence Harbor's
// ACP runner sends: initialize -> session/new {cwd, mcpServers: one http
// entry with `headers: []`} -> session/set_config_option {model} ->
// session/prompt; every session/update of the prompt is read through the SDK's
// ActiveSession queue, in arrival order, until its stop.  Prints one JSON
// object on stdout: {init, session, setModel, updates, stop}.
//
//   node acp_client.mjs <cwd> <mcp-url> <model> <prompt> -- <agentd argv...>
//
// The SDK is found under $MCP_PEERS_NODE_MODULES (default: ../peers/node_modules
// next to this file).  agentd's stderr (its log) is passed through.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import path from "node:path";

const nm = process.env.MCP_PEERS_NODE_MODULES
  ?? path.join(path.dirname(new URL(import.meta.url).pathname), "..", "peers", "node_modules");
const { client, ndJsonStream, PROTOCOL_VERSION } = await import(pathToFileURL(
  path.join(nm, "@agentclientprotocol", "sdk", "dist", "v1", "stable", "acp.js")).href);

const argv = process.argv.slice(2);
const cut = argv.indexOf("--");
const [cwd, mcpUrl, model, text] = argv.slice(0, cut);
const [command, ...args] = argv.slice(cut + 1);

const agent = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
const exited = new Promise((resolve) => agent.on("exit", (code) => resolve(code)));

const out = await client().connectWith(stream, async (ctx) => {
  const result = {};
  result.init = await ctx.request("initialize", {
    protocolVersion: PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
  });
  const session = await ctx.buildSession({
    cwd, mcpServers: [{ type: "http", name: "sdk", url: mcpUrl, headers: [] }],
  }).start();
  result.session = session.newSessionResponse;
  result.setModel = await ctx.request("session/set_config_option", {
    sessionId: session.sessionId, configId: "model", value: model,
  });
  const stop = session.prompt(text);
  result.updates = [];
  for (;;) {
    const message = await session.nextUpdate();
    if (message.kind === "stop") break;
    result.updates.push(message.update);
  }
  result.stop = await stop;
  session.dispose();
  return result;
});
agent.stdin.end();  // end of input: agentd exits 0
out.exitCode = await exited;
process.stdout.write(JSON.stringify(out) + "\n");
