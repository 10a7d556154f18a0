"""Pairwise comparison: both orders, only consistent wins count, position bias reported."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.calibrate.compare import Choice, Pair, PairOutcome, as_choice, compare, decide
from sidecar.errors import JudgeUnavailable

A, B, T, X = Choice.A, Choice.B, Choice.TIE, Choice.ERROR


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


@pytest.mark.parametrize(
    ("raw", "choice"),
    [
        pytest.param("A", A, id="A"),
        pytest.param(" tie ", T, id="tie-lowercase"),
        pytest.param("C", X, id="unknown"),
        pytest.param(None, X, id="none"),
        pytest.param("Output (a)", X, id="free-text"),
    ],
)
def test_as_choice_trusts_nothing(raw: object, choice: Choice) -> None:
    assert as_choice(raw) == choice


class ScriptedJudge:
    """Answers from a table keyed by (prompt, answer_a); counts calls in flight."""

    def __init__(self, script: dict[tuple[str, str], str]) -> None:
        self.script = script
        self.calls: list[tuple[str, str, str]] = []
        self.in_flight = 0
        self.peak = 0

    async def __call__(self, prompt: str, answer_a: str, answer_b: str) -> str:
        self.calls.append((prompt, answer_a, answer_b))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0)  # yield so concurrent pairs overlap
        self.in_flight -= 1
        answer = self.script[(prompt, answer_a)]
        if answer == "raise":
            raise JudgeUnavailable("timeout", "judge timed out")
        return answer


async def test_compare_counts_only_consistent_wins() -> None:
    pairs = [Pair(f"p{i}", f"q{i}", "cand", "base") for i in range(6)]
    script = {
        ("q0", "cand"): "A", ("q0", "base"): "B",  # candidate wins
        ("q1", "cand"): "A", ("q1", "base"): "B",  # candidate wins
        ("q2", "cand"): "B", ("q2", "base"): "A",  # baseline wins
        ("q3", "cand"): "A", ("q3", "base"): "A",  # picks the first answer both times
        ("q4", "cand"): "TIE", ("q4", "base"): "TIE",
        ("q5", "cand"): "raise", ("q5", "base"): "B",
    }  # fmt: skip
    judge = ScriptedJudge(script)
    report = await compare(pairs, judge, concurrency=2)
    assert [r.outcome for r in report.results] == [
        PairOutcome.CANDIDATE,
        PairOutcome.CANDIDATE,
        PairOutcome.BASELINE,
        PairOutcome.POSITION_FIRST,
        PairOutcome.TIE,
        PairOutcome.ERROR,
    ]
    # Each pair went to the judge in both orders.
    assert ("q0", "cand", "base") in judge.calls
    assert ("q0", "base", "cand") in judge.calls
    assert len(judge.calls) == 12
    assert judge.peak <= 2
    data = report.to_json()
    assert (data["candidate_wins"], data["baseline_wins"], data["ties"]) == (2, 1, 1)
    assert (data["position_biased"], data["errors"]) == (1, 1)
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
    report = await compare(
        [Pair("p", "q", "c", "b")], ScriptedJudge({("q", "c"): "A", ("q", "b"): "A"})
    )
    data = report.to_json()
    assert data["win_rate"] is None
    assert data["win_rate_lower_bound"] is None


async def test_compare_rejects_bad_concurrency() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        await compare([], ScriptedJudge({}), concurrency=0)
