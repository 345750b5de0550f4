"""One shape per concept (agentd/wire/shapes.py), end to end, against a real server.

A tool the official Python SDK server lists reaches the model's tool list at
the root and, over a real control-wire frame, a brokered child's tool list as
the very same `ToolEntry` objects: the broker's catalogue holds the toolbox's
entries themselves (identity, not equality: nothing converted them), the frame
carries the keys the control wire always carried, and both sides offer the
model byte-identical definitions. A real call's observation crosses the wire
the same way. The seams' declared members are read, not probed: readiness asks
the toolbox which required servers are down.
"""

from __future__ import annotations

import asyncio
import os
import signal

import msgspec
import orjson
import pytest
from peers import python_peer, require_modules

from agentd.agent import prompt as P
from agentd.agent.loop import Actions, toolbox_resources
from agentd.agent.selftools import SelfTools
from agentd.child.brokered import BrokeredToolbox
from agentd.child.control import ChildConfig, ControlSession, Incoming, IoCall, Reply
from agentd.config.model import ServerSpec
from agentd.intelligence.base import FunctionDef, ToolDef
from agentd.mcp.client.toolbox import Toolbox
from agentd.tree.broker import Broker
from agentd.wire.shapes import Observation, Observed, ResourceInfo, ToolEntry

SCOPE = frozenset({"sdk"})
CATALOGUE_TOOL_KEYS = ["qualified", "server", "name", "description", "input_schema"]
CATALOGUE_RESOURCE_KEYS = ["server", "uri", "name", "description", "mime_type", "size"]


@pytest.fixture(scope="module")
def sdk_server():
    require_modules("mcp", "uvicorn", "starlette")
    with python_peer("sdk_servers.py") as peer:
        yield peer


def configure_frame(catalogue) -> tuple[bytes, ChildConfig]:
    """The `child/configure` frame a parent sends, and what the child decodes of it."""
    parent, child = ControlSession("parent"), ControlSession("child")
    _, frame = parent.request("child/configure", ChildConfig(
        handle="0.1", depth=1, catalogue=catalogue))
    (event,) = child.feed(frame)
    assert isinstance(event, Incoming) and isinstance(event.params, ChildConfig)
    return frame, event.params


def frame_json(frame: bytes) -> dict:
    """A control-wire frame's JSON body (after its length prefix)."""
    return orjson.loads(frame[frame.index(b"{"):])


async def test_a_listed_tool_is_one_shape_from_the_server_to_the_model_and_the_child(
        sdk_server) -> None:
    async with Toolbox([ServerSpec(name="sdk", url=sdk_server.url)], ping_interval=None) as tb:
        entry = tb.tools["sdk__echo"]
        assert type(entry) is ToolEntry
        assert (entry.qualified, entry.server, entry.name) == ("sdk__echo", "sdk", "echo")
        assert entry.description == "Echo the text back."
        assert entry.input_schema == tb.clients["sdk"].tools["echo"].input_schema

        broker = Broker(intelligence=None, toolbox=tb)
        cat = broker.catalogue(SCOPE)
        assert cat is not None
        # the catalogue holds the toolbox's own objects: no converter in between
        assert [id(t) for t in cat.tools] == [id(t) for t in tb.tools.values()]
        assert [id(r) for r in cat.resources] == [id(r) for r in tb.resources]
        assert all(type(r) is ResourceInfo for r in cat.resources)

        frame, configured = configure_frame(cat)
        wire = frame_json(frame)["params"]["catalogue"]
        # the control wire's keys, in their order, as before the shapes were merged
        assert all(list(t) == CATALOGUE_TOOL_KEYS for t in wire["tools"])
        assert all(list(r) == CATALOGUE_RESOURCE_KEYS for r in wire["resources"])
        assert {"qualified": "sdk__echo", "server": "sdk", "name": "echo",
                "description": "Echo the text back.",
                "input_schema": entry.input_schema} in wire["tools"]
        greeting = next(r for r in wire["resources"] if r["uri"] == "mem://greeting")
        assert greeting == {"server": "sdk", "uri": "mem://greeting", "name": "greeting",
                            "description": "A friendly greeting", "mime_type": "text/plain",
                            "size": 5}

        # the child decodes the same shape, equal field for field
        assert configured.catalogue is not None
        assert configured.catalogue.tools == cat.tools
        assert configured.catalogue.resources == cat.resources
        child_tb = BrokeredToolbox(None, configured.catalogue)  # no channel: only its catalogue is read
        assert child_tb.tools == tb.tools

        # the model's tool list: the same bytes at the root and in the child
        root = Actions(tb, SelfTools(subagents=False))
        below = Actions(child_tb, SelfTools(subagents=False))
        assert msgspec.json.encode(root.defs) == msgspec.json.encode(below.defs)
        echo = next(d for d in root.defs if d.function.name == "sdk__echo")
        assert echo == ToolDef(function=FunctionDef(
            name="sdk__echo",
            description=P.fence_inline("Echo the text back."),
            parameters=entry.input_schema))
        own = next(d for d in root.defs if d.function.name == "agentd__read_resource")
        assert not own.function.description.startswith(P.FENCE_OPEN)  # agentd's own text
        assert toolbox_resources(tb) == toolbox_resources(child_tb)
        assert P.system_prompt(resources=toolbox_resources(tb)) == \
            P.system_prompt(resources=toolbox_resources(child_tb))


async def test_an_observation_crosses_the_control_wire_as_the_one_shape(sdk_server) -> None:
    async with Toolbox([ServerSpec(name="sdk", url=sdk_server.url)], ping_interval=None) as tb:
        direct = await tb.call("sdk__weather", {"city": "Oslo"})
        assert type(direct) is Observation and direct.content  # the raw blocks stay here
        assert direct.structured == {"temperature": 22.5, "city": "Oslo"}

        parent, child = ControlSession("parent"), ControlSession("child")
        _, ask = child.request("io/request", IoCall("sdk__weather", {"city": "Oslo"}))
        (incoming,) = parent.feed(ask)
        assert isinstance(incoming, Incoming) and isinstance(incoming.params, IoCall)
        answer = await Broker(intelligence=None, toolbox=tb).serve("0.1", SCOPE,
                                                                   incoming.params)
        assert type(answer) is Observed
        frame = parent.response(incoming.id, answer)
        assert frame_json(frame)["result"] == {"kind": "observation", "text": direct.text,
                                               "is_error": False,
                                               "structured": direct.structured}
        (reply,) = child.feed(frame)
        assert isinstance(reply, Reply) and type(reply.result) is Observed
        assert reply.result == direct.bare()
        assert P.observation("sdk__weather", reply.result.text, is_error=reply.result.is_error,
                             limit=4096) == P.observation("sdk__weather", direct.text,
                                                          is_error=direct.is_error, limit=4096)


class Caps(msgspec.Struct, frozen=True):
    resources: bool = True
    resources_subscribe: bool = True


class Listing(msgspec.Struct):
    """Data for the pure ownership rule: what `owner_of` reads of a server
    (`ResourceServer`'s name, capabilities and resource lines); no peer."""

    name: str
    capabilities: Caps = Caps()
    resources: list[ResourceInfo] = msgspec.field(default_factory=list)


def test_the_ownership_rule_returns_its_refusal_instead_of_raising() -> None:
    from agentd.mcp.client.toolbox import Unowned, owner_of

    a = Listing("a", resources=[ResourceInfo(server="a", uri="mem://x")])
    b = Listing("b", resources=[ResourceInfo(server="b", uri="mem://x")])
    quiet = Listing("quiet", Caps(resources_subscribe=False))
    assert owner_of("mem://x", [a, quiet]) is a
    assert owner_of("mem://x", [a, b], "b") is b
    both = owner_of("mem://x", [a, b])
    assert isinstance(both, Unowned) and both.ambiguous and both.candidates == ("a", "b")
    assert both.reason == ("ambiguous resource mem://x: listed by 2 servers (a, b); name one "
                           "with the 'server' argument")
    named = owner_of("mem://x", [a], "nope")
    assert isinstance(named, Unowned) and not named.ambiguous
    assert named.reason == "no connected server is named 'nope' (connected: a)"
    assert owner_of("mem://y", [quiet]) is quiet  # the only server serving resources
    refused = owner_of("mem://y", [quiet], subscribe=True)
    assert isinstance(refused, Unowned) and "does not advertise resources.subscribe" in \
        refused.reason
    nobody = owner_of("mem://y", [])
    assert nobody == Unowned("mem://y", "no MCP server is declared")


async def test_readiness_reads_the_required_servers_down_from_the_toolbox() -> None:
    """A required server that stops answering (SIGSTOP: the kernel still accepts)
    goes stale; the toolbox's `lost` resolves, and `required_down()` names it."""
    require_modules("mcp", "uvicorn", "starlette")
    with python_peer("fault_peers.py", "--legacy") as srv:
        assert srv.proc is not None
        async with Toolbox([ServerSpec(name="srv", url=srv.url)], ping_interval=0.3,
                           reconnect_stale=False) as tb:
            assert tb.required_down() == [] and tb.lost is not None
            os.kill(srv.proc.pid, signal.SIGSTOP)
            try:
                async with asyncio.timeout(60):  # a bound, not a timing assertion
                    lost = await tb.lost
            finally:
                os.kill(srv.proc.pid, signal.SIGCONT)
            assert lost.server == "srv" and "stale" in lost.fault
            assert tb.required_down() == ["srv"]
