"""Resuming a run from its record (agentd.journal.resume, sans-IO) and the one shape
of a recorded exchange it compares with (agentd.journal.exchange).

Steps are recorded the way the store keeps them (`request_json` of the request,
the answer's JSON), and also written and read back through a real journal
directory, so the rule is checked on what a restarted worker actually loads."""

from __future__ import annotations

import time

import msgspec

from agentd.child.control import IoCall, IoComplete, IoCompletion, IoRead
from agentd.intelligence.base import Completion, Message
from agentd.journal.exchange import AnswerBounds, first_difference, request_json
from agentd.journal.records import RunRecord, Step
from agentd.journal.resume import InFlight, Live, Replayed, Resumption
from agentd.journal.store import Journal, Loaded
from agentd.wire.jsonrpc import ErrorObject
from agentd.wire.shapes import Observed


def ask(text: str) -> IoComplete:
    return IoComplete(messages=[Message(role="user", content=text)])


def said(text: str) -> IoCompletion:
    return IoCompletion(completion=Completion(content=text))


def answered(rel: str, step: int, req, answer) -> Step:
    kind = str(req.__struct_config__.tag)
    if isinstance(answer, ErrorObject):
        return Step(rel, step, kind, "answered", request_json(req),
                    error={"code": answer.code, "message": answer.message, "data": None})
    return Step(rel, step, kind, "answered", request_json(req), msgspec.json.encode(answer))


def sent(rel: str, step: int, req) -> Step:
    return Step(rel, step, str(req.__struct_config__.tag), "sent", request_json(req))


def record(*steps: Step) -> dict[tuple[str, int], Step]:
    return {(s.rel, s.step): s for s in steps}


def test_recorded_steps_are_replayed_then_the_handle_goes_live():
    res = Resumption(record(answered("", 1, ask("a"), said("one")),
                            answered("", 2, ask("b"), said("two"))))
    assert [res.step_of("") for _ in range(3)] == [1, 2, 3]
    first = res.next("", 1, ask("a"))
    assert isinstance(first, Replayed) and first.answer == said("one")
    second = res.next("", 2, ask("b"))
    assert isinstance(second, Replayed) and second.answer == said("two")
    assert res.next("", 3, ask("c")) == Live()
    assert res.replayed == 2


def test_each_handle_counts_its_own_steps():
    res = Resumption(record(answered("", 1, ask("root 1"), said("r1")),
                            answered(".1", 1, ask("child 1"), said("c1")),
                            answered(".1", 2, ask("child 2"), said("c2")),
                            answered("", 2, ask("root 2"), said("r2"))))
    # interleaved otherwise than recorded: each handle's requests are its own sequence
    order = [(".1", "child 1"), ("", "root 1"), (".1", "child 2"), ("", "root 2")]
    for rel, text in order:
        verdict = res.next(rel, res.step_of(rel), ask(text))
        assert isinstance(verdict, Replayed), (rel, text, verdict)
    assert res.step_of("") == 3 and res.step_of(".1") == 3 and res.step_of(".2") == 1
    assert res.replayed == 4


def test_a_recorded_error_is_replayed_as_the_error():
    res = Resumption(record(answered("", 1, ask("a"), ErrorObject(-32000, "refused"))))
    verdict = res.next("", 1, ask("a"))
    assert isinstance(verdict, Replayed) and verdict.answer == ErrorObject(-32000, "refused")


def test_the_exchange_in_flight_is_reported_once():
    call = IoCall(name="srv__charge", arguments={"amount": 3})
    res = Resumption(record(answered("", 1, ask("a"), said("call it")), sent("", 2, call),
                            answered("", 3, ask("never reached"), said("?"))))
    assert isinstance(res.next("", 1, ask("a")), Replayed)
    assert res.next("", 2, call) == InFlight("call", "srv__charge")
    assert res.next("", 3, ask("never reached")) == Live()  # the handle is live from there


def test_a_model_request_in_flight_names_no_tool():
    res = Resumption(record(sent("", 1, ask("a"))))
    assert res.next("", 1, ask("a")) == InFlight("complete", None)


def test_a_different_request_diverges_and_the_handle_goes_live():
    res = Resumption(record(answered("", 1, ask("a"), said("one")),
                            answered("", 2, ask("b"), said("two")),
                            answered(".1", 1, ask("c"), said("three"))))
    verdict = res.next("", 1, ask("not a"))
    assert isinstance(verdict, Live) and verdict.diverged is not None
    assert "request.messages[0].content" in verdict.diverged
    assert '"a"' in verdict.diverged and '"not a"' in verdict.diverged
    assert res.next("", 2, ask("b")) == Live()  # abandoned from there, even what matches
    assert isinstance(res.next(".1", 1, ask("c")), Replayed)  # another handle is untouched


def test_an_answer_past_its_live_bound_goes_live():
    big = said("x" * 500)
    read = IoRead(uri="mem://notes/1")
    res = Resumption(record(answered("", 1, ask("a"), big),
                            answered(".1", 1, read, Observed("y" * 500))),
                     AnswerBounds(completion=200, observation=300))
    verdict = res.next("", 1, ask("a"))
    assert isinstance(verdict, Live) and "--intelligence-max-bytes=200" in (verdict.diverged or "")
    verdict = res.next(".1", 1, read)
    assert isinstance(verdict, Live) and "--mcp-max-bytes=300" in (verdict.diverged or "")
    assert res.replayed == 0


def test_an_answer_that_is_not_one_goes_live():
    bad = Step("", 1, "complete", "answered", request_json(ask("a")), b'{"kind": "nonsense"}')
    verdict = Resumption(record(bad)).next("", 1, ask("a"))
    assert isinstance(verdict, Live) and "not one" in (verdict.diverged or "")


async def test_a_run_written_and_loaded_resumes_from_its_file(tmp_path):
    journal = Journal.open(str(tmp_path / "j"))
    call = IoCall(name="srv__charge", arguments={"amount": 3})
    rj = await journal.begin(RunRecord(name="served.1", handle="served.1", request={},
                                       started_at=time.time()))
    await rj.answered("", 1, ask("a"), said("call it"))
    await rj.answered(".1", 1, ask("child"), said("child said"))
    await rj.sent("", 2, call)
    await rj.close()
    await journal.aclose()
    journal = Journal.open(str(tmp_path / "j"))
    [run] = await journal.load()
    await journal.aclose()
    assert isinstance(run, Loaded)
    res = Resumption(run.steps)
    assert res.next(".1", res.step_of(".1"), ask("child")) == Replayed(said("child said"))
    assert res.next("", res.step_of(""), ask("a")) == Replayed(said("call it"))
    assert res.next("", res.step_of(""), call) == InFlight("call", "srv__charge")


def test_request_json_leaves_out_the_trace_context():
    with_trace = IoCall(name="srv__x", arguments={}, traceparent="00-abc-def-01")
    assert "traceparent" not in request_json(with_trace)
    assert request_json(with_trace) == request_json(IoCall(name="srv__x", arguments={}))


def test_first_difference_names_the_path():
    assert first_difference({"a": [1, 2]}, {"a": [1, 2]}) is None
    assert first_difference({"a": [1, 2]}, {"a": [1, 3]}) == ".a[1]: recorded 2, now 3"
    assert first_difference({"a": [1]}, {"a": [1, 2]}) == ".a: recorded 1 items, now 2"
    assert first_difference({"a": 1}, {"b": 1}) == ".a: recorded 1, now (absent)"
    assert first_difference(1, 1.0) is not None  # another type is another request
