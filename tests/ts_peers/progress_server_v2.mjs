// A TypeScript SDK 2.x server (@modelcontextprotocol/server, createMcpHandler)
// with long tools, for agentd's tool-call limits (tests/test_client_progress.py).
// It serves 2026-07-28 and, through the SDK's stateless legacy fallback,
// 2025-11-25 on one endpoint: http://127.0.0.1:<port>/mcp.
//
//   node progress_server_v2.mjs <port>
//
// tools: heartbeat{} reports progress (1, 2, 3, ...) every 50 ms until
// POST /release, then returns "released after N"; silent{} waits without a
// word until cancelled; echo{text}.  A tool whose request is cancelled (its
// abort signal fires) records it.  GET /stats -> {"cancelled": {tool: n},
// "running": {tool: seconds since its latest start}, "progress_sent": n,
// "calls": n}.  The SDK is found under $MCP_PEERS_NODE_MODULES (default:
// ../peers/node_modules next to this file).
import http from "node:http";
import path from "node:path";
import { pathToFileURL } from "node:url";

const nm = process.env.MCP_PEERS_NODE_MODULES
  ?? path.join(path.dirname(new URL(import.meta.url).pathname), "..", "peers", "node_modules");
const load = (...parts) => import(pathToFileURL(path.join(nm, ...parts)).href);
const { McpServer, createMcpHandler } = await load(
  "@modelcontextprotocol", "server", "dist", "index.mjs");
const { toNodeHandler } = await load("@modelcontextprotocol", "node", "dist", "index.mjs");
const { z } = await load("zod", "index.js");

const port = Number(process.argv[2]);
const stats = { cancelled: {}, running: {}, progress_sent: 0, calls: 0 };
const started = {};
let gate = newGate();

function newGate() {
  let open;
  const opened = new Promise((resolve) => { open = resolve; });
  return { opened, open };
}

function until(ms, signal, ...also) {
  return Promise.race([
    new Promise((resolve) => setTimeout(resolve, ms)),
    new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true })),
    ...also,
  ]);
}

function recorded(name, fn) {
  return async (args, ctx) => {
    stats.calls += 1;
    started[name] = performance.now();
    const signal = ctx.mcpReq.signal;
    const onAbort = () => { stats.cancelled[name] = (stats.cancelled[name] ?? 0) + 1; };
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      return await fn(args, ctx, signal);
    } finally {
      delete started[name];
      signal.removeEventListener("abort", onAbort);
    }
  };
}

const text = (t) => ({ content: [{ type: "text", text: t }] });

function factory() {
  const server = new McpServer({ name: "progress-ts-v2", version: "2.0.0" });
  server.registerTool("heartbeat", {
    description: "Report progress every 50 ms until released.", inputSchema: z.object({}),
  }, recorded("heartbeat", async (_args, ctx, signal) => {
    const token = ctx.mcpReq._meta?.progressToken;
    const mine = gate;
    let released = false;
    mine.opened.then(() => { released = true; });
    let n = 0;
    while (!released && !signal.aborted) {
      n += 1;
      if (token !== undefined) {
        await ctx.mcpReq.notify({
          method: "notifications/progress", params: { progressToken: token, progress: n },
        });
        stats.progress_sent += 1;
      }
      await until(50, signal, mine.opened);
    }
    return text(`released after ${n}`);
  }));
  server.registerTool("silent", {
    description: "Wait without a word until cancelled.", inputSchema: z.object({}),
  }, recorded("silent", async (_args, _ctx, signal) => {
    await until(3_600_000, signal);
    return text("cancelled");
  }));
  server.registerTool("echo", {
    description: "Echo the text back.", inputSchema: z.object({ text: z.string() }),
  }, async ({ text: t }) => { stats.calls += 1; return text(t); });
  return server;
}

const mcp = toNodeHandler(createMcpHandler(factory, { responseMode: "auto" }));

http.createServer((req, res) => {
  if (req.url === "/stats") {
    const now = performance.now();
    stats.running = Object.fromEntries(
      Object.entries(started).map(([k, v]) => [k, (now - v) / 1000]));
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(stats));
  } else if (req.url === "/release" && req.method === "POST") {
    const old = gate;
    gate = newGate();
    old.open();
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end('{"released": true}');
  } else if (req.url.startsWith("/mcp")) {
    mcp(req, res);
  } else {
    res.writeHead(404);
    res.end();
  }
}).listen(port, "127.0.0.1", () => console.log(`listening ${port}`));
