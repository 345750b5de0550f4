"""Sample MCP servers for `agentd demo` — samples, not part of the runtime.

agentd ships no task tools; these exist only so the demo (and the loop
benchmark) has something to act on. They are handlers on agentd's own MCP
server engine (`agentd.mcp.server.http.server`), served over Streamable HTTP on
loopback:

* `notes` — a tiny in-memory note store: `list_notes`, `read_note{title}`,
  `add_note{title,text}`; resources `notes://index` (listed, JSON) and
  `notes://note/{title}` (one listed, the rest unlisted), subscribable.
* `calc` — `add{a,b}`, `divide{a,b}` (dividing by zero is a tool error:
  `isError: true`), `mean{numbers}`.
* `echo` — one no-op tool `echo{text}` (the loop benchmark's tool).

Run one alone: `python -m agentd.demo.servers notes|calc|echo [PORT]`.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from agentd.mcp.server.handler import CallContext, Handler, tool_error
from agentd.mcp.server.http.server import Runner, serve
from agentd.wire.jsonrpc import resource_not_found

NUMBER = {"type": "number"}


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


def notes_handler(notes: dict[str, str] | None = None) -> Handler:
    store = dict(notes if notes is not None else {
        "shopping": "eggs, flour, 42 lemons",
        "todo": "water the plants; call the plumber",
        "inbox": "(empty)",
    })
    h = Handler("demo-notes", "1.0.0", subscribe=True,
                instructions="A tiny note store. Titles are single words.")

    @h.tool("list_notes", _obj({}, []), description="List the titles of all notes.")
    async def list_notes(args: dict[str, Any], ctx: CallContext) -> Any:
        return {"titles": sorted(store)}

    @h.tool("read_note", _obj({"title": {"type": "string"}}, ["title"]),
            description="Read one note by title.")
    async def read_note(args: dict[str, Any], ctx: CallContext) -> Any:
        title = args["title"]
        if title not in store:
            return tool_error(f"no note titled {title!r}; titles: {', '.join(sorted(store))}")
        return store[title]

    @h.tool("add_note", _obj({"title": {"type": "string"}, "text": {"type": "string"}},
                             ["title", "text"]),
            description="Add or replace a note.")
    async def add_note(args: dict[str, Any], ctx: CallContext) -> Any:
        store[args["title"]] = args["text"]
        h.notify_updated(f"notes://note/{args['title']}")
        h.notify_updated("notes://index")
        return f"saved note {args['title']!r} ({len(args['text'])} characters)"

    async def index(uri: str) -> Any:
        return {"titles": sorted(store)}

    async def note(uri: str) -> Any:
        title = uri.removeprefix("notes://note/")
        if title not in store:
            raise resource_not_found(uri)
        return store[title]

    h.add_resource("notes://index", index, name="index", mime_type="application/json",
                   description="The titles of all notes")
    h.add_resource("notes://note/shopping", note, name="shopping", mime_type="text/plain",
                   description="The shopping list")
    h.resource_prefix("notes://note/", note)
    h.store = store  # type: ignore[attr-defined]  # the demo updates it directly
    return h


def calc_handler() -> Handler:
    h = Handler("demo-calc", "1.0.0", instructions="Exact arithmetic on numbers.")

    @h.tool("add", _obj({"a": NUMBER, "b": NUMBER}, ["a", "b"]), description="a + b")
    async def add(args: dict[str, Any], ctx: CallContext) -> Any:
        return {"result": args["a"] + args["b"]}

    @h.tool("divide", _obj({"a": NUMBER, "b": NUMBER}, ["a", "b"]), description="a / b")
    async def divide(args: dict[str, Any], ctx: CallContext) -> Any:
        if args["b"] == 0:
            return tool_error("cannot divide by zero")
        return {"result": args["a"] / args["b"]}

    @h.tool("mean", _obj({"numbers": {"type": "array", "items": NUMBER, "minItems": 1}},
                         ["numbers"]), description="The arithmetic mean of numbers.")
    async def mean(args: dict[str, Any], ctx: CallContext) -> Any:
        nums = args["numbers"]
        return {"result": sum(nums) / len(nums)}

    return h


def echo_handler() -> Handler:
    h = Handler("demo-echo", "1.0.0")

    @h.tool("echo", _obj({"text": {"type": "string"}}, ["text"]), description="Echo text.")
    async def echo(args: dict[str, Any], ctx: CallContext) -> Any:
        return args["text"]

    return h


HANDLERS = {"notes": notes_handler, "calc": calc_handler, "echo": echo_handler}


async def start(kind: str, port: int = 0) -> Runner:
    """Serve one sample server on loopback (port 0: a free one)."""
    return await serve(HANDLERS[kind](), host="127.0.0.1", port=port)


async def _main(kind: str, port: int) -> None:
    runner = await start(kind, port)
    print(f"listening {runner.url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.stop()


if __name__ == "__main__":
    kind = sys.argv[1] if len(sys.argv) > 1 else "notes"
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    from agentd import runtime

    try:
        runtime.run(_main(kind, port))
    except KeyboardInterrupt:
        pass
