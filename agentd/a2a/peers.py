"""All declared A2A peers of a run: connect, delegate, follow, cancel, wake.

`A2APeers(specs, ...)` is an async context manager beside the MCP Toolbox. On
entry every peer's Agent Card is fetched and validated; a required peer that
fails is a `RequiredServerLost` at the handshake (exit 6,
before the intelligence is called), an optional one is logged and left out.

Following a task. `follow()` drives one task to a *settled* state -- terminal
(completed, failed, canceled, rejected) or interrupted (input-required,
auth-required: the peer waits for us). With a streaming card it reads
SendStreamingMessage's events; otherwise (or when a stream breaks) it polls
GetTask with exponential backoff (`POLL_FIRST` doubling to `POLL_MAX`). A peer
that stays unreachable for `UNREACHABLE_AFTER` consecutive polls ends the
follow with the state `unknown` -- an observation, never a crash.

Cancellation. A follow that is cancelled (the run's deadline, a signal, the
drain) sends CancelTask for its task before it lets the cancellation through,
bounded by `CANCEL_TIMEOUT`, so no work is leaked on the peer.

Async tasks and the reactive machinery. An async delegate's follow runs in this
object's TaskGroup; its task is the resource `a2a://{peer}/task/{id}`. Each peer
is presented to the reactive layer as a resource source (`sources`, shaped like
an MCP client: `name`, `capabilities.resources_subscribe`, `resources`,
`subscribe`, `unsubscribe`, `read_resource`, `updates`): a subscribed task URI
gets ONE `(peer, uri)` update on the source's `updates` queue when its task
settles (on the next loop turn if it had already settled), then the
subscription is consumed; the consumer reads the URI (a fresh GetTask) --
notify-then-read, as for `agent://subagent/{handle}`. The tree's broker tees
`updates` like an MCP client's, so a wake reaches the subagent that subscribed.
Subagents delegate through the root (`agentd.tree.broker`, `IoDelegate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import msgspec

from agentd.a2a.client import A2AClient
from agentd.config.model import DEFAULT_INIT_TIMEOUT, ServerSpec
from agentd.errors import A2AFault
from agentd.log import log
from agentd.mcp.client.rules.faults import RequiredServerLost
from agentd.mcp.client.seams import AgentToolbox, ResourceServer
from agentd.wire import a2a as w
from agentd.wire.shapes import Observed, ResourceInfo, ToolEntry

__all__ = ["SCHEME", "A2APeers", "Delegation", "task_uri"]

SCHEME: Final = "a2a://"
POLL_FIRST: Final = 0.05
POLL_MAX: Final = 2.0
UNREACHABLE_AFTER: Final = 5
CANCEL_TIMEOUT: Final = 5.0
TAIL_WAIT: Final = 0.25  # how long the end of a settled task's stream is awaited
MAX_TRACKED: Final = 1024  # async tasks remembered per run (oldest settled dropped first)

_log = log.bind(component="a2a")


def task_uri(peer: str, task_id: str) -> str:
    return f"{SCHEME}{peer}/task/{task_id}"


def parse_uri(uri: str) -> tuple[str, str] | None:
    if not uri.startswith(SCHEME):
        return None
    peer, sep, task_id = uri[len(SCHEME):].partition("/task/")
    if not sep or not peer or not task_id:
        return None
    return peer, task_id


def part_text(part: w.Part) -> str:
    if part.text is not None:
        return part.text
    if part.data is not None:  # a peer's JSON: msgspec encodes whatever it decoded
        return w.encode(part.data).decode()
    if part.url is not None:
        return f"[file {part.filename or ''} at {part.url}]"
    if part.raw is not None:
        return f"[{part.media_type or 'binary'} {part.filename or ''}, {len(part.raw)} base64 chars]"
    return ""


def message_text(message: w.Message | None) -> str:
    if message is None:
        return ""
    return "\n".join(t for t in (part_text(p) for p in message.parts) if t)


class Delegation(msgspec.Struct):
    """What is known of one delegated task (the body of its a2a:// resource)."""

    peer: str
    task_id: str
    context_id: str | None = None
    state: str = w.SUBMITTED  # the wire name; `short_state` for people
    message: str = ""  # the status message's text (peer text: untrusted)
    artifacts: list[dict[str, Any]] = []
    error: str | None = None  # the follow ended on a fault (state `unknown`)

    @property
    def settled(self) -> bool:
        return self.state in w.TERMINAL or self.state in w.INTERRUPTED or self.state == "unknown"

    def absorb(self, task: w.Task) -> None:
        self.context_id = task.context_id or self.context_id
        self.state = task.status.state
        if task.status.message is not None:
            self.message = message_text(task.status.message)
        if task.artifacts:
            self.artifacts = [_artifact(a) for a in task.artifacts]

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "peer": self.peer, "task_id": self.task_id, "context_id": self.context_id,
            "state": w.short_state(self.state) if self.state != "unknown" else "unknown",
            "done": self.state in w.TERMINAL or self.state == "unknown",
            "uri": task_uri(self.peer, self.task_id)}
        if self.message:
            out["message"] = self.message
        if self.artifacts:
            out["artifacts"] = self.artifacts
        if self.error:
            out["error"] = self.error
        if self.state in w.INTERRUPTED:
            out["reply_with"] = {"peer": self.peer, "task_id": self.task_id,
                                 "context_id": self.context_id}
        return out


def _artifact(a: w.Artifact) -> dict[str, Any]:
    return {"name": a.name or a.artifact_id,
            "text": "\n".join(t for t in (part_text(p) for p in a.parts) if t)}


class _Caps(msgspec.Struct, frozen=True):
    resources_subscribe: bool = True
    resources: bool = True


class PeerSource:
    """One peer as the reactive layer sees a resource server (see module doc)."""

    capabilities: Final = _Caps()
    connected = True

    def __init__(self, peers: A2APeers, name: str) -> None:
        self._peers = peers
        self.name = name
        self.subscriptions: set[str] = set()
        # Where this source's wakes go: the run's update queue, or what the tree's
        # broker puts in its place to route a wake to the subagent that subscribed.
        self.updates: Any = peers.updates

    @property
    def resources(self) -> list[ResourceInfo]:
        return [ResourceInfo(server=self.name, uri=task_uri(d.peer, d.task_id))
                for d in self._peers.tracked.values() if d.peer == self.name]

    async def subscribe(self, uri: str) -> bool:
        d = self._peers.tracked.get(uri)
        if d is None:
            return False
        if d.settled and uri not in self._peers.running:
            # settled before the subscribe: one wake now -- on the next loop turn, once
            # the subscriber (a broker routing to a subagent) has recorded it
            asyncio.get_running_loop().call_soon(self._peers.wake, self.name, uri)
            return True
        self.subscriptions.add(uri)
        return True

    async def unsubscribe(self, uri: str) -> None:
        self.subscriptions.discard(uri)

    async def read_resource(self, uri: str) -> Observed:
        return await self._peers.read_resource(uri)

    async def update_channel(self) -> str | None:
        """A task's wake is pushed by the peers' own watcher, like `updated`."""
        return "subscribe"


class A2APeers:
    """The run's A2A peers (see module doc). `updates` is shared with the Toolbox."""

    def __init__(self, specs: tuple[ServerSpec, ...], *, secrets_dir: str,
                 init_timeout: float = DEFAULT_INIT_TIMEOUT, updates: asyncio.Queue | None = None,
                 client_factory: Callable[..., A2AClient] = A2AClient) -> None:
        self.specs = specs
        self.secrets_dir = secrets_dir
        self.init_timeout = init_timeout
        self.updates: asyncio.Queue = updates if updates is not None else asyncio.Queue()
        self.clients: dict[str, A2AClient] = {}
        self.sources: dict[str, PeerSource] = {}
        self.tracked: dict[str, Delegation] = {}  # uri -> delegation (async ones)
        self.running: dict[str, asyncio.Task[Any]] = {}  # uri -> its follow
        self._stack = contextlib.AsyncExitStack()
        # The async follows: owned here, cancelled and awaited when the run ends
        # (not a TaskGroup, so an error of the run's body is never re-wrapped).
        self._follows: set[asyncio.Task[Any]] = set()
        self._factory = client_factory

    # ------------------------------------------------------------ life cycle
    async def __aenter__(self) -> A2APeers:
        await self._stack.__aenter__()
        try:
            async with asyncio.TaskGroup() as tg:
                jobs = {s.name: tg.create_task(self._connect(s)) for s in self.specs}
            for spec in self.specs:
                client = jobs[spec.name].result()
                if client is not None:
                    self.clients[spec.name] = client
                    self.sources[spec.name] = PeerSource(self, spec.name)
            self._stack.push_async_callback(self._cancel_running)
        except BaseException as exc:
            await self._stack.__aexit__(type(exc), exc, exc.__traceback__)
            if isinstance(exc, BaseExceptionGroup):
                leaf = next((e for e in exc.exceptions if isinstance(e, RequiredServerLost)),
                            None)
                if leaf is not None:
                    raise leaf from None
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.__aexit__(*exc)

    async def _connect(self, spec: ServerSpec) -> A2AClient | None:
        client = self._factory(spec, secrets_dir=self.secrets_dir,
                               init_timeout=self.init_timeout)
        try:
            await client.__aenter__()
        except (A2AFault, OSError, ValueError) as exc:
            if isinstance(exc, A2AFault) and exc.kind != "card":
                raise
            if spec.required:  # a required peer's card: exit 6, as a required MCP server
                _log.error("a2a.card.failed", peer=spec.name, error=str(exc), required=True)
                raise RequiredServerLost(spec.name, str(exc), handshake=True,
                                         what="A2A peer") from None
            _log.warning("a2a.card.failed", peer=spec.name, error=str(exc), required=False,
                         detail="optional peer left out")
            return None
        self._stack.push_async_callback(client.aclose)
        card = client.card
        assert card is not None and client.interface is not None
        _log.info("a2a.card", peer=spec.name, agent=card.name, version=card.version,
                  binding=client.binding, streaming=client.streaming,
                  skills=[s.id for s in card.skills])
        return client

    async def _cancel_running(self) -> None:
        """The run ends: every follow still running is cancelled (each sends CancelTask)."""
        follows = list(self._follows)
        for task in follows:
            task.cancel()
        if follows:
            await asyncio.gather(*follows, return_exceptions=True)

    # ------------------------------------------------------------ delegation
    def client(self, peer: str) -> A2AClient | None:
        return self.clients.get(peer)

    def new_request(self, peer: str, text: str, *, task_id: str | None,
                    context_id: str | None, immediate: bool) -> w.SendMessageRequest:
        message = w.Message(message_id=uuid.uuid4().hex, role="ROLE_USER",
                            parts=[w.Part(text=text)], task_id=task_id, context_id=context_id)
        return w.SendMessageRequest(
            message=message,
            configuration=w.SendMessageConfiguration(
                accepted_output_modes=["text/plain", "application/json"],
                return_immediately=immediate))

    async def delegate(self, peer: str, text: str, *, task_id: str | None = None,
                       context_id: str | None = None, wait: bool = True) -> Delegation:
        """Send `text` and, with `wait`, follow its task until it settles.

        `wait=False` (async): the first answer is returned and the follow goes on
        in the background; the task's a2a:// URI is tracked for reads and wakes.
        """
        client = self.clients[peer]
        use_stream = wait and client.streaming
        started = time.monotonic()
        if use_stream:
            d = await self._follow_stream(client, self.new_request(
                peer, text, task_id=task_id, context_id=context_id, immediate=False))
        else:
            resp = await client.send(self.new_request(
                peer, text, task_id=task_id, context_id=context_id, immediate=True))
            if resp.task is None:  # a direct message: no task to follow
                msg = resp.message
                return Delegation(peer=peer, task_id=(msg.task_id if msg else None) or "",
                                  context_id=msg.context_id if msg else None,
                                  state=w.COMPLETED, message=message_text(msg))
            d = Delegation(peer=peer, task_id=resp.task.id)
            d.absorb(resp.task)
            if not wait:
                self._track(d)
                return d
            if not d.settled:
                await self._poll(client, d)
        _log.info("a2a.delegate", peer=peer, task_id=d.task_id, state=d.state,
                  streamed=use_stream, ms=int((time.monotonic() - started) * 1000))
        return d

    def _track(self, d: Delegation) -> None:
        uri = task_uri(d.peer, d.task_id)
        self.tracked[uri] = d
        while len(self.tracked) > MAX_TRACKED:
            old = next((u for u, x in self.tracked.items() if x.settled
                        and u not in self.running), None)
            if old is None:
                break
            self.tracked.pop(old)
        if d.settled:
            return
        client = self.clients[d.peer]
        task = asyncio.create_task(self._background(client, d, uri),
                                   name=f"a2a-follow-{d.peer}-{d.task_id}")
        self._follows.add(task)
        task.add_done_callback(self._follows.discard)
        self.running[uri] = task

    async def _background(self, client: A2AClient, d: Delegation, uri: str) -> None:
        try:
            await self._poll(client, d)
        except A2AFault as exc:  # never leaves the follow: the task's state says it
            d.state, d.error = "unknown", str(exc)
        finally:
            self.running.pop(uri, None)
        _log.info("a2a.task.settled", peer=d.peer, task_id=d.task_id, state=d.state)
        source = self.sources.get(d.peer)
        if source is not None and uri in source.subscriptions:
            source.subscriptions.discard(uri)
            self.wake(d.peer, uri)

    def wake(self, peer: str, uri: str) -> None:
        source = self.sources.get(peer)
        (source.updates if source is not None else self.updates).put_nowait((peer, uri))

    async def _follow_stream(self, client: A2AClient, request: w.SendMessageRequest
                             ) -> Delegation:
        d: Delegation | None = None
        try:
            async with contextlib.aclosing(client.stream(request)) as events:
                async for event in events:
                    if event.task is not None:
                        if d is None:
                            d = Delegation(peer=client.name, task_id=event.task.id)
                        d.absorb(event.task)
                    elif event.status_update is not None:
                        # a follow-up on an existing task may start without a Task event
                        up = event.status_update
                        if d is None:
                            d = Delegation(peer=client.name, task_id=up.task_id,
                                           context_id=up.context_id)
                        d.state = event.status_update.status.state
                        if event.status_update.status.message is not None:
                            d.message = message_text(event.status_update.status.message)
                    elif event.artifact_update is not None:
                        if d is None:
                            d = Delegation(peer=client.name,
                                           task_id=event.artifact_update.task_id,
                                           context_id=event.artifact_update.context_id,
                                           state=w.WORKING)
                        self._artifact(d, event.artifact_update)
                    elif event.message is not None and d is None:
                        m = event.message
                        return Delegation(peer=client.name, task_id=m.task_id or "",
                                          context_id=m.context_id, state=w.COMPLETED,
                                          message=message_text(m))
                    if d is not None and d.settled:
                        break
                if d is not None and d.settled:
                    # Let the peer end the stream (briefly), so the connection goes
                    # back to the pool instead of being closed mid-response.
                    with contextlib.suppress(TimeoutError, A2AFault):
                        async with asyncio.timeout(TAIL_WAIT):
                            async for _ in events:
                                pass
                    return d
        except asyncio.CancelledError:
            if d is not None:
                await self._cancel_remote(client, d)
            raise
        except A2AFault as exc:
            if d is None or not exc.retryable:
                raise
            _log.warning("a2a.stream.broken", peer=client.name, task_id=d.task_id,
                         error=str(exc), detail="following by GetTask")
        if d is None:
            raise A2AFault(f"peer {client.name}: the stream ended before a task was named")
        await self._poll(client, d)  # the stream ended or broke before the task settled
        return d

    @staticmethod
    def _artifact(d: Delegation, ev: w.TaskArtifactUpdateEvent) -> None:
        new = _artifact(ev.artifact)
        for i, old in enumerate(d.artifacts):
            if old["name"] == new["name"]:
                if ev.append:
                    new = {**old, "text": old["text"] + new["text"]}
                d.artifacts[i] = new
                return
        d.artifacts.append(new)

    async def _poll(self, client: A2AClient, d: Delegation) -> None:
        """GetTask with backoff until `d` settles; CancelTask if cancelled meanwhile."""
        delay = POLL_FIRST
        failures = 0
        try:
            while not d.settled:
                await asyncio.sleep(delay)
                delay = min(delay * 2, POLL_MAX)
                try:
                    task = await client.get_task(d.task_id)
                except A2AFault as exc:
                    if exc.kind == "not_found":
                        d.state, d.error = "unknown", str(exc)
                        return
                    failures += 1
                    if not exc.retryable or failures >= UNREACHABLE_AFTER:
                        d.state, d.error = "unknown", str(exc)
                        _log.warning("a2a.task.lost", peer=client.name, task_id=d.task_id,
                                     error=str(exc), attempts=failures)
                        return
                    continue
                failures = 0
                d.absorb(task)
        except asyncio.CancelledError:
            await self._cancel_remote(client, d)
            raise

    async def _cancel_remote(self, client: A2AClient, d: Delegation) -> None:
        """CancelTask for a task we stop following (deadline, signal, drain)."""
        if d.settled:
            return
        with contextlib.suppress(A2AFault, TimeoutError, asyncio.CancelledError):
            async with asyncio.timeout(CANCEL_TIMEOUT):
                task = await asyncio.shield(client.cancel(d.task_id))
                d.absorb(task)
        _log.info("a2a.task.cancel", peer=client.name, task_id=d.task_id, state=d.state)

    # ------------------------------------------------------------ resources
    async def read_resource(self, uri: str) -> Observed:
        """The current state of an a2a:// task: a fresh GetTask (the last known state
        if the peer cannot answer)."""
        parsed = parse_uri(uri)
        if parsed is None:
            return Observed(f"resource not found: {uri}", is_error=True)
        peer, task_id = parsed
        client = self.clients.get(peer)
        if client is None:
            return Observed(f"resource not found: {uri} (no A2A peer {peer!r})", is_error=True)
        d = self.tracked.get(uri) or Delegation(peer=peer, task_id=task_id)
        try:
            d.absorb(await client.get_task(task_id))
        except A2AFault as exc:
            if uri not in self.tracked:
                return Observed(f"resource not found: {uri}: {exc}", is_error=True)
            d.error = str(exc)
        body = d.body()
        # w.encode (msgspec): the body holds the peer's task, of any depth or integer
        return Observed(w.encode(body).decode(), is_error=False, structured=body)


class WithPeers:
    """The run's Toolbox as the loop and the reactive layer see it once A2A peers
    are declared: everything is the Toolbox's, except that `clients` also lists
    each peer's resource source and `a2a://` URIs are read, subscribed and
    unsubscribed through the peers. The Toolbox's own methods still see only
    the MCP clients. Every member of the `AgentToolbox` seam is spelled out
    here (no attribute forwarding: the type checker holds it to the seam)."""

    def __init__(self, toolbox: AgentToolbox, peers: A2APeers) -> None:
        self._toolbox = toolbox
        self.peers = peers

    @property
    def tools(self) -> Mapping[str, ToolEntry]:
        return self._toolbox.tools

    @property
    def resources(self) -> Sequence[ResourceInfo]:
        return self._toolbox.resources

    @property
    def instructions(self) -> Mapping[str, str]:
        return self._toolbox.instructions

    @property
    def updates(self) -> asyncio.Queue[tuple[str, str]]:
        return self._toolbox.updates

    @property
    def lost(self) -> asyncio.Future[RequiredServerLost] | None:
        return self._toolbox.lost

    def take_notices(self) -> list[tuple[str, str]]:
        return self._toolbox.take_notices()

    def required_down(self) -> list[str]:
        return self._toolbox.required_down()

    def idempotent(self, qualified_name: str) -> bool:
        """The Toolbox's rule for its MCP tools; an A2A delegation is never
        idempotent (a peer's task is a new task each time it is sent)."""
        return self._toolbox.idempotent(qualified_name)

    @property
    def clients(self) -> dict[str, ResourceServer]:
        return {**self._toolbox.clients, **self.peers.sources}

    async def call(self, qualified_name: str, arguments: Mapping[str, Any] | None = None,
                   *, time_limit: float | None = None) -> Observed:
        return await self._toolbox.call(qualified_name, arguments, time_limit=time_limit)

    async def read_resource(self, uri: str, *, server: str | None = None) -> Observed:
        if uri.startswith(SCHEME):
            return await self.peers.read_resource(uri)
        return await self._toolbox.read_resource(uri, server=server)

    async def subscribe(self, uri: str, *, server: str | None = None) -> bool:
        parsed = parse_uri(uri)
        if parsed is not None:
            source = self.peers.sources.get(parsed[0])
            return bool(source is not None and await source.subscribe(uri))
        return await self._toolbox.subscribe(uri, server=server)

    async def unsubscribe(self, uri: str, *, server: str | None = None) -> None:
        parsed = parse_uri(uri)
        if parsed is not None:
            source = self.peers.sources.get(parsed[0])
            if source is not None:
                await source.unsubscribe(uri)
            return
        await self._toolbox.unsubscribe(uri, server=server)
