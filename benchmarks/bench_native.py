"""Throughput of agentd_native: compiled twin vs pure-Python twin.

Run:  python benchmarks/bench_native.py [--mib 64] [--repeat 5]
          [--chunks 16KiB,mixed] [--profiles mcp,small,intl,bulk]

Feeds a 64 MiB stream, cut into chunks, to each implementation and prints one
JSON line per (benchmark, implementation, chunking):

    {"bench": "sse_parse/mcp", "impl": "native", "mib_s": ..., "msgs_s": ...,
     "cpu_mib_s": ..., "chunk": "16KiB", "mib": 64.0, "msgs": ...}

then one ratio line per (benchmark, chunking):

    {"bench": "sse_parse/mcp", "chunk": "16KiB", "ratio": ..., "cpu_ratio": ...}

``mib_s``/``msgs_s``/``ratio`` use wall-clock time, ``cpu_*`` process CPU time
(steadier on a shared machine).  Best of ``--repeat`` runs.

The SSE stream is MCP Streamable-HTTP traffic: ``event: message``, ``id:`` and
one ``data:`` line of JSON-RPC per event (progress notifications, tool results
of varied size); the frame stream carries the same JSON-RPC bodies with 4-byte
length prefixes, as on the control wire.  Profiles (see ``PROFILES``) vary the
message sizes and the share of non-ASCII text.  Chunkings: fixed 16 KiB /
64 KiB / 1 MiB reads, or ``mixed`` socket-like reads of 1 B .. 256 KiB.
When the extension is not built, only "python" lines are printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import agentd_native  # noqa: E402
from agentd_native import framing as native_framing  # noqa: E402
from agentd_native import sse as native_sse  # noqa: E402

MIB = 1024 * 1024


def load_pure(name: str):
    """Load agentd_native/<name>.py itself, even when the extension exists."""
    path = Path(agentd_native.__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"agentd_native._bench_pure_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ASCII_WORDS = (
    "the agent tool result stream file line value ok error def return import self "
    "None True {} [] 0 1 42 200 path/to/module.py: TODO: warning: INFO DEBUG"
).split()
INTL_WORDS = "résumé naïve ünïcode 数据 東京 данные ключ ✓ →".split()


def jsonrpc_bodies(
    rng: random.Random, count: int, large_share: float, intl_share: float, max_text: int
) -> list[bytes]:
    """A mix of JSON-RPC messages as an MCP server sends them (raw UTF-8 JSON).

    35% small notifications, the rest tool results whose text length is
    log-normal (median ~250 B, long tail to ``max_text``), of which
    ``large_share`` are replaced by big resource reads (32..128 KB).
    ``intl_share`` of the words are non-ASCII (accents, Cyrillic, CJK, symbols).
    """
    out = []
    for i in range(count):
        kind = rng.random()
        if kind < 0.35:  # progress / list_changed / log notifications: small
            msg = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": f"tok-{i}", "progress": i, "total": count},
            }
        elif kind < 1.0 - large_share:  # tool results, log-normal size, mostly 200 B .. 8 KiB
            n = min(int(rng.lognormvariate(5.5, 1.2)), max_text)
            text = " ".join(
                rng.choice(INTL_WORDS if rng.random() < intl_share else ASCII_WORDS)
                for _ in range(max(1, n // 6))
            )
            msg = {
                "jsonrpc": "2.0",
                "id": i,
                "result": {"content": [{"type": "text", "text": text}], "isError": False},
            }
        else:  # occasional large resource read, 32..128 KiB
            n = rng.randint(32_000, 128_000)
            msg = {
                "jsonrpc": "2.0",
                "id": i,
                "result": {"contents": [{"uri": f"file:///r/{i}", "text": "x" * n}]},
            }
        out.append(json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode())
    return out


# profile -> (share of large resource reads, share of non-ASCII words, max text length)
PROFILES = {
    "mcp": (0.0, 0.02, 60_000),  # typical MCP traffic, mostly ASCII
    "small": (0.0, 0.02, 200),  # chatter: notifications, short calls and results
    "intl": (0.0, 0.30, 60_000),  # like mcp, but much non-ASCII text
    "bulk": (0.05, 0.02, 60_000),  # like mcp, plus large resource reads
}


def build_streams(total: int, profile: str, seed: int = 7) -> tuple[bytes, int, bytes, int]:
    rng = random.Random(seed)
    bodies = jsonrpc_bodies(rng, 4000, *PROFILES[profile])
    sse_parts, frame_parts = [], []
    size = events = 0
    while size < total:
        body = bodies[events % len(bodies)]
        part = b"event: message\nid: 0c9f6e2a-%d\ndata: %s\n\n" % (events, body)
        sse_parts.append(part)
        frame_parts.append(native_framing.encode_frame(body))
        size += len(part)
        events += 1
    frames = b"".join(frame_parts)
    return b"".join(sse_parts), events, frames, len(frame_parts)


def chunked(stream: bytes, chunking: str, seed: int = 11) -> list[bytes]:
    view = memoryview(stream)
    if chunking == "mixed":
        # what socket reads look like: MSS-sized, page-sized, 16/64 KiB, odd tails
        rng = random.Random(seed)
        sizes = [1, 97, 1448, 2896, 4096, 16384, 65536, 262144]
        chunks, pos = [], 0
        while pos < len(stream):
            step = rng.choice(sizes)
            chunks.append(bytes(view[pos : pos + step]))
            pos += step
        return chunks
    step = {"16KiB": 16384, "64KiB": 65536, "1MiB": MIB}[chunking]
    return [bytes(view[i : i + step]) for i in range(0, len(stream), step)]


def run_sse(module, chunks: list[bytes]) -> int:
    parser = module.SSEParser()
    feed = parser.feed
    count = 0
    for chunk in chunks:
        count += len(feed(chunk))
    return count


def run_frames(module, chunks: list[bytes]) -> int:
    decoder = module.FrameDecoder()
    feed = decoder.feed
    count = 0
    for chunk in chunks:
        count += len(feed(chunk))
    return count


def measure(fn, module, chunks, expected: int, repeat: int) -> tuple[float, float]:
    """Best wall-clock and best process-CPU seconds over ``repeat`` runs.

    CPU time is reported too because shared machines make wall time noisy.
    """
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        got = fn(module, chunks)
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        if got != expected:
            raise SystemExit(f"{fn.__name__}: got {got} messages, expected {expected}")
    return best_wall, best_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=64, help="stream size in MiB (default 64)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; best is kept")
    ap.add_argument("--chunks", default="16KiB,mixed", help="comma list: 16KiB,64KiB,1MiB,mixed")
    ap.add_argument("--profiles", default="mcp,small,intl,bulk", help="comma list of profiles")
    args = ap.parse_args()

    impls = [("python", load_pure("sse"), load_pure("framing"))]
    if agentd_native.NATIVE:
        impls.insert(0, ("native", native_sse, native_framing))
    else:
        print(json.dumps({"warning": "compiled agentd_native not built; python only"}))

    for profile in args.profiles.split(","):
        sse_stream, n_events, frame_stream, n_frames = build_streams(args.mib * MIB, profile)
        benches = [
            (f"sse_parse/{profile}", run_sse, sse_stream, n_events, 1),
            (f"frame_decode/{profile}", run_frames, frame_stream, n_frames, 2),
        ]
        run_profile(benches, impls, args)


def run_profile(benches, impls, args) -> None:
    for chunking in args.chunks.split(","):
        for bench, fn, stream, expected, module_index in benches:
            chunks = chunked(stream, chunking)
            rates, cpu_rates = {}, {}
            for impl, *modules in impls:
                seconds, cpu = measure(fn, modules[module_index - 1], chunks, expected, args.repeat)
                rates[impl] = len(stream) / MIB / seconds
                cpu_rates[impl] = len(stream) / MIB / max(cpu, 1e-9)
                print(
                    json.dumps(
                        {
                            "bench": bench,
                            "impl": impl,
                            "mib_s": round(rates[impl], 1),
                            "msgs_s": round(expected / seconds),
                            "cpu_mib_s": round(cpu_rates[impl], 1),
                            "chunk": chunking,
                            "mib": round(len(stream) / MIB, 1),
                            "msgs": expected,
                        }
                    ),
                    flush=True,
                )
            if "native" in rates:
                ratio = rates["native"] / rates["python"]
                cpu_ratio = cpu_rates["native"] / cpu_rates["python"]
                line = {"bench": bench, "chunk": chunking, "ratio": round(ratio, 2)}
                line["cpu_ratio"] = round(cpu_ratio, 2)
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
