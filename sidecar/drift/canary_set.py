"""Canary sets: labelled traces re-judged now, to see whether the judge still agrees with people.

A canary set is a fixed list of traces with human labels (the ``sidecar
calibrate`` label format, ``case_id`` = trace id). Re-judging it after a
judge model or rubric change (``sidecar canary``, in CI) or on a schedule
(the service) shows judge drift without waiting for new labels.

Judging (:func:`canary_cases`, :func:`judge_canary`): every given trace is a
case of the given rubric, whatever its ``applies_to`` and its sampling (the
set was chosen for the rubric); checks run and the case is screened as in
production; the judge is the production :class:`~sidecar.judge.Judge` path
(concurrency, rate limits, retries, breaker, injection policy) with the
verdict cache bypassed, so every case is asked afresh. Verdicts carry
``sample_reason: canary``.

Statistics (:func:`canary_report`), per criterion of the rubric:

- ``n``, ``agreement``, ``kappa``: judge PASS/FAIL against the human
  reference label (the rule of :mod:`sidecar.calibrate.agreement`: one rater,
  unanimous, or strict majority; ties are left out), from
  :class:`~sidecar.calibrate.stats.Confusion`; kappa is ``None`` with a note
  when undefined;
- ``errors``: judge ERROR verdicts over all canary cases (labelled or not);
- ``flips``: cases whose PASS/FAIL differs from the previous run's on the
  same trace (``None`` when there is no previous run); ``compared`` is how
  many cases had PASS/FAIL in both runs, the denominator of the flip rate.

The run fails (:attr:`CanaryReport.passed` False) when a gated criterion is
not fit to gate (kappa undefined or below its threshold:
:func:`~sidecar.calibrate.agreement.fit_to_gate`), or when the error rate,
ERROR / (PASS + FAIL + ERROR) over every criterion verdict of the run, is
above the maximum. The threshold is the rubric's recorded
``calibration.kappa_threshold`` when it has one, else 0.4.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.calibrate.agreement import (
    DEFAULT_KAPPA_THRESHOLD,
    build_items,
    fit_to_gate,
    unmatched_labels_warning,
)
from sidecar.calibrate.release_gate import DEFAULT_MAX_ERROR_RATE
from sidecar.calibrate.stats import Confusion
from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.pipeline import Case, judge_case, mark_untrusted
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import SampleDecision
from sidecar.evaluate.transcript import build_transcript
from sidecar.evaluate.verdict import Verdict
from sidecar.judge import Judge, screen_case
from sidecar.model import Outcome, Trace
from sidecar.wire.labels import HumanLabel
from sidecar.wire.verdicts import VerdictRecord

CANARY = "canary"  # the verdicts' sample_reason

# (trace id, criterion) -> the judge's outcome in an earlier run.
Previous = Mapping[tuple[str, str], Outcome]


def kappa_threshold(rubric: Rubric) -> float:
    """The rubric's recorded calibration threshold, else the default (0.4)."""
    value = (rubric.calibration or {}).get("kappa_threshold")
    if isinstance(value, int | float) and not isinstance(value, bool) and -1 <= value <= 1:
        return float(value)
    return DEFAULT_KAPPA_THRESHOLD


def canary_cases(rubric: Rubric, traces: Iterable[Trace]) -> list[Case]:
    """One judged case of ``rubric`` per trace: no routing, no sampling."""
    cases: list[Case] = []
    for trace in traces:
        transcript = mark_untrusted(build_transcript(trace), rubric.untrusted_tools)
        cases.append(
            Case(
                rubric,
                transcript,
                run_checks(rubric, transcript),
                SampleDecision(judge=True, reason=CANARY),
                screen_case(rubric, transcript),
            )
        )
    return cases


async def judge_canary(cases: Sequence[Case], judge: Judge) -> list[Verdict]:
    """Every case judged afresh (cache bypassed), concurrently within the judge's limits."""
    return list(await asyncio.gather(*(judge_case(c, judge, use_cache=False) for c in cases)))


def previous_outcomes(
    records: Iterable[VerdictRecord], rubric_id: str
) -> dict[tuple[str, str], Outcome]:
    """An earlier run's criterion outcomes of ``rubric_id``, from its verdict records."""
    outcomes: dict[tuple[str, str], Outcome] = {}
    for record in records:
        if record.rubric_id != rubric_id:
            continue
        for result in record.criteria:
            outcomes.setdefault((record.trace_id, result.name), result.outcome)
    return outcomes


@dataclass(frozen=True, slots=True)
class CriterionCanary:
    """One criterion's canary figures."""

    criterion: str
    gate: bool
    confusion: Confusion
    judged: int  # PASS + FAIL + ERROR over every canary case
    errors: int
    flips: int | None
    compared: int  # cases with PASS/FAIL in this run and the previous one
    threshold: float

    @property
    def n(self) -> int:
        return self.confusion.n

    @property
    def kappa(self) -> float | None:
        return self.confusion.kappa

    @property
    def agreement(self) -> float | None:
        return self.confusion.agreement

    @property
    def note(self) -> str | None:
        return self.confusion.degenerate_note() if self.kappa is None else None

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.judged if self.judged else None

    @property
    def flip_rate(self) -> float | None:
        return self.flips / self.compared if self.flips is not None and self.compared else None

    @property
    def fit(self) -> bool:
        return fit_to_gate(self.kappa, self.threshold)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "criterion": self.criterion,
            "n": self.n,
            "agreement": self.agreement,
            "kappa": self.kappa,
            "errors": self.errors,
            "flips": self.flips,
        }
        if self.note is not None:
            document["note"] = self.note
        return document


@dataclass(frozen=True, slots=True)
class CanaryReport:
    rubric: str
    rubric_version: str
    rubric_hash: str
    judge_model: str
    judge_model_versions: tuple[str, ...]  # every version that answered, sorted
    criteria: tuple[CriterionCanary, ...]
    cases: int
    max_error_rate: float
    warnings: tuple[str, ...] = ()

    @property
    def judge_model_version(self) -> str | None:
        return ", ".join(self.judge_model_versions) or None

    @property
    def errors(self) -> int:
        return sum(c.errors for c in self.criteria)

    @property
    def error_rate(self) -> float | None:
        judged = sum(c.judged for c in self.criteria)
        return self.errors / judged if judged else None

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the run fails; empty when it passes."""
        reasons: list[str] = []
        for c in self.criteria:
            if not c.gate or c.fit:
                continue
            if c.kappa is None:
                reasons.append(f"gated criterion {c.criterion!r}: kappa undefined ({c.note})")
            else:
                reasons.append(
                    f"gated criterion {c.criterion!r}: kappa {c.kappa:.3f} < {c.threshold}"
                )
        rate = self.error_rate
        if rate is not None and rate > self.max_error_rate:
            reasons.append(
                f"error rate {rate:.3f} ({self.errors} ERROR verdicts) > {self.max_error_rate}"
            )
        return tuple(reasons)

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_json(self) -> dict[str, Any]:
        return {
            "rubric": self.rubric,
            "rubric_version": self.rubric_version,
            "rubric_hash": self.rubric_hash,
            "judge_model": self.judge_model,
            "judge_model_version": self.judge_model_version,
            "criteria": [c.to_json() for c in self.criteria],
        }


def canary_labels(labels: Iterable[HumanLabel]) -> dict[str, dict[str, Outcome]]:
    """Each case's human reference label per criterion (ties and unlabelled left out)."""
    found: dict[str, dict[str, Outcome]] = {}
    for item in build_items(labels):
        if item.reference is not None:
            found.setdefault(item.case_id, {})[item.criterion] = item.reference
    return found


def canary_record(record: dict[str, Any], labels: Mapping[str, Outcome]) -> dict[str, Any]:
    """A verdict record of a canary case, marked ``canary`` with its human labels (for drift)."""
    return {**record, "canary": True, "labels": {k: v.value for k, v in sorted(labels.items())}}


def canary_report(
    rubric: Rubric,
    verdicts: Sequence[Verdict],
    labels: Iterable[HumanLabel],
    previous: Previous | None = None,
    *,
    threshold: float | None = None,
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
) -> CanaryReport:
    """The canary figures of one run (the rules are in the module docstring)."""
    if rubric.judge is None:
        raise ValueError(f"rubric {rubric.id!r} has no judge: block to run a canary on")
    if not 0.0 <= max_error_rate <= 1.0:
        raise ValueError(f"max error rate must be between 0 and 1, got {max_error_rate}")
    if threshold is not None and not -1.0 <= threshold <= 1.0:
        raise ValueError(f"kappa threshold must be between -1 and 1, got {threshold}")
    gate_at = kappa_threshold(rubric) if threshold is None else threshold
    items = build_items(labels)
    reference = {(i.case_id, i.criterion): i.reference for i in items}
    outcomes = {(v.trace_id, c.name): c.outcome for v in verdicts for c in v.criteria}

    rows: list[CriterionCanary] = []
    for spec in rubric.judge.criteria:
        mine = {t: o for (t, name), o in outcomes.items() if name == spec.name}
        decided = (Outcome.PASS, Outcome.FAIL)
        pairs = [
            (human is Outcome.PASS, mine[t] is Outcome.PASS)
            for (t, name), human in reference.items()
            if name == spec.name and human is not None and mine.get(t) in decided
        ]
        flips: int | None = None
        compared = 0
        if previous is not None:
            changed = [
                previous[(t, spec.name)] is not o
                for t, o in mine.items()
                if o in decided and previous.get((t, spec.name)) in decided
            ]
            flips, compared = sum(changed), len(changed)
        tally = Counter(mine.values())
        rows.append(
            CriterionCanary(
                criterion=spec.name,
                gate=spec.gate,
                confusion=Confusion.from_pairs(pairs),
                judged=tally[Outcome.PASS] + tally[Outcome.FAIL] + tally[Outcome.ERROR],
                errors=tally[Outcome.ERROR],
                flips=flips,
                compared=compared,
                threshold=gate_at,
            )
        )

    warnings: list[str] = []
    if unmatched := unmatched_labels_warning(items, {v.trace_id for v in verdicts}):
        warnings.append(unmatched)
    names = {c.name for c in rubric.judge.criteria}
    stray = sorted({i.criterion for i in items} - names)
    if stray:
        warnings.append("labels for criteria the rubric does not have: " + ", ".join(stray))
    versions = tuple(sorted({v.judge_model_version for v in verdicts if v.judge_model_version}))
    if len(versions) > 1:
        warnings.append("the judge model version changed during the run: " + ", ".join(versions))
    return CanaryReport(
        rubric=rubric.id,
        rubric_version=rubric.version,
        rubric_hash=rubric.content_hash,
        judge_model=rubric.judge_model,
        judge_model_versions=versions,
        criteria=tuple(rows),
        cases=len(verdicts),
        max_error_rate=max_error_rate,
        warnings=tuple(warnings),
    )
