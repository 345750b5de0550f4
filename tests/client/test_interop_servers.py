"""agentd's client against the MCP servers people run, at every revision each speaks.

Real peers on loopback (docs/peers.md lists them): FastMCP 4
(tests/support/fastmcp_server.py), the official SDK 2.3's ``MCPServer``
(tests/support/sdk_mcpserver.py) and low-level ``Server`` (tests/support/sdk_servers.py), the
TypeScript SDK 1.x and 2.x (tests/ts_peers/server_v1.mjs, server_v2.mjs) and
server-everything.  Each is driven through the library client for the catalogue
details (tools listed with every page drained, a call, an ``isError`` result,
resources and templates listed, a read, a missing resource read as "resource
not found" with one info line and no warning), and through one real ``agentd``
CLI run per family with a playback intelligence.  The catalogue exclusions
(a bad declaration leaves one tool out, never the server) run against
tests/support/catalog_server.py and server-everything's task-only tool.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
from agentd_proc import run_agentd
from hypothesis import given, settings
from hypothesis import strategies as st
from logcapture import events
from peers import (
    PeerProcess,
    ensure_npm_peers,
    free_port,
    npm_env,
    python_peer,
    require_modules,
    ts_peer,
)

from agentd.config.load import load_config_file
from agentd.config.model import ServerSpec
from agentd.errors import ConfigError, RPCError
from agentd.mcp import MCPClient, Toolbox
from agentd.mcp.client.rules.catalogue import Excluded, admit, prune_deep
from agentd.mcp.client.rules.faults import resource_missing
from agentd.mcp.client.rules.session import ClientSession, Resolved
from agentd.wire import mcp_types as mt

MODERN, LEGACY = "2026-07-28", "2025-11-25"
SURFACE_TOOLS = {"echo", "fail", "touch", "pad_01", "pad_02", "pad_03", "pad_04", "pad_05"}
NOTES = {"mem://notes/1", "mem://notes/2"}


@dataclass(frozen=True)
class Case:
    """One peer at one revision, and what its surface is."""

    family: str
    start: tuple  # ("ts", major, args) | ("py", script, args) | ("everything",)
    revision: str
    tools: frozenset[str] = frozenset(SURFACE_TOOLS)
    exact_tools: bool = True  # the catalogue is exactly ``tools``
    echo: tuple[str, dict, str] = ("echo", {"text": "hi"}, "hi")
    fail: str | None = "fail"
    resources: frozenset[str] = frozenset(NOTES)
    read: tuple[str, str] = ("mem://notes/1", "note one")
    template: str = "mem://item/{id}"
    missing: str = "mem://notes/404"
    modules: tuple[str, ...] = field(default=())


FASTMCP = ("fastmcp", "uvicorn")
SDK = ("mcp", "uvicorn", "starlette")
CASES = [
    Case("fastmcp", ("py", "fastmcp_server.py", ()), MODERN, modules=FASTMCP),
    Case("fastmcp", ("py", "fastmcp_server.py", ("--stateless",)), MODERN, modules=FASTMCP),
    Case("fastmcp", ("py", "fastmcp_server.py", ("--legacy-only",)), LEGACY, modules=FASTMCP),
    Case("fastmcp", ("py", "fastmcp_server.py", ("--legacy-only", "--stateless")), LEGACY,
         modules=FASTMCP),
    Case("sdk-mcpserver", ("py", "sdk_mcpserver.py", ()), MODERN, modules=SDK),
    Case("sdk-mcpserver", ("py", "sdk_mcpserver.py", ("--legacy-only",)), LEGACY, modules=SDK),
    Case("sdk-mcpserver", ("py", "sdk_mcpserver.py", ("--legacy-only", "--stateless")), LEGACY,
         modules=SDK),
    Case("sdk-lowlevel", ("py", "sdk_servers.py", ("--era", "modern", "--page-size", "4")),
         MODERN, tools=frozenset({"echo", "fail", "add", "region", "whoami"}), exact_tools=False,
         resources=frozenset({"mem://greeting", "mem://blob"}), read=("mem://greeting", "hello"),
         template="mem://items/{id}", missing="mem://nope", modules=SDK),
    Case("sdk-lowlevel", ("py", "sdk_servers.py", ("--page-size", "4")), LEGACY,
         tools=frozenset({"echo", "fail", "add", "whoami"}), exact_tools=False,
         resources=frozenset({"mem://greeting", "mem://blob"}), read=("mem://greeting", "hello"),
         template="mem://items/{id}", missing="mem://nope", modules=SDK),
    Case("sdk-lowlevel", ("py", "sdk_servers.py", ("--page-size", "4", "--stateless")), LEGACY,
         tools=frozenset({"echo", "fail", "add", "whoami"}), exact_tools=False,
         resources=frozenset({"mem://greeting", "mem://blob"}), read=("mem://greeting", "hello"),
         template="mem://items/{id}", missing="mem://nope", modules=SDK),
    Case("ts-sdk-1", ("ts", 1, ()), LEGACY),
    Case("ts-sdk-1", ("ts", 1, ("--stateless",)), LEGACY),
    Case("ts-sdk-2", ("ts", 2, ()), MODERN),
    Case("ts-sdk-2", ("ts", 2, ("--stateless",)), MODERN),
    Case("ts-sdk-2", ("ts", 2, ("--legacy-only",)), LEGACY),
    Case("ts-sdk-2", ("ts", 2, ("--legacy-only", "--stateless")), LEGACY),
    Case("everything", ("everything",), LEGACY,
         tools=frozenset({"echo", "get-sum", "get-structured-content"}), exact_tools=False,
         echo=("echo", {"message": "hi"}, "Echo: hi"), fail=None,
         resources=frozenset(), read=("demo://resource/static/document/architecture.md", ""),
         template="demo://resource/dynamic/text/{resourceId}",
         missing="demo://resource/static/document/nope.md"),
]


def case_id(c: Case) -> str:
    args = c.start[-1] if isinstance(c.start[-1], tuple) else ()
    flags = [a.lstrip("-") for a in args
             if a.startswith("--") and a not in ("--page-size", "--era")]
    return "-".join([c.family, c.revision, *flags])


def peer_of(c: Case) -> PeerProcess:
    if c.modules:
        require_modules(*c.modules)
    kind = c.start[0]
    if kind == "ts":
        return ts_peer(c.start[1], *c.start[2])
    if kind == "py":
        return python_peer(c.start[1], *c.start[2])
    bin_dir = ensure_npm_peers("mcp-server-everything", "node")
    port = free_port()
    return PeerProcess([str(bin_dir / "mcp-server-everything"), "streamableHttp"], port,
                       env=npm_env({"PORT": str(port)}))


@pytest.fixture(params=CASES, ids=[case_id(c) for c in CASES])
def served(request) -> Iterator[tuple[Case, PeerProcess]]:
    case = request.param
    with peer_of(case) as peer:
        yield case, peer


async def test_catalogue_calls_and_resources(served, logs):
    case, peer = served
    async with MCPClient(ServerSpec(name="peer", url=peer.url), run_id="r",
                         ping_interval=None) as c:
        assert c.protocol_version == case.revision
        assert case.tools <= set(c.tools)
        if case.exact_tools:  # every page drained (the TS peers and FastMCP page by 3)
            assert set(c.tools) == case.tools
        name, args, want = case.echo
        echoed = await c.call_tool(name, args)
        assert (echoed.text, echoed.is_error) == (want, False)
        if case.fail:
            failed = await c.call_tool(case.fail, {})
            assert failed.is_error and "fail" in failed.text
        assert case.resources <= {r.uri for r in c.resources}
        assert case.template in {t.uriTemplate for t in c.resource_templates}
        uri, body = case.read
        got = await c.read_resource(uri)
        assert not got.is_error and body in got.text and got.text
        before = len(logs.getvalue().splitlines())
        missing = await c.read_resource(case.missing)
        assert (missing.is_error, missing.text) == (True, f"resource not found: {case.missing}")
        after = [json.loads(line) for line in logs.getvalue().splitlines()[before:]]
    assert [e["event"] for e in after if e["level"] in ("warning", "error")] == []
    assert [(e["level"], e["uri"]) for e in after if e["event"] == "mcp.resource.missing"] \
        == [("info", case.missing)]


# -- one real CLI run per family ---------------------------------------------------

CLI_CASES = [c for c in CASES if c.start in {
    ("py", "fastmcp_server.py", ()), ("py", "sdk_mcpserver.py", ("--legacy-only",)),
    ("py", "sdk_servers.py", ("--era", "modern", "--page-size", "4")),
    ("ts", 1, ()), ("ts", 2, ()), ("everything",)}]


@pytest.mark.parametrize("case", CLI_CASES, ids=[case_id(c) for c in CLI_CASES])
async def test_cli_run_calls_a_tool_and_reads_a_missing_resource(case, tmp_path: Path,
                                                                   agentd_bin):
    name, args, want = case.echo
    play = tmp_path / "interop.playback.json"
    play.write_text(json.dumps({"playback": 1, "turns": [
        {"tool_calls": [{"name": f"peer__{name}", "arguments": args}]},
        {"expect": want, "tool_calls": [{"name": "agentd__read_resource",
                                         "arguments": {"uri": case.missing}}]},
        {"expect": f"resource not found: {case.missing}", "content": "done"}]}))
    with peer_of(case) as peer:
        done = await run_agentd(agentd_bin, [
            "--instruction", "use the peer", "--intelligence", f"playback:{play}",
            "--mcp", f"peer={peer.url}", "--ping-interval", "60"])
    assert done.rc == 0, done.stderr
    assert done.result["status"] == "completed"
    [handshake] = done.events("mcp.handshake")
    assert handshake["protocol_version"] == case.revision
    assert [e["uri"] for e in done.events("mcp.resource.missing")] == [case.missing]
    assert done.events("tool.fault") == []


# -- the catalogue: one bad declaration leaves one tool out -------------------------


@pytest.fixture(scope="module", params=["modern", "legacy"])
def catalog(request):
    require_modules(*SDK)
    with python_peer("catalog_server.py", "--era", request.param) as peer:
        yield request.param, peer


async def test_bad_declarations_exclude_one_tool_each(catalog, logs):
    era, peer = catalog
    async with MCPClient(ServerSpec(name="cat", url=peer.url), ping_interval=None) as c:
        modern = era == "modern"
        assert c.protocol_version == (MODERN if modern else LEGACY)
        kept = {"echo", "nullable", "maybe_task", "external_ref"}
        excluded = {"deep", "abyss", "dangling_ref"}
        # x-mcp-header only counts at 2026-07-28; the SDK sends no execution there
        (excluded if modern else kept).add("two_types")
        (kept if modern else excluded).add("needs_task")
        assert set(c.tools) == kept
        assert set(c.rejected_tools) == excluded
        reasons = c.rejected_tools
        assert "deeper than 128" in reasons["deep"]
        assert "deeper than 128" in reasons["abyss"]  # cut by prune_deep, then excluded
        assert "#/$defs/missing" in reasons["dangling_ref"]
        if modern:
            assert "['string', 'integer']" in reasons["two_types"]
            # a nullable header: kept, mirrored when a string, absent when null
            assert c.tools["nullable"].param_headers == (("Mcp-Param-Region", ("region",)),)
            sent = json.loads((await c.call_tool("nullable", {"region": "eu"})).text)
            assert sent["headers"].get("mcp-param-region") == "eu"
            sent = json.loads((await c.call_tool("nullable", {"region": None})).text)
            assert "mcp-param-region" not in sent["headers"]
        else:
            assert "task augmentation" in reasons["needs_task"]
        optional = await c.call_tool("maybe_task", {})
        assert not optional.is_error and '"tool": "maybe_task"' in optional.text
    lines = events(logs, "mcp.tools.excluded")
    assert sorted((e["server"], e["tool"], e["level"]) for e in lines) == sorted(
        ("cat", t, "warning") for t in excluded)
    assert all(e["reason"] == reasons[e["tool"]] for e in lines)


async def test_everything_task_only_tool_is_left_out(logs):
    case = next(c for c in CASES if c.family == "everything")
    with peer_of(case) as peer:
        async with MCPClient(ServerSpec(name="everything", url=peer.url),
                             ping_interval=None) as c:
            assert "simulate-research-query" not in c.tools
            assert "task augmentation" in c.rejected_tools["simulate-research-query"]
            assert {"echo", "get-sum"} <= set(c.tools)
    [line] = [e for e in events(logs, "mcp.tools.excluded")
              if e["tool"] == "simulate-research-query"]
    assert line["server"] == "everything"


def test_admission_rules():
    """The exclusion rule itself: one pure call per listed tool, no recursion."""
    deep: dict = {"type": "string"}
    for _ in range(2000):  # far beyond the interpreter's stack, measured without it
        deep = {"type": "object", "properties": {"x": deep}}
    tool = mt.Tool(name="deep", inputSchema=deep)
    ex = admit(tool, headers=True, tasks=False, max_depth=128)
    assert isinstance(ex, Excluded) and "deeper than 128" in ex.reason
    ok = mt.Tool(name="ok", inputSchema={"type": "object", "$defs": {"a": {"type": "string"}},
                                         "properties": {"a": {"$ref": "#/$defs/a"},
                                                        "b": {"$ref": "#anchor"},
                                                        "c": {"$anchor": "anchor"},
                                                        "$ref": {"type": "string"}}})
    assert admit(ok, headers=True, tasks=False, max_depth=128) == ()
    odd = {"type": "object", "properties": {"y": {"anyOf": [{"type": "string"}]},
                                            "x": {"$ref": "#/properties/y/anyOf/\u00b2"}}}
    ex = admit(mt.Tool(name="odd", inputSchema=odd), headers=False, tasks=False, max_depth=128)
    assert isinstance(ex, Excluded) and "does not resolve" in ex.reason
    for bad in ({"$ref": 7}, {"$ref": "#/nope"}, {"$ref": "#missing-anchor"}):
        tool = mt.Tool(name="b", inputSchema={"type": "object", "properties": {"x": bad}})
        assert isinstance(admit(tool, headers=False, tasks=False, max_depth=128), Excluded)
    task = mt.Tool(name="t", inputSchema={}, execution=mt.ToolExecution(taskSupport="required"))
    ex = admit(task, headers=False, tasks=False, max_depth=128)
    assert isinstance(ex, Excluded) and "task augmentation" in ex.reason
    assert admit(task, headers=False, tasks=True, max_depth=128) == ()


@pytest.mark.parametrize("depth", [0, 257])
def test_max_schema_depth_is_bounded_in_the_config_file(tmp_path: Path, depth: int):
    cfg = tmp_path / "agentd.toml"
    cfg.write_text('[[mcp_servers]]\nname = "s"\nurl = "http://127.0.0.1:9/mcp"\n'
                   f"max_schema_depth = {depth}\n")
    with pytest.raises(ConfigError, match=r"max_schema_depth must be 1\.\.256"):
        load_config_file(str(cfg))



def _deep_json(levels: int) -> bytes:
    return b'{"type":"object","properties":{"x":' * levels + b"{}" + b"}}" * levels


def test_prune_deep_cuts_only_what_is_too_deep():
    assert prune_deep(b'{"a":[1,{"b":"x}]\\"["}],"c":[[[1]]]}', 2) == \
        b'{"a":[1,null],"c":[null]}'
    assert prune_deep(b'{"a":[1]}', 2) == b'{"a":[1]}'
    for broken in (b'{"a":[}', b'{"a":"x', b"]", b'{"a":1}}'):
        assert prune_deep(broken, 8) is None
    cut = prune_deep(b'{"t":' + _deep_json(5000) + b', "s": "{["}')
    assert cut is not None and json.loads(cut)["s"] == "{["


def _ready_session() -> ClientSession:
    s = ClientSession(client_version="9.9.9")
    rid, _ = s.start_initialize()
    (ev,) = s.receive(json.dumps({"jsonrpc": "2.0", "id": rid, "result": {
        "protocolVersion": LEGACY, "capabilities": {"tools": {}},
        "serverInfo": {"name": "s", "version": "1"}}}))
    s.finish_initialize(ev.result)
    return s


def test_only_a_listing_is_cut_any_other_deep_answer_is_refused():
    s = _ready_session()
    deep_tool = b'{"name":"abyss","inputSchema":' + _deep_json(1500) + b"}"
    rid, _ = s.request(mt.TOOLS_LIST)
    (ev,) = s.receive(b'{"jsonrpc":"2.0","id":%d,"result":{"tools":[%s,{"name":"ok",'
                      b'"inputSchema":{}}]}}' % (rid, deep_tool))
    assert isinstance(ev, Resolved)
    listed = msgspec.json.decode(ev.result, type=mt.ListToolsResult).tools
    assert [t.name for t in listed] == ["abyss", "ok"]
    ex = admit(listed[0], headers=False, tasks=False, max_depth=256)
    assert isinstance(ex, Excluded) and "deeper than" in ex.reason
    garbage = s.garbage
    rid, _ = s.request(mt.TOOLS_CALL, {"name": "x", "arguments": {}})
    assert s.receive(b'{"jsonrpc":"2.0","id":%d,"result":{"content":[],"structuredContent":'
                     b'%s}}' % (rid, _deep_json(1500))) == []
    assert s.garbage == garbage + 1  # refused, never a silently cut result


@pytest.mark.parametrize(("code", "message", "data", "missing"), [
    (-32002, "Resource not found", {"uri": "a://b"}, True),
    (-32602, "Unknown resource: a://b", {"uri": "a://b"}, True),
    (-32602, "MCP error -32602: Resource a://b not found", None, True),
    (-32602, "Resource URI a://b is invalid", {"uri": "a://b", "reason": "invalid_uri"}, False),
    (-32602, "Invalid params: uri must be a string", None, False),
    (-32603, "Resource not found", {"uri": "a://b"}, False),
])
def test_resource_missing_is_one_rule(code, message, data, missing):
    assert resource_missing(RPCError(code, message, data, side="remote")) is missing


async def test_cli_serves_the_rest_of_a_catalogue_with_bad_tools(catalog, tmp_path: Path,
                                                                agentd_bin):
    """Before: the whole server failed its handshake (exit 6) for one bad tool."""
    _, peer = catalog
    play = tmp_path / "catalog.playback.json"
    play.write_text(json.dumps({"playback": 1, "turns": [
        {"tool_calls": [{"name": "cat__echo", "arguments": {"text": "still here"}}]},
        {"expect": "still here", "content": "done"}]}))
    done = await run_agentd(agentd_bin, [
        "--instruction", "use the catalogue", "--intelligence", f"playback:{play}",
        "--mcp", f"cat={peer.url}", "--ping-interval", "60"])
    assert done.rc == 0, done.stderr
    excluded = {e["tool"] for e in done.events("mcp.tools.excluded")}
    assert {"deep", "abyss", "dangling_ref"} <= excluded
    assert all(e["server"] == "cat" for e in done.events("mcp.tools.excluded"))


_KEYS = ["type", "properties", "items", "$ref", "$defs", "$anchor", "anyOf", "x-mcp-header",
         "const", "enum", "required", "definitions", "$dynamicRef", "patternProperties", "a"]
_SCALARS = (st.none() | st.booleans() | st.integers() | st.text(max_size=8)
            | st.sampled_from(["#", "#/", "#/$defs/a", "#/properties/a", "#a", "string",
                               "integer", "null", "Region", "#/properties/a/items/²"]))
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(_KEYS), inner, max_size=5), max_leaves=40)


@settings(max_examples=200, deadline=None)
@given(schema=st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=6),
       headers=st.booleans(), depth=st.integers(1, 12))
def test_admission_raises_nothing_but_its_own_exclusion(schema, headers, depth):
    decls = admit(mt.Tool(name="t", inputSchema=schema), headers=headers, tasks=False,
                  max_depth=depth)
    if isinstance(decls, Excluded):
        assert decls.reason
    else:
        assert isinstance(decls, tuple)


@settings(max_examples=200, deadline=None)
@given(value=_JSON, limit=st.integers(1, 6))
def test_prune_deep_keeps_shallow_json_and_bounds_deep_json(value, limit):
    data = json.dumps(value).encode()
    cut = prune_deep(data, limit)
    assert cut is not None
    pruned = json.loads(cut)

    def depth(v) -> int:
        kids = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if kids is None else 1 + max(map(depth, kids), default=0)

    assert depth(pruned) <= limit
    if depth(value) <= limit:
        assert pruned == value


@pytest.mark.parametrize(("major", "flags", "revision"), [
    (1, (), LEGACY), (2, (), MODERN), (2, ("--legacy-only",), LEGACY)])
async def test_ts_peers_touch_reaches_a_subscriber(major, flags, revision):
    """The TS peers' subscription surface (the reactive tests build on it):
    resources/subscribe + GET stream at 2025-11-25, subscriptions/listen at 2026-07-28."""
    with ts_peer(major, *flags) as peer:
        async with Toolbox([ServerSpec(name="ts", url=peer.url)], ping_interval=None) as tb:
            assert tb.clients["ts"].protocol_version == revision
            assert await tb.subscribe("mem://notes/2")
            await tb.call("ts__touch", {"uri": "mem://notes/2"})
            async with asyncio.timeout(30):  # a bound on the wait, not a timing assertion
                server, uri, obs = await tb.next_update()
    assert (server, uri, obs.text) == ("ts", "mem://notes/2", "mem://notes/2 body #1")
