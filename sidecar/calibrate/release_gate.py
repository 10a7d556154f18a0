"""Release gate over the verdict records of an evaluation run.

The gate fails, for every reason that applies (all are reported, in this order):

1. a gating check has any FAIL: hard gates are never averaged with judge scores;
2. a gated criterion's Wilson lower bound on its pass rate is under its
   threshold (per criterion when given, else the global one), or it has no
   PASS/FAIL verdict at all, so nothing was shown;
3. the run's ERROR rate is above the maximum.

Pass rates count PASS and FAIL only: ERROR never enters a
denominator and SKIPPED does not count. The ERROR rate is over the gating
results, checks and criteria together: ERROR / (PASS + FAIL + ERROR). Advisory
(``gate: false``) results are reported and never change the decision.

Duplicate records (same idempotency key, from at-least-once delivery) are
counted once.

A criterion PASS in a verdict flagged ``injection_suspected`` (by the
screening or by the judge's own report) is not trusted until a person reviews
it: the gate holds it out of the pass rate (it counts neither as a PASS nor in
``n``) and reports it as ``held_for_review``, per criterion and in total.
Under the default ``review`` policy those PASSes stay PASS in the records;
under ``fail`` or ``error`` they were already turned into FAIL or ERROR.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.calibrate.inputs import dedupe
from sidecar.calibrate.stats import wilson_interval, z_score
from sidecar.model import Outcome
from sidecar.wire.verdicts import CheckRecord, CriterionRecord, VerdictRecord

DEFAULT_MIN_LOWER_BOUND = 0.8
DEFAULT_MAX_ERROR_RATE = 0.03
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class GatePolicy:
    min_lower_bound: float = DEFAULT_MIN_LOWER_BOUND
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    confidence: float = DEFAULT_CONFIDENCE
    # Criterion name -> minimum lower bound, overriding ``min_lower_bound``.
    criterion_min: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        z_score(self.confidence)  # raises ValueError when out of (0, 1)
        for name, value in (
            ("min lower bound", self.min_lower_bound),
            ("max error rate", self.max_error_rate),
            *((f"minimum for {k!r}", v) for k, v in self.criterion_min.items()),
        ):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")

    def threshold(self, criterion: str) -> float:
        return self.criterion_min.get(criterion, self.min_lower_bound)


@dataclass(frozen=True, slots=True)
class Tally:
    passes: int = 0
    fails: int = 0
    errors: int = 0
    skipped: int = 0
    held: int = 0  # injection-suspected PASSes, not counted until reviewed

    def add(self, outcome: Outcome, *, suspected: bool = False) -> Tally:
        p, f, e, s, h = self.passes, self.fails, self.errors, self.skipped, self.held
        match outcome:
            case Outcome.PASS if suspected:
                return Tally(p, f, e, s, h + 1)
            case Outcome.PASS:
                return Tally(p + 1, f, e, s, h)
            case Outcome.FAIL:
                return Tally(p, f + 1, e, s, h)
            case Outcome.ERROR:
                return Tally(p, f, e + 1, s, h)
            case _:
                return Tally(p, f, e, s + 1, h)

    @property
    def n(self) -> int:
        return self.passes + self.fails


@dataclass(frozen=True, slots=True)
class CriterionGate:
    rubric_id: str
    criterion: str
    gate: bool
    tally: Tally
    pass_rate: float | None
    lower_bound: float | None
    upper_bound: float | None
    threshold: float | None  # None for advisory criteria
    passed: bool
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rubric_id": self.rubric_id,
            "criterion": self.criterion,
            "gate": self.gate,
            "n": self.tally.n,
            "passes": self.tally.passes,
            "fails": self.tally.fails,
            "errors": self.tally.errors,
            "skipped": self.tally.skipped,
            "held_for_review": self.tally.held,
            "pass_rate": self.pass_rate,
            "lower_bound": self.lower_bound,
            "upper_bound": self.upper_bound,
            "threshold": self.threshold,
            "passed": self.passed,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class CheckGate:
    rubric_id: str
    check: str
    gate: bool
    tally: Tally
    passed: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "rubric_id": self.rubric_id,
            "check": self.check,
            "gate": self.gate,
            "failures": self.tally.fails,
            "passes": self.tally.passes,
            "errors": self.tally.errors,
            "skipped": self.tally.skipped,
            "passed": self.passed,
        }


@dataclass(frozen=True, slots=True)
class GateReport:
    criteria: tuple[CriterionGate, ...]
    checks: tuple[CheckGate, ...]
    cases: int
    duplicates: int
    gating_results: int  # PASS + FAIL + ERROR of gating checks and criteria
    gating_errors: int
    error_rate: float | None
    policy: GatePolicy
    reasons: tuple[str, ...]
    held_for_review: int = 0  # injection-suspected criterion PASSes left out

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reasons": list(self.reasons),
            "error_rate": self.error_rate,
            "errors": self.gating_errors,
            "results": self.gating_results,
            "max_error_rate": self.policy.max_error_rate,
            "min_lower_bound": self.policy.min_lower_bound,
            "criterion_min": dict(self.policy.criterion_min),
            "confidence": self.policy.confidence,
            "cases": self.cases,
            "duplicates": self.duplicates,
            "held_for_review": self.held_for_review,
            "criteria": [c.to_json() for c in self.criteria],
            "checks": [c.to_json() for c in self.checks],
        }


def _tallies(
    results: Iterable[tuple[str, CheckRecord | CriterionRecord, bool]],
) -> dict[tuple[str, str], tuple[Tally, bool]]:
    out: dict[tuple[str, str], tuple[Tally, bool]] = defaultdict(lambda: (Tally(), False))
    for rubric_id, row, suspected in results:
        tally, gate = out[(rubric_id, row.name)]
        # Gated if any record says so: a run that mixes rubric edits stays strict.
        out[(rubric_id, row.name)] = (tally.add(row.outcome, suspected=suspected), gate or row.gate)
    return dict(sorted(out.items()))


def _criterion(
    rubric_id: str, name: str, tally: Tally, gate: bool, policy: GatePolicy
) -> CriterionGate:
    interval = wilson_interval(tally.passes, tally.n, policy.confidence)
    pass_rate = tally.passes / tally.n if tally.n else None
    low = interval.low if interval else None
    high = interval.high if interval else None
    if not gate:
        return CriterionGate(rubric_id, name, gate, tally, pass_rate, low, high, None, True)
    threshold = policy.threshold(name)
    reason = None
    if low is None:
        reason = f"criterion {name!r}: no PASS/FAIL verdicts ({tally.errors} ERROR, {tally.skipped} SKIPPED)"
        if tally.held:
            reason += f"; {tally.held} injection-suspected PASS held for review"
    elif low < threshold:
        reason = (
            f"criterion {name!r}: pass rate {tally.passes}/{tally.n} = {pass_rate:.3f}, "
            f"lower bound {low:.3f} at {policy.confidence:.0%} < {threshold}"
        )
    return CriterionGate(
        rubric_id, name, gate, tally, pass_rate, low, high, threshold, reason is None, reason
    )


def evaluate_gate(
    verdicts: Sequence[VerdictRecord], policy: GatePolicy | None = None
) -> GateReport:
    """Decide the release gate for one evaluation run."""
    policy = policy or GatePolicy()
    unique, duplicates = dedupe(verdicts)
    checks = tuple(
        CheckGate(rubric_id, name, gate, tally, passed=not (gate and tally.fails))
        for (rubric_id, name), (tally, gate) in _tallies(
            (v.rubric_id, row, False) for v in unique for row in v.checks
        ).items()
    )
    criteria = tuple(
        _criterion(rubric_id, name, tally, gate, policy)
        for (rubric_id, name), (tally, gate) in _tallies(
            (v.rubric_id, row, v.injection_suspected is True) for v in unique for row in v.criteria
        ).items()
    )
    unknown = sorted(set(policy.criterion_min) - {c.criterion for c in criteria})
    if unknown:
        known = ", ".join(sorted({c.criterion for c in criteria})) or "none"
        raise ValueError(
            f"no criterion named {', '.join(map(repr, unknown))} in the run (it has: {known})"
        )
    gating = [c.tally for c in checks if c.gate] + [c.tally for c in criteria if c.gate]
    errors = sum(t.errors for t in gating)
    results = sum(t.n + t.errors for t in gating)
    error_rate = errors / results if results else None

    reasons = [
        f"check {c.check!r} ({c.rubric_id}): {c.tally.fails} FAIL" for c in checks if not c.passed
    ]
    reasons += [c.reason for c in criteria if c.reason]
    if error_rate is not None and error_rate > policy.max_error_rate:
        reasons.append(
            f"ERROR rate {errors}/{results} = {error_rate:.3f} > {policy.max_error_rate}"
        )
    return GateReport(
        criteria=criteria,
        checks=checks,
        cases=len(unique),
        duplicates=duplicates,
        gating_results=results,
        gating_errors=errors,
        error_rate=error_rate,
        policy=policy,
        reasons=tuple(reasons),
        held_for_review=sum(c.tally.held for c in criteria),
    )
