// A TypeScript SDK 1.x MCP server (`@modelcontextprotocol/sdk` 1.32.2): a real
// peer for agentd's interop tests, speaking 2025-11-25 (the SDK 1.x's latest
// revision; it has no 2026-07-28).
//
//     node tests/ts_peers/server_v1.mjs PORT [--stateless]
//
// Run with Node 22 from tests/peers/node_modules/.bin/node.  Module
// resolution: this file lives outside any node_modules tree, so it imports the
// SDK by file URL from tests/peers/node_modules (resolved relative to this
// script, wherever the checkout is); the SDK's own bare imports then resolve
// from its own location.  No NODE_PATH is needed (ESM ignores it anyway).
//
// Streamable HTTP at http://127.0.0.1:PORT/mcp; prints `listening PORT` on
// stdout when ready.  Sessions by default (one McpServer + transport per
// session, the SDK's documented pattern); `--stateless` makes a fresh server
// and transport per request with no session id.
//
// Surface:
//   tools      echo{text} (the text back), fail{} (an isError result),
//              touch{uri} (changes that resource's body and sends
//              notifications/resources/updated{uri} to every session
//              subscribed to it), pad_01..pad_05 (trivial, so the catalogue
//              spans pages).  McpServer's own tools/list never paginates, so
//              tools/list and tools/call are the low-level Server handlers
//              here, paginated PAGE_SIZE tools a page with an opaque cursor.
//   resources  mem://notes/1, mem://notes/2 (text), template mem://item/{id};
//              served by McpServer.registerResource, so an unknown URI gets the
//              SDK's own natural answer (-32602 "Resource ... not found").
//   subscribe  the resources.subscribe capability with resources/subscribe
//              and resources/unsubscribe handlers (per session).
// A hostile or test-only behaviour has no place here: this is the SDK as
// people deploy it.

import { createServer } from "node:http";
import { randomUUID } from "node:crypto";

const MODULES = new URL("../peers/node_modules/", import.meta.url);
const sdk = (p) => import(new URL(`@modelcontextprotocol/sdk/dist/esm/${p}`, MODULES).href);
const { McpServer, ResourceTemplate } = await sdk("server/mcp.js");
const { StreamableHTTPServerTransport } = await sdk("server/streamableHttp.js");
const types = await sdk("types.js");

const port = Number(process.argv[2]);
const stateless = process.argv.includes("--stateless");
const PAGE_SIZE = 3;

const bodies = new Map([
  ["mem://notes/1", "note one"],
  ["mem://notes/2", "note two"],
]);
const subscribers = new Map(); // uri -> Set<McpServer>

const obj = (props, required = []) => ({ type: "object", properties: props, required });
const TOOLS = [
  { name: "echo", description: "Echo the text back.", inputSchema: obj({ text: { type: "string" } }, ["text"]) },
  { name: "fail", description: "Always reports a tool error.", inputSchema: obj({}) },
  { name: "touch", description: "Change a resource and notify its subscribers.",
    inputSchema: obj({ uri: { type: "string" } }, ["uri"]) },
  ...[1, 2, 3, 4, 5].map((i) => ({
    name: `pad_0${i}`, description: `Trivial tool ${i}.`, inputSchema: obj({}),
  })),
];

function text(t, isError = false) {
  return { content: [{ type: "text", text: t }], ...(isError ? { isError: true } : {}) };
}

async function callTool(name, args) {
  switch (name) {
    case "echo": return text(String(args?.text ?? ""));
    case "fail": return text("this tool always fails", true);
    case "touch": {
      const uri = String(args?.uri ?? "");
      const n = (Number((bodies.get(uri) ?? "").split("#")[1]) || 0) + 1;
      bodies.set(uri, `${uri} body #${n}`);
      const targets = [...(subscribers.get(uri) ?? [])];
      await Promise.allSettled(targets.map((s) => s.server.sendResourceUpdated({ uri })));
      return text(`touched ${uri} (${targets.length} subscriber(s))`);
    }
    default:
      if (name.startsWith("pad_")) return text(name);
      throw new types.McpError(types.ErrorCode.InvalidParams, `Tool ${name} not found`);
  }
}

function makeServer() {
  const mcp = new McpServer({ name: "ts-sdk-v1-peer", version: "1.32.2" });
  const read = (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: bodies.get(uri.href) ?? "" }] });
  mcp.registerResource("note-1", "mem://notes/1", { mimeType: "text/plain" }, read);
  mcp.registerResource("note-2", "mem://notes/2", { mimeType: "text/plain" }, read);
  mcp.registerResource("item", new ResourceTemplate("mem://item/{id}", { list: undefined }),
    { mimeType: "text/plain" },
    (uri, { id }) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: bodies.get(uri.href) ?? `item ${id}` }] }));
  const low = mcp.server;
  low.registerCapabilities({ tools: {}, resources: { subscribe: true, listChanged: true } });
  low.setRequestHandler(types.ListToolsRequestSchema, (req) => {
    const start = req.params?.cursor ? Number(Buffer.from(req.params.cursor, "base64url").toString()) : 0;
    if (!Number.isInteger(start) || start < 0 || start > TOOLS.length) {
      throw new types.McpError(types.ErrorCode.InvalidParams, "invalid cursor");
    }
    const end = start + PAGE_SIZE;
    return {
      tools: TOOLS.slice(start, end),
      ...(end < TOOLS.length ? { nextCursor: Buffer.from(String(end)).toString("base64url") } : {}),
    };
  });
  low.setRequestHandler(types.CallToolRequestSchema, (req) => callTool(req.params.name, req.params.arguments));
  low.setRequestHandler(types.SubscribeRequestSchema, (req) => {
    const set = subscribers.get(req.params.uri) ?? new Set();
    set.add(mcp);
    subscribers.set(req.params.uri, set);
    return {};
  });
  low.setRequestHandler(types.UnsubscribeRequestSchema, (req) => {
    subscribers.get(req.params.uri)?.delete(mcp);
    return {};
  });
  return mcp;
}

function forget(mcp) {
  for (const set of subscribers.values()) set.delete(mcp);
}

const sessions = new Map(); // session id -> transport

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const raw = Buffer.concat(chunks).toString("utf8");
  try { return raw ? JSON.parse(raw) : undefined; } catch { return undefined; }
}

async function handle(req, res) {
  const url = new URL(req.url, `http://${req.headers.host}`);
  if (url.pathname !== "/mcp") { res.writeHead(404).end(); return; }
  const body = req.method === "POST" ? await readBody(req) : undefined;
  if (stateless) {
    const mcp = makeServer();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => { transport.close(); mcp.close(); forget(mcp); });
    await mcp.connect(transport);
    await transport.handleRequest(req, res, body);
    return;
  }
  const sid = req.headers["mcp-session-id"];
  let transport = sid ? sessions.get(sid) : undefined;
  if (!transport && !sid && req.method === "POST" && types.isInitializeRequest(body)) {
    const mcp = makeServer();
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => { sessions.set(id, transport); },
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
      forget(mcp);
    };
    await mcp.connect(transport);
  }
  if (!transport) {
    res.writeHead(sid ? 404 : 400, { "content-type": "application/json" }).end(JSON.stringify({
      jsonrpc: "2.0", id: null,
      error: { code: -32000, message: sid ? "Session not found" : "Bad Request: no valid session id" },
    }));
    return;
  }
  await transport.handleRequest(req, res, body);
}

const http = createServer((req, res) => {
  handle(req, res).catch((err) => {
    process.stderr.write(`request failed: ${err?.stack ?? err}\n`);
    if (!res.headersSent) res.writeHead(500).end();
  });
});
http.listen(port, "127.0.0.1", () => { process.stdout.write(`listening ${port}\n`); });
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => { http.close(); process.exit(0); });
