"""The batch root's broker: every sample's I/O, told apart by sample.

A batch runs each sample as a child of the batch root (handle `0.k`), and its
subagents as that child's descendants (`0.k.…`): processes are flat, so every
intelligence and MCP request of a sample's whole subtree reaches the root's
`Broker` on behalf of a handle under `0.k`. This subclass counts each sample's
model answers (its own handle's: the result line's `steps`) and the tokens of
its subtree (`usage`), and is the one place a cassette is recorded from
(`--record`: after the real broker answered) or replayed into (`--replay`:
instead of it, with no provider and no MCP connection at all), see
agentd.batch.cassette. Under `--journal --resume` the tree answers a resumed
sample's recorded steps from its journal instead of this broker and tells it
(`replayed`): each is counted and recorded as one this broker gave, the one
code path of an answer given (`_given`). A resource update routed to a handle of a sample is
recorded with the number of that handle's requests answered by then, and a
replay sends it to the handle once it answered that many: on the next turn
of the loop, so after the response the Supervisor sends at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from agentd.batch.cassette import Divergence, Recorder, Replay, UpdateBody
from agentd.child.control import (
    IO_FAULT,
    IO_UNAVAILABLE,
    Catalogue,
    IoAnswer,
    IoCompletion,
    IoDone,
    IoFault,
    IoRequest,
    IoResult,
    IoSubscribe,
    IoUpdated,
    io_error,
)
from agentd.config.model import DEFAULT_CASSETTE_BYTES
from agentd.errors import TreeError
from agentd.journal.exchange import AnswerBounds, ErrorBody
from agentd.log import log
from agentd.mcp.client.rules.faults import ABORT_CAUSES
from agentd.output import Usage
from agentd.tree.broker import Broker
from agentd.wire.jsonrpc import ErrorObject


def sample_of(handle: str) -> str:
    """The sample a handle belongs to: its first two components (`0.3.1.2` -> `0.3`)."""
    parts = handle.split(".", 2)
    return ".".join(parts[:2])


class Tally:
    """One sample's counts and cassette, kept while it runs."""

    def __init__(self, sample_id: str = "") -> None:
        self.sample_id = sample_id
        self.steps = 0
        self.usage = Usage()
        self.requests: dict[str, int] = {}  # relative handle -> requests so far
        self.answered: dict[str, int] = {}  # relative handle -> its last step answered
        self.recorder: Recorder | None = None
        self.replay: Replay | None = None
        self.failure: str | None = None  # a divergence or a bad cassette: the sample fails
        # an infrastructure fault a request of the sample met (the gateway failing past
        # its retries, an MCP server given up): if the sample fails, it is an `error`
        self.fault: str | None = None

    def next_step(self, rel: str) -> int:
        n = self.requests.get(rel, 0) + 1
        self.requests[rel] = n
        return n


def _narrowed(cat: Catalogue | None, scope: frozenset[str]) -> Catalogue | None:
    """A recorded catalogue cut to a (subagent's narrower) scope."""
    if cat is None or not scope:
        return None
    return msgspec.structs.replace(
        cat, tools=tuple(t for t in cat.tools if t.server in scope),
        resources=tuple(r for r in cat.resources if r.server in scope),
        instructions={n: t for n, t in cat.instructions.items() if n in scope},
        a2a_peers=tuple(p for p in cat.a2a_peers if p in scope))


def _infrastructure(err: ErrorObject) -> str | None:
    """The words of an answer that is an infrastructure fault (errors.classify's
    exits 5 and 6: the intelligence unavailable, an MCP server given up), else None."""
    if err.code == IO_UNAVAILABLE:
        return f"intelligence unavailable: {err.message}"
    if err.code == IO_FAULT and isinstance(err.data, IoFault) and err.data.cause in ABORT_CAUSES:
        return f"MCP server unusable: {err.message}"
    return None


class SampleBroker(Broker):
    """A `Broker` that counts per sample, and records or replays (module doc)."""

    def __init__(self, *, intelligence: Any, toolbox: Any = None, record: str | None = None,
                 replay: str | None = None, cassette_bytes: int = 0,
                 bounds: AnswerBounds = AnswerBounds(), model: str | None = None,
                 sampling: dict[str, Any] | None = None) -> None:
        super().__init__(intelligence=intelligence, toolbox=toolbox)
        self.model = model  # what each cassette's header records of the requests
        self.sampling = sampling
        self.tallies: dict[str, Tally] = {}
        self.record_dir = record
        self.replay_dir = replay
        self.cassette_bytes = cassette_bytes
        self.bounds = bounds  # what a replayed answer meets, as a live one would
        self._replayed: Catalogue | None = None  # the catalogue replay offers

    def load(self, sample_id: str) -> Replay | str:
        """`--replay`: the sample's cassette, or why it cannot be replayed (missing,
        not a regular file, too large, not in the format). Blocking file reads
        and nothing of the broker's state: the batch runs it off the event loop."""
        assert self.replay_dir is not None
        try:
            return Replay(self.replay_dir, sample_id, max_bytes=self.cassette_bytes,
                          bounds=self.bounds)
        except TreeError as exc:
            return str(exc)

    def begin(self, sample: str, sample_id: str, scope: frozenset[str],
              replay: Replay | str | None = None) -> None:
        """Before the sample's child starts (its catalogue is not asked for yet);
        under `--replay`, with what `load` gave."""
        tally = self.tallies[sample] = Tally(sample_id)
        if self.record_dir is not None:
            try:
                tally.recorder = Recorder(self.record_dir, sample_id, sorted(scope),
                                          super().catalogue(scope),
                                          max_bytes=self.cassette_bytes
                                          or DEFAULT_CASSETTE_BYTES,
                                          model=self.model, sampling=self.sampling)
            except OSError as exc:  # the sample runs; its line says it was not recorded
                self._unrecorded(tally, sample_id, exc)
        elif isinstance(replay, Replay):
            tally.replay = replay
            self._replayed = replay.header.catalogue
        elif replay is not None:
            tally.failure = replay

    def end(self, sample: str) -> Tally:
        tally = self.tallies.pop(sample, None) or Tally()
        if tally.recorder is not None:
            try:
                tally.recorder.close()
            except OSError as exc:
                self._unrecorded(tally, tally.recorder.sample, exc)
        if tally.replay is not None:
            tally.usage = tally.replay.spent  # what the recording spent, not this replay
            if tally.failure is None and (rest := tally.replay.unplayed()) is not None:
                tally.failure = str(rest)
        return tally

    def catalogue(self, scope: frozenset[str]) -> Catalogue | None:
        if self.replay_dir is not None:
            return _narrowed(self._replayed, scope)
        return super().catalogue(scope)

    async def serve(self, handle: str, scope: frozenset[str], req: IoRequest) -> IoAnswer:
        sample = sample_of(handle)
        tally = self.tallies.get(sample)
        if tally is None:  # not a sample's (nothing else runs under a batch root)
            return await super().serve(handle, scope, req)
        rel = handle[len(sample):]
        step = tally.next_step(rel)
        if self.replay_dir is not None:
            result = self._replay(tally, handle, rel, step, req)
            self._counted(tally, rel, result, spent=False)  # a replay spends nothing
        else:
            result = await super().serve(handle, scope, req)
            self._given(tally, rel, step, req, result)
        if isinstance(req, IoSubscribe) and isinstance(result, IoDone) and result.ok:
            # from here on an update of this URI reaches the handle (and its cassette)
            log.info("batch.subscribed", sample=tally.sample_id, handle=rel, step=step,
                     server=req.server, uri=req.uri)
        return result

    def replayed(self, handle: str, req: IoRequest, answer: IoAnswer) -> None:
        """An answer the sample's journal gave instead of this broker (`--journal
        --resume`, agentd.tree.journaling): the same run going on, so it is taken
        as if this broker had given it -- counted in the sample's steps and usage
        (what the recording spent) and recorded into its cassette under --record."""
        sample = sample_of(handle)
        tally = self.tallies.get(sample)
        if tally is not None:
            rel = handle[len(sample):]
            self._given(tally, rel, tally.next_step(rel), req, answer)

    def _given(self, tally: Tally, rel: str, step: int, req: IoRequest,
               result: IoAnswer) -> None:
        """An answer the sample was given (live, or from its journal): its counts,
        its infrastructure fault, its cassette line."""
        self._answered(tally, rel, step)
        if isinstance(result, ErrorObject):
            tally.fault = tally.fault or _infrastructure(result)
            self._record(tally, rel, step, req, error=ErrorBody(result.code, result.message))
        else:
            self._record(tally, rel, step, req, result)
        self._counted(tally, rel, result, spent=True)

    @staticmethod
    def _counted(tally: Tally, rel: str, result: IoAnswer, *, spent: bool) -> None:
        """A model answer is a step of the sample (its own handle's) and, when it
        was `spent`, its tokens are the sample's usage (docs/batch.md)."""
        if isinstance(result, IoCompletion):
            if not rel:
                tally.steps += 1
            u = result.completion.usage
            if spent:
                tally.usage.add(Usage(u.prompt_tokens, u.completion_tokens, u.total_tokens))

    @staticmethod
    def _answered(tally: Tally, rel: str, step: int) -> None:
        tally.answered[rel] = max(step, tally.answered.get(rel, 0))

    def route_update(self, server: str, uri: str) -> bool:
        """Record the update for each subscribed handle of a recorded sample (before
        it is routed: the count of answered requests is the one it arrives after)."""
        if self.record_dir is not None and self.notify is not None:
            for handle in self.subscribers(server, uri):
                tally = self.tallies.get(sample := sample_of(handle))
                recorder = tally.recorder if tally is not None else None
                if tally is None or recorder is None:
                    continue
                rel = handle[len(sample):]
                after = tally.answered.get(rel, 0)
                try:
                    recorder.update(rel, after, server, uri)
                except OSError as exc:
                    tally.recorder = None
                    recorder.close()
                    self._unrecorded(tally, recorder.sample, exc)
                    continue
                log.info("batch.record.update", sample=recorder.sample, handle=rel,
                         after=after, server=server, uri=uri)
        return super().route_update(server, uri)

    def _record(self, tally: Tally, rel: str, step: int, req: IoRequest,
                result: IoResult | None = None, error: ErrorBody | None = None) -> None:
        recorder = tally.recorder
        if recorder is None:
            return
        try:
            recorder.add(rel, step, req, result, error)
        except OSError as exc:  # a full disk: this sample's cassette is incomplete
            tally.recorder = None
            recorder.close()
            self._unrecorded(tally, recorder.sample, exc)

    @staticmethod
    def _unrecorded(tally: Tally, sample_id: str, exc: OSError) -> None:
        tally.failure = f"--record: the cassette of sample {sample_id!r} could not be " \
                        f"written: {exc.strerror or exc}"
        log.error("batch.record.failed", sample=sample_id, error=tally.failure)

    def _deliver(self, handle: str, rel: str, step: int, sample_id: str,
                 updates: list[UpdateBody]) -> None:
        for u in updates:
            if self.notify is not None:
                self.notify(handle, IoUpdated(u.server, u.uri))
                log.info("batch.replay.update", sample=sample_id, handle=rel, after=step,
                         server=u.server, uri=u.uri)

    def _replay(self, tally: Tally, handle: str, rel: str, step: int,
                req: IoRequest) -> IoAnswer:
        if tally.failure is not None or tally.replay is None:
            return io_error(IO_FAULT, tally.failure or "replay: no cassette")
        answer = tally.replay.answer(rel, step, req)
        if isinstance(answer, Divergence):
            tally.failure = str(answer)
            log.warning("batch.replay.diverged", sample=tally.replay.sample, handle=rel,
                        step=step, error=tally.failure)
            return io_error(IO_FAULT, tally.failure)
        updates = tally.replay.updates_after(rel, step)
        if updates:  # after this answer: the Supervisor sends it before the loop turns
            asyncio.get_running_loop().call_soon(self._deliver, handle, rel, step,
                                                 tally.replay.sample, updates)
        if isinstance(answer, ErrorBody):
            return io_error(answer.code, answer.message)
        return answer
