"""agentd.batch.score: the built-in scorers, command scorers as real child
processes (a good one and hostile ones, each written to misbehave one way), and
pass@k / pass^k against hand-computed values."""

from __future__ import annotations

import itertools
import json
import math
import re
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.batch.files import ResultLine, TaskLine
from agentd.batch.score import (
    SCORER_OUTPUT_BYTES,
    Scorer,
    Unscored,
    builtin,
    contract_met,
    parse_scorer,
    pass_at_k,
    pass_hat_k,
    run_command,
    score_line,
    summarize,
)
from agentd.errors import ConfigError
from agentd.output import Usage

SCHEMA = json.dumps({"type": "object", "required": ["answer"],
                     "properties": {"answer": {"type": "integer"}}})


def test_exact_includes_regex():
    assert builtin("exact", "done 4", None, "  done 4\n") == 1.0
    assert builtin("exact", "done 4", None, "done 44") == 0.0
    assert builtin("includes", "echo 4", None, "done 4: echo 4") == 1.0
    assert builtin("includes", "echo 5", None, "done 4: echo 4") == 0.0
    assert builtin("regex", r"^done \d+:", None, "done 4: echo 4") == 1.0
    assert builtin("regex", r"^echo", None, "done 4: echo 4") == 0.0
    missed = builtin("regex", "(", None, "x")
    assert isinstance(missed, Unscored) and re.search("not a pattern", missed.why)
    missed = builtin("regex", 4, None, "x")
    assert isinstance(missed, Unscored) and re.search("must be a string", missed.why)
    missed = builtin("exact", None, None, "x")
    assert isinstance(missed, Unscored) and re.search("no target", missed.why)


def test_json_equality_is_json_not_python():
    assert builtin("json", {"a": [1, 2], "b": None}, None, {"b": None, "a": [1.0, 2]}) == 1.0
    assert builtin("json", {"a": 1}, None, '{"a": 1}') == 1.0  # a text result that is JSON
    assert builtin("json", {"a": True}, None, {"a": 1}) == 0.0  # true is not 1
    assert builtin("json", [1, 2], None, [2, 1]) == 0.0
    assert builtin("json", "x", None, "y") == 0.0


def test_schema_checks_the_result_against_the_output_contract():
    assert builtin("schema", None, SCHEMA, {"answer": 42}) == 1.0
    assert builtin("schema", None, SCHEMA, '{"answer": 42}') == 1.0
    assert builtin("schema", None, SCHEMA, {"answer": "42"}) == 0.0
    missed = builtin("schema", None, "answer in one word", "x")
    assert isinstance(missed, Unscored) and re.search("not a JSON Schema", missed.why)


def test_contract_met():
    assert contract_met(SCHEMA, "completed", {"answer": 1}) is True
    assert contract_met(SCHEMA, "completed", {"answer": "one"}) is False
    assert contract_met("JSON: {answer: int}", "completed", "not json") is False
    assert contract_met("JSON: {answer: int}", "completed", {"answer": 1}) is True
    assert contract_met("one word", "completed", "x") is None  # free text: not checked
    assert contract_met(None, "completed", "x") is None
    assert contract_met(SCHEMA, "failed", None) is None


def test_parse_scorer():
    assert parse_scorer("command:python3 -c 'print(1)'").argv == ("python3", "-c", "print(1)")
    for bad in ("exactly", "command:", "command:'unclosed"):
        with pytest.raises(ConfigError, match="--scorer"):
            parse_scorer(bad)


def py(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


GOOD = py("import json,sys; d=json.load(sys.stdin); "
          "print(json.dumps({'reward': float(d['result']['result'] == d['sample']['target']), "
          "'len': len(d['result']['result'])}))")


async def test_a_command_scorer_reads_the_sample_and_prints_numbers():
    task = TaskLine(id="a", instruction="i", target="yes", metadata={"k": 1})
    line = ResultLine(id="a", status="completed", partial=False, result="yes", steps=1,
                      usage=Usage(), run_id="r/0.1", epoch=1)
    scored = await score_line(line, task, (parse_scorer("exact"), _command(GOOD)), 30)
    assert scored.scores == {"exact": 1.0, "reward": 1.0, "len": 3.0}
    assert scored.score_errors is None


def _command(argv: tuple[str, ...]) -> Scorer:
    return Scorer("command", argv)


@pytest.mark.parametrize(("argv", "words"), [
    (py("import time; time.sleep(3600)"), "no score within --scorer-timeout=0.5s"),
    (py("import sys; sys.exit(3)"), "exited with code 3"),
    (py("import os; os.kill(os.getpid(), 9)"), "exited with code -9"),
    (py("print('garbage')"), "not JSON"),
    (py("print('{\"reward\": \"high\"}')"), "one JSON object of numbers"),
    (py("print('{\"reward\": true}')"), "one JSON object of numbers"),
    (py("print('[1]')"), "one JSON object of numbers"),
    (py(f"import sys; sys.stdout.write('1' * {SCORER_OUTPUT_BYTES + 1}); "
        "sys.stdout.flush(); import time; time.sleep(3600)"), "printed more than"),
    (("/nonexistent/scorer",), "No such file"),
])
async def test_a_misbehaving_command_scorer_is_a_scoring_error(argv, words):
    """Each hostile scorer misbehaves one way; each is one error, and the slow and
    the flooding ones are killed (the call returns although they never exit)."""
    missed = await run_command(argv, b'{"sample": {}, "result": {}}', 0.5)
    assert isinstance(missed, Unscored) and re.search(words.replace("(", r"\("), missed.why)


async def test_a_scoring_error_is_recorded_in_the_line_and_other_scorers_still_score():
    task = TaskLine(id="a", instruction="i", target="yes")
    line = ResultLine(id="a", status="completed", partial=False, result="yes", steps=1,
                      usage=Usage(), run_id="r/0.1", epoch=1)
    scored = await score_line(line, task, (_command(py("print('x')")),
                                           parse_scorer("includes")), 5)
    assert scored.scores == {"includes": 1.0}
    assert scored.score_errors is not None and "not JSON" in scored.score_errors["command"]


def test_pass_at_k_and_pass_hat_k_by_hand():
    # n=5, c=2: pass@1 = 2/5; pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; pass@4 = 1 (n-c < k)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)
    assert pass_at_k(5, 2, 4) == 1.0
    # pass^k = C(c,k)/C(n,k): pass^1 = 2/5, pass^2 = 1/10, pass^3 = 0
    assert pass_hat_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_hat_k(5, 2, 3) == 0.0
    assert pass_at_k(3, 0, 2) == 0.0 and pass_hat_k(3, 3, 3) == 1.0


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_k_is_a_probability_monotone_in_k(nc):
    n, c = nc
    at = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    hat = [pass_hat_k(n, c, k) for k in range(1, n + 1)]
    assert all(0.0 <= x <= 1.0 for x in at + hat)
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(at))  # more tries: no worse
    assert all(a + 1e-12 >= b for a, b in itertools.pairwise(hat))  # all k pass: no easier
    assert at[0] == pytest.approx(c / n) == pytest.approx(hat[0])


def test_summarize_by_hand():
    lines = [{"id": "a", "scores": {"exact": s}} for s in (1.0, 0.0, 1.0)]
    lines += [{"id": "b", "scores": {"exact": s}} for s in (0.0, 0.0, 0.0)]
    lines.append({"id": "c", "score_errors": {"exact": "no target"}})
    out = summarize(lines)["exact"]
    # per-sample means 2/3 and 0: mean 1/3, stderr = sd([2/3, 0]) / sqrt(2) = 1/3
    assert out["mean"] == pytest.approx(1 / 3, abs=1e-6)
    assert out["stderr"] == pytest.approx(math.sqrt(2 / 9) / math.sqrt(2), abs=1e-6)
    assert out["accuracy"] == pytest.approx(2 / 6, abs=1e-6)
    assert out["samples"] == 2 and out["runs"] == 6 and out["scoring_errors"] == 1
    # a: n=3, c=2 -> pass@2 = 1 - C(1,2)/C(3,2) = 1; b: 0 -> mean 0.5
    assert out["pass_at_k"] == {"1": pytest.approx(1 / 3, abs=1e-6), "2": 0.5, "3": 0.5}
    # a: pass^2 = C(2,2)/C(3,2) = 1/3; pass^3 = 0
    assert out["pass_hat_k"] == {"1": pytest.approx(1 / 3, abs=1e-6),
                                 "2": pytest.approx(1 / 6, abs=1e-6), "3": 0.0}
