"""An OpenAI-compatible Chat Completions gateway over aiohttp.

`POST {base}/chat/completions` with `model`, `messages` and `tools` (`type:
function`); the answer's `choices[0].message` carries `content` and/or
`tool_calls` (several at once: parallel tool calls), and `usage`. With
`stream=True` the request asks for `stream: true` (plus `stream_options.
include_usage`) and the SSE answer is parsed by the native SSE parser, the
same one the MCP client uses, within the run's `StreamBounds` (one event's
bytes, `--sse-event-bytes`); tool-call deltas are reassembled by `index`.

Failures: connection errors, request timeouts, 408, 429 and 5xx are retried
with bounded exponential backoff (jittered), honouring `Retry-After` (with a
tree's `FlowGate` set, a 429 or `Retry-After` pauses every call of the tree); any other
4xx, or a gateway that keeps failing once the attempts are spent, raises
`IntelligenceUnavailable` (exit 5); every refusal keeps the gateway's own
error text (its first 200 characters), and a 401/403 names the variable that
gave the key, or says none was set (agentd.config.intelligence.key_hint). The
bearer comes from env `AGENTD_INTELLIGENCE_KEY`, else `OPENAI_API_KEY`; it is
registered for redaction and never logged.

The sampling settings (`Sampling`: --temperature, --seed, ... and --model-param's
provider fields) are encoded once and appended to every request's body, after
the fields agentd sets (which --model-param may not name), absent when unset.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import aiohttp
import msgspec
from msgspec import UNSET, Struct, UnsetType
from yarl import URL

from agentd import __version__
from agentd import log as _logmod
from agentd.config.intelligence import (
    DEFAULT_INTELLIGENCE_MAX_BYTES,
    Sampling,
    gateway_key,
    key_hint,
)
from agentd.config.model import StreamBounds
from agentd.errors import IntelligenceError
from agentd.intelligence.base import (
    Completion,
    FunctionCall,
    IntelligenceUnavailable,
    Message,
    ToolCall,
    ToolDef,
    Usage,
)
from agentd.intelligence.flow import FlowGate
from agentd.log import log
from agentd.mcp.client.rules.faults import parse_retry_after
from agentd.obs import trace
from agentd.wire.guard import FAULT_TEXT_MAX, PEER_FAULTS, fault_text
from agentd_native import SSEEventTooLarge

DEFAULT_TIMEOUT = 120.0
DEFAULT_ATTEMPTS = 5
DEFAULT_BACKOFF = 0.5
MAX_BACKOFF = 10.0
MAX_RETRY_AFTER = 60.0
RETRY_STATUSES = frozenset({408, 429})

_log = log.bind(component="intelligence")


# --- the wire ------------------------------------------------------------------

class StreamOptions(Struct):
    include_usage: bool = True


class ChatRequest(Struct, omit_defaults=True):
    messages: Sequence[Message]
    model: str | UnsetType = UNSET
    tools: Sequence[ToolDef] | UnsetType = UNSET
    stream: bool | UnsetType = UNSET
    stream_options: StreamOptions | UnsetType = UNSET


class _RespFunction(Struct):
    name: str = ""
    arguments: Any = ""


class _RespToolCall(Struct):
    id: str = ""
    function: _RespFunction = msgspec.field(default_factory=_RespFunction)


class _RespMessage(Struct):
    content: str | None = None
    tool_calls: list[_RespToolCall] | None = None


class _Choice(Struct):
    message: _RespMessage = msgspec.field(default_factory=_RespMessage)
    finish_reason: str | None = None


class _ErrorBody(Struct):
    message: str = ""


class ChatResponse(Struct):
    choices: list[_Choice] = []
    usage: Usage | None = None
    error: _ErrorBody | None = None


class _DeltaFunction(Struct):
    name: str | None = None
    arguments: str | None = None


class _DeltaToolCall(Struct):
    index: int = 0
    id: str | None = None
    function: _DeltaFunction | None = None


class _Delta(Struct):
    content: str | None = None
    tool_calls: list[_DeltaToolCall] | None = None


class _ChunkChoice(Struct):
    delta: _Delta = msgspec.field(default_factory=_Delta)
    finish_reason: str | None = None


class ChatChunk(Struct):
    choices: list[_ChunkChoice] = []
    usage: Usage | None = None
    error: _ErrorBody | None = None


_encoder = msgspec.json.Encoder()
_response_decoder = msgspec.json.Decoder(ChatResponse)
_chunk_decoder = msgspec.json.Decoder(ChatChunk)


def _retryable(reason: str, retry_after: float | None = None) -> IntelligenceError:
    """One attempt failed in a way the next may not (see `OpenAIProvider.complete`)."""
    return IntelligenceError(reason, kind="retry", retry_after=retry_after)


def _arguments_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:  # a gateway that sends an object: any depth msgspec decoded, any integer
        return _encoder.encode(value).decode()
    except PEER_FAULTS as exc:
        raise _retryable(f"malformed response: tool-call arguments {fault_text(exc)}") from None


class _StreamAssembler:
    """Reassembles streamed deltas into one Completion."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, list[Any]] = {}  # index -> [id, name, [argument parts]]
        self.usage: Usage | None = None
        self.finish: str | None = None

    def add(self, chunk: ChatChunk) -> None:
        if chunk.error is not None:
            raise _retryable(f"stream error: {chunk.error.message[:200]}")
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices[:1]:
            d = choice.delta
            if d.content:
                self.text.append(d.content)
            for tc in d.tool_calls or ():
                slot = self.calls.setdefault(tc.index, ["", "", []])
                if tc.id:
                    slot[0] = tc.id
                if tc.function is not None:
                    if tc.function.name:
                        slot[1] += tc.function.name
                    if tc.function.arguments:
                        slot[2].append(tc.function.arguments)
            if choice.finish_reason:
                self.finish = choice.finish_reason

    def completion(self) -> Completion:
        calls = [ToolCall(id=slot[0] or f"call_{i}",
                          function=FunctionCall(name=slot[1], arguments="".join(slot[2])))
                 for i, slot in sorted(self.calls.items())]
        return Completion(content="".join(self.text) if self.text else None,
                          tool_calls=calls, usage=self.usage or Usage(),
                          finish_reason=self.finish)


class OpenAICompatible:
    """The HTTP provider. Create inside the running event loop's lifetime;
    `aclose()` (or `async with`) releases the connection pool."""

    name = "openai"

    def __init__(self, base_url: str, *, model: str | None = None, stream: bool = False,
                 timeout: float = DEFAULT_TIMEOUT, attempts: int = DEFAULT_ATTEMPTS,
                 backoff: float = DEFAULT_BACKOFF, max_backoff: float = MAX_BACKOFF,
                 key: str | None = None, ca_file: str | None = None,
                 sse: StreamBounds | None = None, max_bytes: int | None = None,
                 sampling: Sampling | None = None) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        # a non-streamed answer's body: chunked, it has no length to refuse up front
        self.max_bytes = max_bytes if max_bytes is not None else DEFAULT_INTELLIGENCE_MAX_BYTES
        self.sse = sse if sse is not None else StreamBounds()  # a streamed answer's bounds
        self.model = model
        self.stream = stream
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.ca_file = ca_file
        # which variable gave the key (None: given here, or none): a 401 names it
        self.key_source: str | None = None
        if key is None:
            key, self.key_source = gateway_key()
        fields = (sampling or Sampling()).fields()
        # the settings' body fields, encoded once: `,"temperature":0.2,...}`
        self._sampling = b"," + _encoder.encode(fields)[1:] if fields else b""
        self._headers = {"Content-Type": "application/json",
                         "User-Agent": f"agentd/{__version__}"}
        if key:
            _logmod.register_secret(key)
            self._headers["Authorization"] = f"Bearer {key}"
        self._session: aiohttp.ClientSession | None = None
        # What every request repeats, built once: the parsed URL, the timeout, the
        # headers (session-wide ones merged in), so the per-request path only sends.
        self._url = URL(self.url)
        if stream:
            self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout,
                                                  sock_read=timeout)
            self._request_headers = {**self._headers, "Accept": "text/event-stream"}
        else:
            self._timeout = aiohttp.ClientTimeout(total=timeout)
            self._request_headers = {**self._headers, "Accept": "application/json"}
        # The tree's FlowGate (agentd.intelligence.flow), shared by the ledger's meter:
        # a 429 / Retry-After pauses every call of the tree, not just this one.
        self.gate: FlowGate | None = None

    def share_gate(self, gate: FlowGate) -> None:
        self.gate = gate

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ssl: Any = True
            if self.ca_file:
                import ssl as _ssl

                ssl = _ssl.create_default_context(cafile=self.ca_file)
            self._session = aiohttp.ClientSession(
                # as many connections as the tree may have calls in flight (the gate's M)
                connector=aiohttp.TCPConnector(
                    ssl=ssl, limit=max(16, self.gate.max_inflight if self.gate else 16)),
                # no cookie jar: a gateway's cookies are not state this client keeps
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("Accept-Encoding", "User-Agent"))
        return self._session

    async def __aenter__(self) -> OpenAICompatible:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def body(self, messages: Sequence[Message], tools: Sequence[ToolDef]) -> bytes:
        """The exact request body (exposed for tests and the benchmark)."""
        req = ChatRequest(messages=messages,
                          model=self.model if self.model else UNSET,
                          tools=tools if tools else UNSET,
                          stream=True if self.stream else UNSET,
                          stream_options=StreamOptions() if self.stream else UNSET)
        body = _encoder.encode(req)
        return body[:-1] + self._sampling if self._sampling else body

    async def complete(self, messages: Sequence[Message],
                       tools: Sequence[ToolDef]) -> Completion:
        body = self.body(messages, tools)
        last = "no attempt"
        for attempt in range(1, self.attempts + 1):
            try:
                return await self._attempt(body)
            except IntelligenceError as exc:
                if exc.kind != "retry":
                    raise
                last = str(exc)
                if attempt == self.attempts:
                    break
                delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
                delay *= 0.5 + random.random() / 2  # jitter
                if exc.retry_after is not None:
                    delay = min(MAX_RETRY_AFTER, max(delay, exc.retry_after))
                _log.warning("intelligence.retry", attempt=attempt, reason=last,
                             delay_s=round(delay, 3))
                gate = self.gate
                if gate is not None and (exc.retry_after is not None
                                         or last.startswith("HTTP 429")):
                    gate.pause(delay)  # the whole tree waits, not only this call
                    await gate.clear()
                else:
                    await asyncio.sleep(delay)
        raise IntelligenceUnavailable(
            f"intelligence gateway {self.url} failing after {self.attempts} attempts: {last}")

    async def _attempt(self, body: bytes) -> Completion:
        headers = self._request_headers
        if trace.enabled:  # the gateway may continue the trace (W3C headers)
            headers = {**headers, **dict(trace.headers())}
        try:
            async with self._client().post(self._url, data=body, headers=headers,
                                           timeout=self._timeout) as resp:
                if resp.status != 200:
                    await self._refuse(resp)
                ctype = resp.headers.get("Content-Type", "")
                if self.stream and ctype.startswith("text/event-stream"):
                    return await self._read_stream(resp)
                raw = await self._read_body(resp)
        except aiohttp.ClientError as exc:  # connection, payload, or a head no parser takes
            raise _retryable(f"{type(exc).__name__}: {exc}"[:FAULT_TEXT_MAX]) from None
        except TimeoutError:
            raise _retryable(f"request timed out after {self.timeout}s") from None
        return self._decode(raw)

    async def _read_body(self, resp: aiohttp.ClientResponse) -> bytes:
        """The answer, never more than `max_bytes` held; past it the gateway's fault,
        not retried (it would send the same again): exit 5."""
        chunks: list[bytes] = []
        size = 0
        while chunk := await resp.content.readany():
            size += len(chunk)
            if size > self.max_bytes:
                _log.error("intelligence.limit", gateway=self.url,
                           limit="intelligence_max_bytes", bytes=self.max_bytes)
                raise IntelligenceUnavailable(
                    f"intelligence gateway {self.url}: an answer past {self.max_bytes} bytes "
                    "(intelligence_max_bytes); dropped")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _refuse(self, resp: aiohttp.ClientResponse) -> None:
        status = resp.status
        try:
            text = (await resp.content.read(512)).decode("utf-8", "replace")
        except (aiohttp.ClientError, TimeoutError):
            text = ""
        said = f"HTTP {status} {' '.join(text.split())[:200]}".rstrip()
        if status in RETRY_STATUSES or status >= 500:
            raise _retryable(said, parse_retry_after(resp.headers.get("Retry-After"),
                                                     cap=MAX_RETRY_AFTER))
        fix = ""
        if status in (401, 403):
            fix = f": {key_hint('Authorization' in self._headers, self.key_source)}"
        elif status == 404:
            fix = (": is --intelligence the API's base URL? agentd POSTs to "
                   "{base}/chat/completions (most gateways' base ends in /v1)")
        raise IntelligenceUnavailable(
            f"intelligence gateway {self.url} refused the request: {said}{fix}")

    def _decode(self, raw: bytes) -> Completion:
        try:
            resp = _response_decoder.decode(raw)
        except PEER_FAULTS as exc:
            raise _retryable(f"malformed response: {fault_text(exc)}") from None
        if resp.error is not None and not resp.choices:
            raise _retryable(f"gateway error: {resp.error.message[:200]}")
        if not resp.choices:
            raise _retryable("response without choices")
        choice = resp.choices[0]
        msg = choice.message
        calls = [ToolCall(id=tc.id or f"call_{i}",
                          function=FunctionCall(name=tc.function.name,
                                                arguments=_arguments_text(tc.function.arguments)))
                 for i, tc in enumerate(msg.tool_calls or ())]
        return Completion(content=msg.content, tool_calls=calls,
                          usage=resp.usage or Usage(), finish_reason=choice.finish_reason)

    async def _read_stream(self, resp: aiohttp.ClientResponse) -> Completion:
        """Assemble a streamed answer; an event past `sse.event_bytes` is the
        gateway's fault, not retried (it would stream the same again): exit 5."""
        parser = self.sse.parser()
        acc = _StreamAssembler()
        done = False
        try:
            async for data in resp.content.iter_any():
                try:
                    events = parser.feed(data)
                except SSEEventTooLarge as exc:
                    _log.error("intelligence.limit", gateway=self.url, limit="sse_event_bytes",
                               bytes=exc.limit)
                    raise IntelligenceUnavailable(
                        f"intelligence gateway {self.url}: a streamed event past {exc.limit} "
                        "bytes (sse_event_bytes); stream dropped") from None
                for ev in events:
                    payload = ev.data  # str: msgspec decodes it as it is
                    if done or not payload:
                        continue
                    if payload.strip() == "[DONE]":
                        done = True
                        continue
                    try:
                        acc.add(_chunk_decoder.decode(payload))
                    except PEER_FAULTS as exc:
                        raise _retryable(f"malformed stream chunk: {fault_text(exc)}") from None
                if done:
                    break
        finally:
            parser.close()
        if not done and acc.finish is None:
            raise _retryable("stream ended before [DONE]")
        return acc.completion()
