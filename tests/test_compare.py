"""Pairwise comparison: both orders, only consistent wins count, position bias reported."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.calibrate.pairwise_report import CompareReport
from sidecar.errors import JudgeUnavailable
from sidecar.judge.pairwise import (
    ANSWER_A,
    PROMPT,
    Choice,
    Pair,
    PairOutcome,
    PairwiseAnswer,
    compare_pairs,
    decide,
    parse_pairwise,
)
from sidecar.judge.prompt import JudgeRequest

A, B, T, X = Choice.A, Choice.B, Choice.TIE, Choice.ERROR
MODEL = "gemini-2.5-flash"


@pytest.mark.parametrize(
    ("first", "second", "outcome"),
    [
        pytest.param(A, B, PairOutcome.CANDIDATE, id="candidate-both-orders"),
        pytest.param(B, A, PairOutcome.BASELINE, id="baseline-both-orders"),
        pytest.param(T, T, PairOutcome.TIE, id="tie"),
        pytest.param(A, A, PairOutcome.POSITION_FIRST, id="always-first"),
        pytest.param(B, B, PairOutcome.POSITION_SECOND, id="always-second"),
        pytest.param(A, T, PairOutcome.INCONSISTENT, id="win-then-tie"),
        pytest.param(T, A, PairOutcome.INCONSISTENT, id="tie-then-loss"),
        pytest.param(X, B, PairOutcome.ERROR, id="error-first"),
        pytest.param(A, X, PairOutcome.ERROR, id="error-second"),
    ],
)
def test_decide(first: Choice, second: Choice, outcome: PairOutcome) -> None:
    assert decide(first, second) == outcome


class ScriptedJudge:
    """Answers from a table keyed by (prompt, answer_a); counts calls in flight.

    The table holds the model's raw answer text, parsed as the service would;
    ``"raise"`` makes the judge raise instead of answering.
    """

    def __init__(self, script: dict[tuple[str, str], str]) -> None:
        self.script = script
        self.calls: list[tuple[str, str, str]] = []
        self.models: set[str] = set()
        self.in_flight = 0
        self.peak = 0

    async def judge_pair(self, model: str, request: JudgeRequest) -> PairwiseAnswer:
        blocks = dict(request.blocks)
        prompt, answer_a = blocks[PROMPT], blocks[ANSWER_A]
        self.calls.append((prompt, answer_a, blocks["ANSWER_B"]))
        self.models.add(model)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0)  # yield so concurrent pairs overlap
        self.in_flight -= 1
        answer = self.script[(prompt, answer_a)]
        if answer == "raise":
            raise JudgeUnavailable("timeout", "judge timed out")
        return parse_pairwise(f'{{"evidence": "because", "winner": "{answer}"}}')


async def test_compare_counts_only_consistent_wins() -> None:
    pairs = [Pair(f"p{i}", f"q{i}", "cand", "base") for i in range(7)]
    script = {
        ("q0", "cand"): "A", ("q0", "base"): "B",  # candidate wins
        ("q1", "cand"): "A", ("q1", "base"): "B",  # candidate wins
        ("q2", "cand"): "B", ("q2", "base"): "A",  # baseline wins
        ("q3", "cand"): "A", ("q3", "base"): "A",  # picks the first answer both times
        ("q4", "cand"): "TIE", ("q4", "base"): "TIE",
        ("q5", "cand"): "raise", ("q5", "base"): "B",
        ("q6", "cand"): "A", ("q6", "base"): "tie",  # not exactly TIE: bad_winner
    }  # fmt: skip
    judge = ScriptedJudge(script)
    results = await compare_pairs(pairs, judge, model=MODEL, concurrency=2)
    report = CompareReport(results)
    assert [r.outcome for r in report.results] == [
        PairOutcome.CANDIDATE,
        PairOutcome.CANDIDATE,
        PairOutcome.BASELINE,
        PairOutcome.POSITION_FIRST,
        PairOutcome.TIE,
        PairOutcome.ERROR,
        PairOutcome.ERROR,
    ]
    # Each pair went to the judge in both orders, with the model asked for.
    assert ("q0", "cand", "base") in judge.calls
    assert ("q0", "base", "cand") in judge.calls
    assert len(judge.calls) == 14
    assert judge.models == {MODEL}
    assert judge.peak <= 2
    # A judge that raises still yields an ERROR order, with the error's reason.
    assert results[5].first == PairwiseAnswer(X, reason="timeout")
    assert results[6].second == PairwiseAnswer(X, reason="bad_winner")
    assert report.error_reasons() == {"timeout": 1, "bad_winner": 1}
    data = report.to_json()
    assert (data["candidate_wins"], data["baseline_wins"], data["ties"]) == (2, 1, 1)
    assert (data["position_biased"], data["errors"]) == (1, 2)
    assert data["win_rate"] == pytest.approx(2 / 3)
    assert data["position_biased_cases"] == [{"case_id": "p3", "first": "A", "second": "A"}]
    assert (
        0.0
        <= data["win_rate_lower_bound"]
        <= data["win_rate"]
        <= data["win_rate_upper_bound"]
        <= 1.0
    )


async def test_compare_without_decisive_pairs() -> None:
    results = await compare_pairs(
        [Pair("p", "q", "c", "b")],
        ScriptedJudge({("q", "c"): "A", ("q", "b"): "A"}),
        model=MODEL,
    )
    data = CompareReport(results).to_json()
    assert data["win_rate"] is None
    assert data["win_rate_lower_bound"] is None


async def test_compare_rejects_bad_concurrency() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        await compare_pairs([], ScriptedJudge({}), model=MODEL, concurrency=0)
