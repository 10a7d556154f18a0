"""Agreement statistics for binary PASS/FAIL labels, computed from counts.

Everything here is exact arithmetic on a 2x2 confusion matrix; nothing reads
files. Undefined figures (an empty table, chance agreement of 1) are ``None``,
never NaN, so a report can print "degenerate" instead of a number.

Conventions: the *reference* is the human (rows), the *rater* is the judge
(columns), PASS is the positive class.

- ``fp`` is a false pass: the judge passed what the humans failed.
- ``fn`` is a false fail: the judge failed what the humans passed.

Definitions and sources:

- Cohen's kappa: (p_o - p_e) / (1 - p_e); matches scikit-learn's
  ``cohen_kappa_score``. Undefined when p_e = 1 (both sides used one and the
  same class only).
- Balanced accuracy: mean recall over the classes present in the reference;
  matches scikit-learn's ``balanced_accuracy_score`` (a class the humans never
  used is left out of the mean).
- Balanced F1: as the Vertex AI judge-model evaluation reports it. The Vertex
  AI SDK (googleapis/python-aiplatform,
  ``vertexai/preview/evaluation/autorater_utils.py``, ``f1_score_balanced``)
  computes ``sklearn.metrics.f1_score(human, autorater, average="weighted")``:
  per-class F1 weighted by the number of human labels of that class. We
  compute the same; the unweighted mean (macro F1) is given beside it as
  ``macro_f1`` because the name suggests it and the two differ on skewed data.
- Wilson score interval: matches statsmodels
  ``proportion_confint(method="wilson")``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist


@dataclass(frozen=True, slots=True)
class Confusion:
    """A 2x2 confusion matrix of human (reference) against judge, PASS positive."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[bool, bool]]) -> Confusion:
        """Count ``(human_pass, judge_pass)`` pairs."""
        tp = fp = fn = tn = 0
        for human, judge in pairs:
            if human and judge:
                tp += 1
            elif human:
                fn += 1
            elif judge:
                fp += 1
            else:
                tn += 1
        return cls(tp=tp, fp=fp, fn=fn, tn=tn)

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def human_passes(self) -> int:
        return self.tp + self.fn

    @property
    def judge_passes(self) -> int:
        return self.tp + self.fp

    @property
    def agreement(self) -> float | None:
        """Share of items where judge and humans gave the same label."""
        if self.n == 0:
            return None
        return (self.tp + self.tn) / self.n

    @property
    def kappa(self) -> float | None:
        """Cohen's kappa, or ``None`` when undefined (no items, or p_e = 1)."""
        n = self.n
        # Integer form of (p_o - p_e) / (1 - p_e), multiplied through by n^2,
        # so "p_e = 1" is an exact test rather than a float comparison.
        chance = self.human_passes * self.judge_passes + (self.fp + self.tn) * (self.fn + self.tn)
        denominator = n * n - chance
        if n == 0 or denominator == 0:
            return None
        return (n * (self.tp + self.tn) - chance) / denominator

    @property
    def balanced_accuracy(self) -> float | None:
        recalls = [
            hits / total
            for hits, total in ((self.tp, self.tp + self.fn), (self.tn, self.tn + self.fp))
            if total > 0
        ]
        if not recalls:
            return None
        return sum(recalls) / len(recalls)

    def _class_f1(self) -> list[tuple[float, int]]:
        """(F1, human support) for each class either side used."""
        out: list[tuple[float, int]] = []
        # For FAIL as the positive class the roles of fp/fn swap and tn is its tp.
        for hits, false_pos, false_neg in (
            (self.tp, self.fp, self.fn),
            (self.tn, self.fn, self.fp),
        ):
            support = hits + false_neg
            if support + false_pos == 0:
                continue
            out.append((2 * hits / (2 * hits + false_pos + false_neg), support))
        return out

    @property
    def balanced_f1(self) -> float | None:
        """Support-weighted mean of per-class F1 (Vertex AI ``f1_score_balanced``)."""
        if self.n == 0:
            return None
        return sum(f1 * support for f1, support in self._class_f1()) / self.n

    @property
    def macro_f1(self) -> float | None:
        """Unweighted mean of per-class F1 over the classes either side used."""
        scores = self._class_f1()
        if not scores:
            return None
        return sum(f1 for f1, _ in scores) / len(scores)

    def degenerate_note(self) -> str | None:
        """Why kappa or balanced accuracy is undefined or narrowed, in one line."""
        if self.n == 0:
            return "no items with both a human reference label and a judge PASS/FAIL"
        if self.kappa is None:
            only = "PASS" if self.tp else "FAIL"
            return f"degenerate: humans and judge gave only {only}; kappa is undefined"
        if self.human_passes in (0, self.n):
            only = "PASS" if self.human_passes else "FAIL"
            return (
                f"degenerate: humans gave only {only}; balanced accuracy is the "
                f"judge's recall on {only} alone"
            )
        return None


def cohen_kappa(a: Iterable[bool], b: Iterable[bool]) -> float | None:
    """Cohen's kappa between two raters' PASS (True) / FAIL (False) labels."""
    return Confusion.from_pairs(zip(a, b, strict=True)).kappa


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float


def z_score(confidence: float) -> float:
    """Two-sided standard normal quantile, e.g. 1.96 for 0.95."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval | None:
    """Wilson score interval for a binomial proportion; ``None`` when n = 0."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n, got {successes} of {n}")
    z = z_score(confidence)
    if n == 0:
        return None
    p = successes / n
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denominator
    # Rounding can leave -1e-17 at 0 successes; a proportion bound is in [0, 1].
    return Interval(low=max(0.0, centre - half), high=min(1.0, centre + half))
