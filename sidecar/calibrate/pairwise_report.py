"""The report of a pairwise comparison: counts, the candidate's win rate and its interval.

The pairs are judged in both orders by :mod:`sidecar.judge.pairwise`, which
also holds the rule that combines the two orders into a
:class:`~sidecar.judge.pairwise.PairOutcome`. Here only consistent wins count:
the win rate is candidate wins over consistent decisive pairs (ties,
position-biased pairs and errors left out), with its Wilson interval.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sidecar.calibrate.stats import wilson_interval
from sidecar.judge.pairwise import PairOutcome, PairResult


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

    def error_reasons(self) -> Counter[str]:
        """How often each reason made an order ERROR (two per pair at most)."""
        return Counter(
            answer.reason
            for r in self.results
            for answer in (r.first, r.second)
            if answer.reason is not None
        )

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
                {
                    "case_id": r.case_id,
                    "first": r.first.winner.value,
                    "second": r.second.winner.value,
                }
                for r in self.results
                if r.outcome.position_biased
            ],
        }
