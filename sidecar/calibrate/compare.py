"""Pairwise comparison of a candidate against a baseline, with position bias controlled.

Every pair is judged twice, the candidate first as answer A and then as answer
B. Judges prefer a position more often than one would like (Zheng et al. 2023,
"Judging LLM-as-a-judge"; LLMBar reports both orders for the same reason), so a
win counts only when both orders name the same answer. How the two answers
combine, from the candidate's side:

=================  =================  ==================
first (cand = A)   second (cand = B)  outcome
=================  =================  ==================
ERROR              anything           error
anything           ERROR              error
candidate          candidate          candidate wins
baseline           baseline           baseline wins
TIE                TIE                tie
A (candidate)      A (baseline)       position bias: first
B (baseline)       B (candidate)      position bias: second
anything else      (e.g. win + TIE)   inconsistent
=================  =================  ==================

The judge is a parameter (``judge_pair(prompt, answer_a, answer_b)``), so the
backends stay elsewhere and tests pass a plain async function. Its answer is
not trusted: anything but ``A``, ``B``, ``TIE`` or ``ERROR`` counts as ERROR.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.calibrate.stats import wilson_interval
from sidecar.errors import JudgeError

JudgePair = Callable[[str, str, str], Awaitable[str]]


class Choice(enum.StrEnum):
    A = "A"
    B = "B"
    TIE = "TIE"
    ERROR = "ERROR"


class PairOutcome(enum.StrEnum):
    CANDIDATE = "candidate"
    BASELINE = "baseline"
    TIE = "tie"
    POSITION_FIRST = "position_bias_first"  # the judge picked answer A both times
    POSITION_SECOND = "position_bias_second"  # the judge picked answer B both times
    INCONSISTENT = "inconsistent"
    ERROR = "error"

    @property
    def position_biased(self) -> bool:
        return self in (
            PairOutcome.POSITION_FIRST,
            PairOutcome.POSITION_SECOND,
            PairOutcome.INCONSISTENT,
        )


def as_choice(raw: object) -> Choice:
    if isinstance(raw, str) and raw.strip().upper() in Choice.__members__:
        return Choice(raw.strip().upper())
    return Choice.ERROR


def decide(first: Choice, second: Choice) -> PairOutcome:
    """Combine the two orders; ``first`` had the candidate as A, ``second`` as B."""
    match first, second:
        case (Choice.ERROR, _) | (_, Choice.ERROR):
            return PairOutcome.ERROR
        case Choice.A, Choice.B:
            return PairOutcome.CANDIDATE
        case Choice.B, Choice.A:
            return PairOutcome.BASELINE
        case Choice.TIE, Choice.TIE:
            return PairOutcome.TIE
        case Choice.A, Choice.A:
            return PairOutcome.POSITION_FIRST
        case Choice.B, Choice.B:
            return PairOutcome.POSITION_SECOND
        case _:
            return PairOutcome.INCONSISTENT


@dataclass(frozen=True, slots=True)
class Pair:
    case_id: str
    prompt: str
    candidate: str
    baseline: str


@dataclass(frozen=True, slots=True)
class PairResult:
    case_id: str
    first: Choice
    second: Choice
    outcome: PairOutcome


@dataclass(frozen=True, slots=True)
class CompareReport:
    """Counts over all pairs; only consistent wins enter the win rate."""

    results: tuple[PairResult, ...]
    confidence: float = 0.95

    def count(self, outcome: PairOutcome) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def position_biased(self) -> int:
        return sum(1 for r in self.results if r.outcome.position_biased)

    @property
    def win_rate(self) -> float | None:
        """Candidate wins over consistent decisive pairs (ties and bias left out)."""
        wins, losses = self.count(PairOutcome.CANDIDATE), self.count(PairOutcome.BASELINE)
        return wins / (wins + losses) if wins + losses else None

    def to_json(self) -> dict[str, Any]:
        wins, losses = self.count(PairOutcome.CANDIDATE), self.count(PairOutcome.BASELINE)
        interval = wilson_interval(wins, wins + losses, self.confidence)
        counts = Counter(r.outcome.value for r in self.results)
        return {
            "pairs": len(self.results),
            "candidate_wins": wins,
            "baseline_wins": losses,
            "ties": self.count(PairOutcome.TIE),
            "position_biased": self.position_biased,
            "errors": self.count(PairOutcome.ERROR),
            "outcomes": {o.value: counts.get(o.value, 0) for o in PairOutcome},
            "win_rate": self.win_rate,
            "win_rate_lower_bound": interval.low if interval else None,
            "win_rate_upper_bound": interval.high if interval else None,
            "confidence": self.confidence,
            "position_biased_cases": [
                {"case_id": r.case_id, "first": r.first.value, "second": r.second.value}
                for r in self.results
                if r.outcome.position_biased
            ],
        }


async def _ask(judge_pair: JudgePair, prompt: str, a: str, b: str) -> Choice:
    try:
        return as_choice(await judge_pair(prompt, a, b))
    except JudgeError:
        # A backend that raises instead of answering ERROR still yields a verdict.
        return Choice.ERROR


async def judge_both_orders(pair: Pair, judge_pair: JudgePair) -> PairResult:
    first = await _ask(judge_pair, pair.prompt, pair.candidate, pair.baseline)
    second = await _ask(judge_pair, pair.prompt, pair.baseline, pair.candidate)
    return PairResult(pair.case_id, first, second, decide(first, second))


async def compare(
    pairs: Sequence[Pair],
    judge_pair: JudgePair,
    *,
    concurrency: int = 4,
    confidence: float = 0.95,
) -> CompareReport:
    """Judge every pair in both orders with at most ``concurrency`` pairs in flight."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)

    async def one(pair: Pair) -> PairResult:
        async with gate:
            return await judge_both_orders(pair, judge_pair)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(pair)) for pair in pairs]
    return CompareReport(tuple(task.result() for task in tasks), confidence)
