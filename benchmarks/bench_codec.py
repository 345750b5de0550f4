"""Micro-benchmark of the message layer's hot path (one tools/call round trip).

    python benchmarks/bench_codec.py

Prints one JSON line of figures (microseconds per operation, best of 5):
agentd's codec (encode a tools/call request; decode the response envelope and
type its CallToolResult) side by side with a bare orjson dumps/loads of the
same messages, and the official SDK's pydantic models where installed.
Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import json
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec
import orjson

from agentd.wire import codec
from agentd.wire import mcp_types as t

RESPONSE = (
    b'{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"22.5\xc2\xb0C"}],'
    b'"isError":false,"structuredContent":{"temperature":22.5}}}'
)
ARGS = {"location": "NYC"}
META = {"io.modelcontextprotocol/run-id": "run-0123456789"}


def bench(fn, number: int = 100_000) -> float:
    return round(min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6, 3)


def agentd_encode() -> bytes:
    return codec.encode_request(2, t.TOOLS_CALL, t.CallToolParams("get_weather", ARGS, META))


def agentd_encode_raw_args() -> bytes:
    # arguments already serialised by the model gateway: spliced, not re-encoded
    return codec.encode_request(
        2, t.TOOLS_CALL, t.CallToolParams("get_weather", msgspec.Raw(b'{"location":"NYC"}'), META)
    )


def agentd_decode() -> t.CallToolResult:
    msg = codec.decode(RESPONSE)
    return codec.decode_result(msg.result, t.CallToolResult, msg.id)


def agentd_decode_one_pass() -> t.CallToolResult:
    return codec.decode_response(RESPONSE, t.CallToolResult).result


def agentd_round() -> None:
    agentd_encode()
    agentd_decode_one_pass()


def orjson_encode() -> bytes:
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "get_weather", "arguments": ARGS, "_meta": META},
        }
    )


def orjson_decode() -> dict:
    msg = orjson.loads(RESPONSE)
    if "result" not in msg:
        raise ValueError
    return msg["result"]


def orjson_round() -> None:
    orjson_encode()
    orjson_decode()


def main() -> None:
    figures: dict[str, float | str] = {
        "agentd_encode_tools_call_us": bench(agentd_encode),
        "agentd_encode_tools_call_raw_args_us": bench(agentd_encode_raw_args),
        "agentd_decode_then_decode_result_us": bench(agentd_decode),
        "agentd_decode_response_one_pass_us": bench(agentd_decode_one_pass),
        "agentd_round_trip_us": bench(agentd_round),
        "orjson_encode_us": bench(orjson_encode),
        "orjson_decode_us": bench(orjson_decode),
        "orjson_round_trip_us": bench(orjson_round),
    }
    try:
        import mcp_types as sdk
        from mcp_types import jsonrpc as sdk_rpc

        def sdk_round() -> None:
            req = sdk_rpc.JSONRPCRequest(
                jsonrpc="2.0",
                id=2,
                method="tools/call",
                params=sdk.CallToolRequestParams(
                    name="get_weather", arguments=ARGS, _meta=META
                ).model_dump(by_alias=True, exclude_none=True),
            )
            req.model_dump_json(by_alias=True, exclude_none=True)
            resp = sdk_rpc.jsonrpc_message_adapter.validate_json(RESPONSE)
            sdk.CallToolResult.model_validate(resp.result)

        figures["sdk_pydantic_round_trip_us"] = bench(sdk_round, number=10_000)
    except ImportError:  # pragma: no cover
        figures["sdk_pydantic_round_trip_us"] = "unavailable"
    figures["agentd_over_orjson_ratio"] = round(
        figures["agentd_round_trip_us"] / figures["orjson_round_trip_us"],
        2,  # type: ignore[operator]
    )
    figures["python"] = sys.version.split()[0]
    figures["msgspec"] = msgspec.__version__
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
