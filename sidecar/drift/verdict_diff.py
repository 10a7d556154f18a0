"""Two verdict files for the same traces, compared per check and criterion (``sidecar diff``).

Typical use: the same traces replayed before and after a rubric or judge
change (or production verdicts from two periods of one trace set). The
question it answers is "did the judge change, or did the agent?": checks move
only with the agent (or the rubric's checks), criteria also with the judge,
and the provenance of both files says which of rubric version and hash, judge
model and its served version, and agent version differ.

Matching: a case is one (trace id, rubric id). Rubric version and judge model
are not part of the match, since they are what usually differs. Records
repeated under one idempotency key (at-least-once delivery) count once; a
second record of a case under another key (two runs concatenated into one
file) is left out and counted in a warning.

Per (rubric, check or criterion) row, over the *paired* results (the case is
in both files and both have this check or criterion):

- each side's PASS, FAIL, ERROR and SKIPPED, its pass rate PASS / (PASS +
  FAIL) and that rate's Wilson score interval (``calibrate.stats``); ERROR and
  SKIPPED never enter a pass rate;
- flips: PASS -> FAIL and FAIL -> PASS; every other change (to or from
  ERROR or SKIPPED) is counted apart, by transition;
- results only in one file: the case is missing from the other file, or the
  other file's verdict of the case has no result of that name (a criterion
  added or renamed between rubric versions).
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.calibrate.inputs import dedupe
from sidecar.calibrate.release_gate import DEFAULT_CONFIDENCE, Tally
from sidecar.calibrate.stats import Interval, wilson_interval, z_score
from sidecar.model import Outcome
from sidecar.wire.verdicts import VerdictRecord

# Provenance fields compared between the files, per rubric.
PROVENANCE_FIELDS = (
    "rubric_version",
    "rubric_hash",
    "judge_model",
    "judge_model_version",
    "agent_version",
)


class Kind(enum.StrEnum):
    CHECK = "check"
    CRITERION = "criterion"


@dataclass(frozen=True, slots=True)
class Side:
    """One file's results of one row, over the paired results."""

    tally: Tally
    confidence: float

    @property
    def pass_rate(self) -> float | None:
        return self.tally.passes / self.tally.n if self.tally.n else None

    @property
    def interval(self) -> Interval | None:
        return wilson_interval(self.tally.passes, self.tally.n, self.confidence)

    def to_json(self) -> dict[str, Any]:
        interval = self.interval
        return {
            "pass": self.tally.passes,
            "fail": self.tally.fails,
            "error": self.tally.errors,
            "skipped": self.tally.skipped,
            "pass_rate": self.pass_rate,
            "interval": None if interval is None else [interval.low, interval.high],
        }


@dataclass(frozen=True, slots=True)
class DiffRow:
    rubric: str
    kind: Kind
    name: str
    baseline: Side
    candidate: Side
    # (baseline outcome, candidate outcome) -> paired results, the unchanged ones included.
    transitions: Mapping[tuple[Outcome, Outcome], int]
    only_baseline: int
    only_candidate: int

    @property
    def paired(self) -> int:
        return sum(self.transitions.values())

    @property
    def pass_to_fail(self) -> int:
        return self.transitions.get((Outcome.PASS, Outcome.FAIL), 0)

    @property
    def fail_to_pass(self) -> int:
        return self.transitions.get((Outcome.FAIL, Outcome.PASS), 0)

    @property
    def unchanged(self) -> int:
        return sum(n for (a, b), n in self.transitions.items() if a is b)

    @property
    def other_changes(self) -> dict[str, int]:
        """Changes to or from ERROR or SKIPPED, as ``"PASS->ERROR": n``."""
        flips = {(Outcome.PASS, Outcome.FAIL), (Outcome.FAIL, Outcome.PASS)}
        return {
            f"{a.value}->{b.value}": n
            for (a, b), n in sorted(self.transitions.items())
            if a is not b and (a, b) not in flips
        }

    @property
    def pass_rate_change(self) -> float | None:
        before, after = self.baseline.pass_rate, self.candidate.pass_rate
        return None if before is None or after is None else after - before

    def to_json(self) -> dict[str, Any]:
        return {
            "rubric": self.rubric,
            "kind": self.kind.value,
            "name": self.name,
            "paired": self.paired,
            "baseline": self.baseline.to_json(),
            "candidate": self.candidate.to_json(),
            "pass_rate_change": self.pass_rate_change,
            "pass_to_fail": self.pass_to_fail,
            "fail_to_pass": self.fail_to_pass,
            "other_changes": self.other_changes,
            "unchanged": self.unchanged,
            "only_baseline": self.only_baseline,
            "only_candidate": self.only_candidate,
        }


@dataclass(frozen=True, slots=True)
class ProvenanceDiff:
    """The values of one provenance field in each file, for one rubric."""

    rubric: str
    field: str
    baseline: tuple[str, ...]
    candidate: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return self.baseline != self.candidate

    def to_json(self) -> dict[str, Any]:
        return {
            "rubric": self.rubric,
            "field": self.field,
            "baseline": list(self.baseline),
            "candidate": list(self.candidate),
            "changed": self.changed,
        }


@dataclass(frozen=True, slots=True)
class CaseCounts:
    baseline: int
    candidate: int
    paired: int

    @property
    def only_baseline(self) -> int:
        return self.baseline - self.paired

    @property
    def only_candidate(self) -> int:
        return self.candidate - self.paired

    def to_json(self) -> dict[str, int]:
        return {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "paired": self.paired,
            "only_baseline": self.only_baseline,
            "only_candidate": self.only_candidate,
        }


@dataclass(frozen=True, slots=True)
class DiffReport:
    rows: tuple[DiffRow, ...]
    cases: CaseCounts
    provenance: tuple[ProvenanceDiff, ...]
    confidence: float
    warnings: tuple[str, ...] = ()

    @property
    def changed_provenance(self) -> tuple[ProvenanceDiff, ...]:
        return tuple(p for p in self.provenance if p.changed)

    def to_json(self) -> dict[str, Any]:
        return {
            "confidence": self.confidence,
            "cases": self.cases.to_json(),
            "provenance": [p.to_json() for p in self.provenance],
            "rows": [row.to_json() for row in self.rows],
            "warnings": list(self.warnings),
        }


Case = tuple[str, str]  # (trace id, rubric id)
RowKey = tuple[str, Kind, str]  # (rubric id, kind, name)


def _cases(
    records: Sequence[VerdictRecord], label: str
) -> tuple[dict[Case, VerdictRecord], str | None]:
    unique, _ = dedupe(records)
    cases: dict[Case, VerdictRecord] = {}
    repeated = 0
    for record in unique:
        key = (record.trace_id, record.rubric_id)
        if key in cases:
            repeated += 1
            continue
        cases[key] = record
    warning = (
        f"{label}: {repeated} further verdict(s) of cases already in the file were left out "
        "(the first record of each (trace, rubric) is compared)"
        if repeated
        else None
    )
    return cases, warning


def _results(record: VerdictRecord) -> dict[RowKey, Outcome]:
    results: dict[RowKey, Outcome] = {}
    for check in record.checks:
        results.setdefault((record.rubric_id, Kind.CHECK, check.name), check.outcome)
    for criterion in record.criteria:
        results.setdefault((record.rubric_id, Kind.CRITERION, criterion.name), criterion.outcome)
    return results


def _tally(outcomes: Iterable[Outcome]) -> Tally:
    tally = Tally()
    for outcome in outcomes:
        tally = tally.add(outcome)
    return tally


def _provenance(
    baseline: Iterable[VerdictRecord], candidate: Iterable[VerdictRecord]
) -> list[ProvenanceDiff]:
    values: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    rubrics: set[str] = set()
    for side, records in (("baseline", baseline), ("candidate", candidate)):
        for record in records:
            rubrics.add(record.rubric_id)
            for name in PROVENANCE_FIELDS:
                value = getattr(record, name)
                # Unjudged verdicts have no served version; they say nothing about the judge.
                if value is not None:
                    values[(record.rubric_id, name, side)].add(str(value))
    return [
        ProvenanceDiff(
            rubric,
            name,
            tuple(sorted(values[(rubric, name, "baseline")])),
            tuple(sorted(values[(rubric, name, "candidate")])),
        )
        for rubric in sorted(rubrics)
        for name in PROVENANCE_FIELDS
    ]


def diff_verdicts(
    baseline: Sequence[VerdictRecord],
    candidate: Sequence[VerdictRecord],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
) -> DiffReport:
    """Compare two runs over the same traces (the rules are in the module docstring)."""
    z_score(confidence)  # ValueError when not in (0, 1)
    base_cases, base_warning = _cases(baseline, "baseline")
    cand_cases, cand_warning = _cases(candidate, "candidate")
    paired_cases = base_cases.keys() & cand_cases.keys()

    transitions: dict[RowKey, Counter[tuple[Outcome, Outcome]]] = defaultdict(Counter)
    only_base: Counter[RowKey] = Counter()
    only_cand: Counter[RowKey] = Counter()
    for case in base_cases.keys() | cand_cases.keys():
        before = _results(base_cases[case]) if case in base_cases else {}
        after = _results(cand_cases[case]) if case in cand_cases else {}
        for key in before.keys() | after.keys():
            if key in before and key in after:
                transitions[key][(before[key], after[key])] += 1
            elif key in before:
                only_base[key] += 1
            else:
                only_cand[key] += 1

    rows: list[DiffRow] = []
    for key in sorted(transitions.keys() | only_base.keys() | only_cand.keys()):
        pairs = transitions.get(key, Counter())
        rubric, kind, name = key
        rows.append(
            DiffRow(
                rubric=rubric,
                kind=kind,
                name=name,
                baseline=Side(
                    _tally(a for (a, _), n in pairs.items() for _ in range(n)), confidence
                ),
                candidate=Side(
                    _tally(b for (_, b), n in pairs.items() for _ in range(n)), confidence
                ),
                transitions=dict(pairs),
                only_baseline=only_base[key],
                only_candidate=only_cand[key],
            )
        )

    warnings = [w for w in (base_warning, cand_warning) if w]
    if not paired_cases:
        warnings.append("no case (trace, rubric) is in both files: nothing to compare pairwise")
    return DiffReport(
        rows=tuple(rows),
        cases=CaseCounts(len(base_cases), len(cand_cases), len(paired_cases)),
        provenance=tuple(_provenance(base_cases.values(), cand_cases.values())),
        confidence=confidence,
        warnings=tuple(warnings),
    )
