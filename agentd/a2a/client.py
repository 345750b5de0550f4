"""One A2A peer over HTTP: discovery, then the JSON-RPC or HTTP+JSON binding.

Why agentd speaks the wire itself (aiohttp + msgspec, as it does for MCP)
rather than through the `a2a-sdk`: the core stays lean (no protobuf, httpx,
pydantic), one connection pool per peer, and the limits below are ours.

Discovery. The Agent Card is fetched from the well-known path at the origin of
the configured URL (`/.well-known/agent-card.json`; a configured URL that
itself ends in `agent-card.json` is taken as the card's address). The card is
untrusted peer text: it is validated (a JSON object of the Agent Card shape,
at least one interface agentd speaks -- `JSONRPC` or `HTTP+JSON`, protocol
1.x) and an interface URL is used only when its origin (scheme, host, port) is
the configured one -- a card never points agentd at another host.

Limits. Every answer body and every SSE event is bounded (`max_bytes`, default
8 MiB): a bigger one is a clear `A2AFault`, never a memory blow-up. Requests
carry `A2A-Version: 1.0` and the peer's configured headers
(`{{secret:NAME}}` resolved at connect time, never logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from collections.abc import AsyncGenerator
from typing import Any, Final
from urllib.parse import quote, urlsplit

import aiohttp
import msgspec

from agentd import __version__
from agentd.config.endpoints import resolve_headers
from agentd.config.model import DEFAULT_INIT_TIMEOUT, ServerSpec
from agentd.errors import A2AFault
from agentd.log import log
from agentd.wire import a2a as w
from agentd.wire.guard import PEER_FAULTS, fault_text
from agentd_native import SSEEventTooLarge, SSEParser

__all__ = ["DEFAULT_MAX_BYTES", "A2AClient"]

DEFAULT_MAX_BYTES: Final = 8 * 1024 * 1024
_log = log.bind(component="a2a")
DEFAULT_TIMEOUT: Final = 30.0  # one unary request (a streaming read has no total bound)


def _card(message: str) -> A2AFault:
    """The Agent Card cannot be had or is not acceptable (a required peer: exit 6)."""
    return A2AFault(message, kind="card")


class _RpcError(msgspec.Struct):
    code: int = 0
    message: str = ""


class _Envelope(msgspec.Struct):
    result: msgspec.Raw = msgspec.Raw(b"")  # empty: absent
    error: _RpcError | None = None


class _RestError(msgspec.Struct):
    error: _RpcError | None = None


_envelope = msgspec.json.Decoder(_Envelope)
_rest_error = msgspec.json.Decoder(_RestError)


def _origin(url: str) -> tuple[str, str, int]:
    p = urlsplit(url)
    port = p.port or (443 if p.scheme == "https" else 80)
    return p.scheme, (p.hostname or "").lower(), port


def card_url(url: str) -> str:
    """Where the Agent Card of the peer declared at `url` is fetched from."""
    p = urlsplit(url)
    if p.path.endswith("agent-card.json"):
        return url
    return f"{p.scheme}://{p.netloc}{w.AGENT_CARD_PATH}"


def choose_interface(card: w.AgentCard, declared: str) -> w.AgentInterface:
    """The interface to use: same origin as `declared`, a binding we speak, A2A 1.x;
    JSON-RPC preferred. Raises an A2AFault of kind "card" saying why none fits."""
    origin = _origin(declared)
    seen: list[str] = []
    fits: list[w.AgentInterface] = []
    for iface in card.supported_interfaces:
        if iface.protocol_binding not in (w.BINDING_JSONRPC, w.BINDING_REST):
            seen.append(f"{iface.protocol_binding} (binding not spoken)")
            continue
        if iface.protocol_version and not iface.protocol_version.startswith("1."):
            if iface.protocol_version != "1":
                seen.append(f"{iface.protocol_binding} (protocol {iface.protocol_version})")
                continue
        try:
            same = _origin(iface.url) == origin
        except ValueError:
            same = False
        if not same:
            seen.append(f"{iface.protocol_binding} at another origin than {declared}")
            continue
        fits.append(iface)
    if not fits:
        why = "; ".join(seen) or "the card lists no supportedInterfaces"
        raise _card(f"no usable interface in the Agent Card: {why}")
    fits.sort(key=lambda i: i.protocol_binding != w.BINDING_JSONRPC)
    return fits[0]


class A2AClient:
    """One peer: `async with A2AClient(spec) as peer:` fetches and validates its card."""

    def __init__(self, spec: ServerSpec, *, secrets_dir: str,
                 init_timeout: float = DEFAULT_INIT_TIMEOUT, timeout: float = DEFAULT_TIMEOUT,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.spec = spec
        self.name = spec.name
        self.secrets_dir = secrets_dir
        self.init_timeout = init_timeout
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.card: w.AgentCard | None = None
        self.interface: w.AgentInterface | None = None
        self._http: aiohttp.ClientSession | None = None
        self._headers: dict[str, str] = {}
        self._ids = itertools.count(1)

    # ------------------------------------------------------------ set-up
    @property
    def binding(self) -> str:
        assert self.interface is not None
        return self.interface.protocol_binding

    @property
    def streaming(self) -> bool:
        return bool(self.card is not None and self.card.capabilities.streaming)

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.spec.url.startswith("https:"):
            return True
        ctx = ssl.create_default_context(cafile=self.spec.ca_file)  # verify on, always
        if self.spec.client_cert:
            ctx.load_cert_chain(self.spec.client_cert, self.spec.client_key)
        return ctx

    async def __aenter__(self) -> A2AClient:
        self._headers = {"A2A-Version": w.PROTOCOL_VERSION,
                         "User-Agent": f"agentd/{__version__}",
                         **resolve_headers(self.spec, self.secrets_dir)}
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl(), keepalive_timeout=4.0),
            headers=self._headers, auto_decompress=True)
        try:
            await self.discover()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.close()

    async def discover(self) -> w.AgentCard:
        """Fetch and validate the Agent Card; choose the interface."""
        url = card_url(self.spec.url)
        try:
            async with asyncio.timeout(self.init_timeout):
                status, body = await self._get_bytes(url)
        except TimeoutError:
            raise _card(f"Agent Card at {url}: no answer within "
                        f"{self.init_timeout}s") from None
        except (aiohttp.ClientError, OSError, A2AFault) as exc:
            raise _card(f"Agent Card at {url}: {exc}") from None
        if status != 200:
            raise _card(f"Agent Card at {url}: HTTP {status}")
        try:
            card = w.card_decoder.decode(body)
        except PEER_FAULTS as exc:
            raise _card(f"Agent Card at {url} is not a valid Agent Card: "
                        f"{fault_text(exc)}") from None
        self.interface = choose_interface(card, self.spec.url)
        self.card = card
        return card

    # ------------------------------------------------------------ HTTP
    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while chunk := await resp.content.readany():
            size += len(chunk)
            if size > self.max_bytes:
                _log.warning("a2a.limit", peer=self.name, limit="max_bytes",
                             bytes=self.max_bytes)
                raise A2AFault(f"peer {self.name}: answer exceeds {self.max_bytes} bytes "
                              "(max_bytes); dropped")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _get_bytes(self, url: str) -> tuple[int, bytes]:
        assert self._http is not None
        async with self._http.get(url, allow_redirects=False) as resp:
            return resp.status, await self._read(resp)

    def _fault(self, exc: BaseException, what: str) -> A2AFault:
        return A2AFault(f"peer {self.name}: {what}: {type(exc).__name__}: {exc}",
                       retryable=True)

    async def _rpc(self, method: str, params: Any) -> msgspec.Raw:
        assert self._http is not None and self.interface is not None
        body = w.encode({"jsonrpc": "2.0", "id": next(self._ids), "method": method,
                         "params": params})
        try:
            async with asyncio.timeout(self.timeout), self._http.post(
                    self.interface.url, data=body, allow_redirects=False,
                    headers={"Content-Type": "application/json"}) as resp:
                data = await self._read(resp)
                status = resp.status
        except TimeoutError:
            raise A2AFault(f"peer {self.name}: {method}: no answer within {self.timeout}s",
                          retryable=True) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise self._fault(exc, method) from None
        if status >= 500:
            raise A2AFault(f"peer {self.name}: {method}: HTTP {status}", retryable=True)
        try:
            env = _envelope.decode(data)
        except PEER_FAULTS:
            raise A2AFault(f"peer {self.name}: {method}: HTTP {status}, not a JSON-RPC "
                          "answer") from None
        if env.error is not None:
            raise A2AFault(f"peer {self.name}: {method}: {env.error.message} "
                           f"({env.error.code})", code=env.error.code,
                           kind="not_found" if env.error.code == w.TASK_NOT_FOUND else "fault")
        if not env.result:
            raise A2AFault(f"peer {self.name}: {method}: an answer without a result")
        return env.result

    async def _rest(self, verb: str, path: str, body: Any = None) -> bytes:
        assert self._http is not None and self.interface is not None
        url = self.interface.url.rstrip("/") + path
        data = w.encode(body) if body is not None else None
        try:
            async with asyncio.timeout(self.timeout), self._http.request(
                    verb, url, data=data, allow_redirects=False,
                    headers={"Content-Type": "application/json"} if data else None) as resp:
                raw = await self._read(resp)
                status = resp.status
        except TimeoutError:
            raise A2AFault(f"peer {self.name}: {verb} {path}: no answer within "
                          f"{self.timeout}s", retryable=True) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise self._fault(exc, f"{verb} {path}") from None
        if status >= 400:
            message = f"HTTP {status}"
            with contextlib.suppress(*PEER_FAULTS):
                err = _rest_error.decode(raw).error
                if err is not None and err.message:
                    message = f"{err.message} (HTTP {status})"
            raise A2AFault(f"peer {self.name}: {verb} {path}: {message}", code=status,
                           retryable=status >= 500, kind="not_found" if status == 404 else "fault")
        return raw

    def _decode(self, decoder: msgspec.json.Decoder, raw: bytes | msgspec.Raw,
                what: str) -> Any:
        try:
            return decoder.decode(raw)
        except PEER_FAULTS as exc:
            raise A2AFault(f"peer {self.name}: {what}: malformed answer: "
                          f"{fault_text(exc)}") from None

    # ------------------------------------------------------------ methods
    async def send(self, request: w.SendMessageRequest) -> w.SendMessageResponse:
        """SendMessage: a Task (or a direct Message)."""
        if self.binding == w.BINDING_JSONRPC:
            raw: bytes | msgspec.Raw = await self._rpc("SendMessage", request)
        else:
            raw = await self._rest("POST", "/message:send", request)
        resp = self._decode(w.send_response_decoder, raw, "SendMessage")
        if resp.task is None and resp.message is None:
            raise A2AFault(f"peer {self.name}: SendMessage: neither a task nor a message")
        return resp

    async def get_task(self, task_id: str, history_length: int | None = 0) -> w.Task:
        if self.binding == w.BINDING_JSONRPC:
            raw: bytes | msgspec.Raw = await self._rpc(
                "GetTask", w.GetTaskRequest(id=task_id, history_length=history_length))
        else:
            q = f"?historyLength={history_length}" if history_length is not None else ""
            raw = await self._rest("GET", f"/tasks/{quote(task_id, safe='')}{q}")
        return self._decode(w.task_decoder, raw, "GetTask")

    async def cancel(self, task_id: str) -> w.Task:
        if self.binding == w.BINDING_JSONRPC:
            raw: bytes | msgspec.Raw = await self._rpc("CancelTask",
                                                       w.CancelTaskRequest(id=task_id))
        else:
            raw = await self._rest("POST", f"/tasks/{quote(task_id, safe='')}:cancel")
        return self._decode(w.task_decoder, raw, "CancelTask")

    async def stream(self, request: w.SendMessageRequest) -> AsyncGenerator[w.StreamResponse, None]:
        """SendStreamingMessage: the task's events until the peer ends the stream.

        A cut connection raises a retryable A2AFault (the caller falls back to
        polling GetTask); a JSON-RPC error event raises A2AFault.
        """
        assert self._http is not None and self.interface is not None
        rpc = self.binding == w.BINDING_JSONRPC
        if rpc:
            url = self.interface.url
            body = w.encode({"jsonrpc": "2.0", "id": next(self._ids),
                             "method": "SendStreamingMessage", "params": request})
        else:
            url = self.interface.url.rstrip("/") + "/message:stream"
            body = w.encode(request)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        try:
            async with self._http.post(url, data=body, headers=headers,
                                       allow_redirects=False) as resp:
                ctype = resp.headers.get("Content-Type", "")
                if resp.status >= 400 or not ctype.startswith("text/event-stream"):
                    raw = await self._read(resp)
                    if rpc:
                        env = None
                        with contextlib.suppress(*PEER_FAULTS):  # no envelope: the status
                            env = _envelope.decode(raw) if raw.startswith(b"{") else None
                        if env is not None and env.error is not None:
                            raise A2AFault(f"peer {self.name}: SendStreamingMessage: "
                                          f"{env.error.message} ({env.error.code})",
                                          code=env.error.code)
                    raise A2AFault(f"peer {self.name}: SendStreamingMessage: HTTP "
                                  f"{resp.status} {ctype or 'no content type'}",
                                  retryable=resp.status >= 500)
                parser = SSEParser(max_event=self.max_bytes)  # the bound is the parser's
                while chunk := await resp.content.readany():
                    try:
                        events = parser.feed(chunk)
                    except SSEEventTooLarge:
                        _log.warning("a2a.limit", peer=self.name, limit="max_bytes",
                                     bytes=self.max_bytes)
                        raise A2AFault(f"peer {self.name}: a stream event exceeds "
                                      f"{self.max_bytes} bytes (max_bytes); dropped") from None
                    for ev in events:
                        if not ev.data:
                            continue
                        yield self._event(ev.data, rpc)
        except (aiohttp.ClientError, OSError) as exc:
            raise self._fault(exc, "SendStreamingMessage") from None

    def _event(self, data: str, rpc: bool) -> w.StreamResponse:
        if rpc:
            env = self._decode(_envelope, data.encode(), "SendStreamingMessage")
            if env.error is not None:
                raise A2AFault(f"peer {self.name}: stream: {env.error.message} "
                              f"({env.error.code})", code=env.error.code)
            if not env.result:
                raise A2AFault(f"peer {self.name}: stream: an event without a result")
            return self._decode(w.stream_decoder, env.result, "stream event")
        return self._decode(w.stream_decoder, data.encode(), "stream event")
