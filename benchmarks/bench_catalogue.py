"""Catalogue admission: what deciding which listed tools are offered costs.

    python benchmarks/bench_catalogue.py [--tools 2000] [--rounds 5]

1. ``admit``: ``agentd.mcp.client.rules.catalogue.admit`` over ``--tools`` decoded tools
   with realistic schemas (nested objects, ``$defs`` + local ``$ref``, an
   ``x-mcp-header`` parameter, an ``anyOf``), at 2026-07-28 (headers checked)
   and 2025-11-25; anchor: ``tool_header_declarations`` alone, the only check
   ``tools/list`` made before admission existed.  Figure: microseconds per tool
   (best round).
2. ``prune_deep``: cutting a ``tools/list`` answer with one schema 1,000 levels
   deep among ``--tools`` ordinary tools (the session's path when the decoder's
   nesting guard refuses the answer); anchor: ``msgspec`` decoding the same
   answer without the deep tool.  Figure: MiB/s (best round).

Prints one JSON line per benchmark.  Figures only; nothing asserts a time.
"""

from __future__ import annotations

import argparse
import json
import time

import msgspec

from agentd.mcp.client.rules.catalogue import admit, prune_deep
from agentd.mcp.client.rules.param_headers import tool_header_declarations
from agentd.wire import mcp_types as mt


def schema(i: int) -> dict:
    return {
        "type": "object",
        "$defs": {"addr": {"type": "object", "properties": {
            "street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}},
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "query": {"type": "string", "description": f"query {i}"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "home": {"$ref": "#/$defs/addr"},
            "filter": {"anyOf": [{"type": "string"}, {"type": "object", "properties": {
                "field": {"type": "string"}, "op": {"enum": ["eq", "ne", "lt", "gt"]}}}]},
        },
        "required": ["region", "query"],
    }


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    tools = [mt.Tool(name=f"t{i}", inputSchema=schema(i)) for i in range(a.tools)]

    def run(headers: bool) -> None:
        for t in tools:
            admit(t, headers=headers, tasks=False, max_depth=128)

    def anchor() -> None:
        for t in tools:
            tool_header_declarations(t.inputSchema)

    n = len(tools)
    print(json.dumps({"bench": "admit", "tools": n,
                      "us_per_tool_2026": round(best(lambda: run(True), a.rounds) / n * 1e6, 2),
                      "us_per_tool_2025": round(best(lambda: run(False), a.rounds) / n * 1e6, 2),
                      "anchor_header_scan_us_per_tool":
                          round(best(anchor, a.rounds) / n * 1e6, 2)}))

    listed = [{"name": t.name, "inputSchema": t.inputSchema} for t in tools]
    plain = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": listed}}).encode()
    deep = b'{"type":"object","properties":{"x":' * 1000 + b"{}" + b"}}" * 1000
    body = plain[:-3] + b',{"name":"abyss","inputSchema":' + deep + b"}]}}"
    mib = len(body) / 2 ** 20
    cut = best(lambda: prune_deep(body), a.rounds)
    dec = msgspec.json.Decoder()
    floor = best(lambda: dec.decode(plain), a.rounds)
    print(json.dumps({"bench": "prune_deep", "bytes": len(body),
                      "mib_per_s": round(mib / cut, 1),
                      "anchor_msgspec_decode_mib_per_s": round(len(plain) / 2 ** 20 / floor, 1)}))


if __name__ == "__main__":
    main()
