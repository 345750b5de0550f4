// A TypeScript SDK 2.x MCP server (`@modelcontextprotocol/server` 2.4.0 with
// `@modelcontextprotocol/node`): a real peer for agentd's interop tests,
// speaking both 2026-07-28 and 2025-11-25 on one endpoint.
//
//     node tests/ts_peers/server_v2.mjs PORT [--stateless] [--legacy-only]
//
// Run with Node 22 from tests/peers/node_modules/.bin/node.  Module
// resolution: this file lives outside any node_modules tree, so it imports the
// SDK by file URL from tests/peers/node_modules (resolved relative to this
// script); the SDK's own bare imports then resolve from its own location.  No
// NODE_PATH is needed (ESM ignores it anyway).
//
// Streamable HTTP at http://127.0.0.1:PORT/mcp; prints `listening PORT` on
// stdout when ready.  Serving, both the SDK's documented patterns:
//   default      2026-07-28 requests go to `createMcpHandler(factory,
//                {legacy: "reject"})` (per-request instances,
//                subscriptions/listen on its in-process bus); 2025-era
//                requests (`isLegacyRequest`) go to a sessionful
//                NodeStreamableHTTPServerTransport, one McpServer a session.
//   --stateless  `createMcpHandler(factory)` alone: 2026-07-28 plus the SDK's
//                own stateless 2025 fallback (no sessions, GET/DELETE 405).
//   --legacy-only  2025-11-25 alone, as a deployment that keeps its 2025
//                wiring does: every request goes to the sessionful transport
//                (or, with --stateless, to the SDK's `legacyStatelessFallback`),
//                so a 2026-07-28 probe is refused the way a 2025 server
//                refuses it and a client falls back to `initialize`.
//
// Surface:
//   tools      echo{text} (the text back), fail{} (an isError result),
//              touch{uri} (changes that resource's body and sends
//              notifications/resources/updated{uri} to every 2025 session
//              subscribed to it and, at 2026-07-28, to every listen stream
//              that asked for it), pad_01..pad_05 (trivial, so the catalogue
//              spans pages).  McpServer's own tools/list never paginates, so
//              tools/list and tools/call are the low-level Server handlers
//              here, paginated PAGE_SIZE tools a page with an opaque cursor.
//   resources  mem://notes/1, mem://notes/2 (text), template mem://item/{id};
//              served by McpServer.registerResource, so an unknown URI gets the
//              SDK's own natural answer (ResourceNotFoundError: -32602 with
//              data.uri).
//   subscribe  the resources.subscribe capability with resources/subscribe
//              and resources/unsubscribe handlers (2025 sessions).

import { createServer } from "node:http";
import { randomUUID } from "node:crypto";

const MODULES = new URL("../peers/node_modules/", import.meta.url);
const load = (p) => import(new URL(`@modelcontextprotocol/${p}`, MODULES).href);
const srv = await load("server/dist/index.mjs");
const nodeAdapter = await load("node/dist/index.mjs");
const { McpServer, ResourceTemplate, ProtocolError, ProtocolErrorCode, createMcpHandler,
  isLegacyRequest, isInitializeRequest, legacyStatelessFallback } = srv;
const { NodeStreamableHTTPServerTransport, toNodeHandler, toWebRequest } = nodeAdapter;

const port = Number(process.argv[2]);
const stateless = process.argv.includes("--stateless");
const legacyOnly = process.argv.includes("--legacy-only");
const PAGE_SIZE = 3;

const bodies = new Map([
  ["mem://notes/1", "note one"],
  ["mem://notes/2", "note two"],
]);
const subscribers = new Map(); // uri -> Set<McpServer> (2025 sessions)
let modern; // the createMcpHandler handler (its notify reaches listen streams)

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
      modern?.notify.resourceUpdated(uri);
      return text(`touched ${uri} (${targets.length} session subscriber(s))`);
    }
    default:
      if (name.startsWith("pad_")) return text(name);
      throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Tool ${name} not found`);
  }
}

function makeServer({ sessions = false, listen = false } = {}) {
  const mcp = new McpServer({ name: "ts-sdk-v2-peer", version: "2.4.0" });
  const read = (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: bodies.get(uri.href) ?? "" }] });
  mcp.registerResource("note-1", "mem://notes/1", { mimeType: "text/plain" }, read);
  mcp.registerResource("note-2", "mem://notes/2", { mimeType: "text/plain" }, read);
  mcp.registerResource("item", new ResourceTemplate("mem://item/{id}", { list: undefined }),
    { mimeType: "text/plain" },
    (uri, { id }) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: bodies.get(uri.href) ?? `item ${id}` }] }));
  const low = mcp.server;
  // subscribe is true where updates can reach the client: a 2025 session
  // (resources/subscribe) or 2026-07-28 (subscriptions/listen); the stateless
  // 2025 fallback has no channel for them, so it does not claim it.
  low.registerCapabilities({ tools: {}, resources: { subscribe: sessions || listen, listChanged: true } });
  low.setRequestHandler("tools/list", (req) => {
    const start = req.params?.cursor ? Number(Buffer.from(req.params.cursor, "base64url").toString()) : 0;
    if (!Number.isInteger(start) || start < 0 || start > TOOLS.length) {
      throw new ProtocolError(ProtocolErrorCode.InvalidParams, "invalid cursor");
    }
    const end = start + PAGE_SIZE;
    return {
      tools: TOOLS.slice(start, end),
      ...(end < TOOLS.length ? { nextCursor: Buffer.from(String(end)).toString("base64url") } : {}),
    };
  });
  low.setRequestHandler("tools/call", (req) => callTool(req.params.name, req.params.arguments));
  if (sessions) {
    low.setRequestHandler("resources/subscribe", (req) => {
      const set = subscribers.get(req.params.uri) ?? new Set();
      set.add(mcp);
      subscribers.set(req.params.uri, set);
      return {};
    });
    low.setRequestHandler("resources/unsubscribe", (req) => {
      subscribers.get(req.params.uri)?.delete(mcp);
      return {};
    });
  }
  return mcp;
}

const onerror = (err) => process.stderr.write(`mcp error: ${err?.stack ?? err}\n`);
modern = createMcpHandler((ctx) => makeServer({ listen: ctx.era === "modern" }), { legacy: stateless ? "stateless" : "reject", onerror });
const modernNode = toNodeHandler(modern, { onerror });
const legacyStateless = toNodeHandler({ fetch: legacyStatelessFallback(() => makeServer(), onerror) },
  { onerror });
const sessions = new Map(); // session id -> transport

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const raw = Buffer.concat(chunks).toString("utf8");
  try { return raw ? JSON.parse(raw) : undefined; } catch { return undefined; }
}

async function legacy(req, res, body) {
  const sid = req.headers["mcp-session-id"];
  let transport = sid ? sessions.get(sid) : undefined;
  if (!transport && !sid && req.method === "POST" && isInitializeRequest(body)) {
    const mcp = makeServer({ sessions: true });
    transport = new NodeStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => { sessions.set(id, transport); },
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
      for (const set of subscribers.values()) set.delete(mcp);
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

async function handle(req, res) {
  const url = new URL(req.url, `http://${req.headers.host}`);
  if (url.pathname !== "/mcp") { res.writeHead(404).end(); return; }
  const body = req.method === "POST" ? await readBody(req) : undefined;
  if (legacyOnly) {
    await (stateless ? legacyStateless(req, res, body) : legacy(req, res, body));
    return;
  }
  if (stateless) { await modernNode(req, res, body); return; }
  const probe = await toWebRequest(req, body);
  if (await isLegacyRequest(probe, body)) await legacy(req, res, body);
  else await modernNode(req, res, body);
}

const http = createServer((req, res) => {
  handle(req, res).catch((err) => {
    onerror(err);
    if (!res.headersSent) res.writeHead(500).end();
  });
});
http.listen(port, "127.0.0.1", () => { process.stdout.write(`listening ${port}\n`); });
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => { http.close(); process.exit(0); });
