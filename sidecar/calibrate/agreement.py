"""Judge against people: per-criterion agreement from human labels and verdict records.

Inputs (read by :mod:`sidecar.calibrate.inputs`):

- human labels ``{"case_id", "criterion", "rater", "label": "PASS"|"FAIL"}``;
- an optional adjudication file ``{"case_id", "criterion", "label"}`` that
  settles items the raters disagreed on;
- verdict records; a label's ``case_id`` is the record's ``trace_id``.

The human reference label of an item (one case, one criterion), in order:

1. the adjudicated label, when the adjudication file has one;
2. the raters' label, when they agree (or there is only one rater);
3. the strict majority label (e.g. 2 of 3);
4. none (a tie): the item stays out of the judge statistics and is counted
   as ``no_reference``.

Items of 2 and 3 whose raters disagree and that nobody adjudicated are listed
as unresolved disagreements.

Inter-rater agreement is Cohen's kappa between two raters over the items both
labelled. With more than two raters it is the mean of the pairwise kappas
(Light's kappa, Light 1971); pairs that share no item, or whose kappa is
undefined, are left out of the mean and said so in a note.

Rows are per (rubric id, rubric version, judge model, criterion), so two judge
models graded on the same labels are compared side by side. Judge ERRORs are
excluded from the statistics and counted beside them; SKIPPED likewise.

``--split`` puts each case in the calibration or the held-out part by the
SHA-256 of its case id, so the same case lands in the same part on every run
and on every machine.
"""

from __future__ import annotations

import enum
import hashlib
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from sidecar.calibrate.inputs import dedupe
from sidecar.calibrate.stats import Confusion
from sidecar.model import Outcome
from sidecar.wire.labels import HumanLabel
from sidecar.wire.verdicts import VerdictRecord

DEFAULT_KAPPA_THRESHOLD = 0.4
DEFAULT_HELD_OUT_SHARE = 0.5
# Below this many items a kappa is noise; the report says so (it still decides).
SMALL_SAMPLE = 30


# -- human reference labels --------------------------------------------------


class Resolution(enum.StrEnum):
    SINGLE = "single"  # one rater
    UNANIMOUS = "unanimous"
    ADJUDICATED = "adjudicated"
    MAJORITY = "majority"
    TIE = "tie"


@dataclass(frozen=True, slots=True)
class Item:
    """The human labels of one (case, criterion) and the reference derived from them."""

    case_id: str
    criterion: str
    by_rater: tuple[tuple[str, Outcome], ...]
    reference: Outcome | None
    resolution: Resolution

    @property
    def disagreement(self) -> bool:
        return len({label for _, label in self.by_rater}) > 1

    @property
    def unresolved(self) -> bool:
        return self.resolution in (Resolution.MAJORITY, Resolution.TIE)


def resolve(
    item_labels: Mapping[str, Outcome], adjudicated: Outcome | None
) -> tuple[Outcome | None, Resolution]:
    """The reference label of one item under the precedence in the module docstring."""
    counts = Counter(item_labels.values())
    match adjudicated, len(counts):
        case Outcome(), _:
            return adjudicated, Resolution.ADJUDICATED
        case None, 1:
            only = next(iter(counts))
            return only, (Resolution.SINGLE if len(item_labels) == 1 else Resolution.UNANIMOUS)
        case None, _ if counts[Outcome.PASS] != counts[Outcome.FAIL]:
            return max(counts, key=lambda label: counts[label]), Resolution.MAJORITY
        case _:
            return None, Resolution.TIE


def build_items(
    labels: Iterable[HumanLabel], adjudications: Mapping[tuple[str, str], Outcome] | None = None
) -> list[Item]:
    """One item per (case, criterion) that has labels or an adjudication, in a stable order."""
    adjudications = adjudications or {}
    grouped: dict[tuple[str, str], dict[str, Outcome]] = defaultdict(dict)
    for label in labels:
        # Calibration files name the rater (inputs.parse_labels); an unnamed one counts as one rater.
        grouped[(label.case_id, label.criterion)][label.rater or ""] = label.label
    for key in adjudications:
        grouped.setdefault(key, {})
    items: list[Item] = []
    for (case_id, criterion), by_rater in sorted(grouped.items()):
        reference, resolution = resolve(by_rater, adjudications.get((case_id, criterion)))
        items.append(
            Item(
                case_id=case_id,
                criterion=criterion,
                by_rater=tuple(sorted(by_rater.items())),
                reference=reference,
                resolution=resolution,
            )
        )
    return items


@dataclass(frozen=True, slots=True)
class InterRater:
    """Agreement among the human raters of one criterion."""

    kappa: float | None
    raters: int
    items: int  # items with two or more raters
    pairs: int  # rater pairs whose kappa entered the mean
    note: str | None = None


def inter_rater(items: Sequence[Item]) -> InterRater:
    """Cohen's kappa between two raters; the mean over rater pairs (Light's kappa) for more."""
    raters = sorted({rater for item in items for rater, _ in item.by_rater})
    multi = sum(1 for item in items if len(item.by_rater) > 1)
    if len(raters) < 2:
        return InterRater(
            None, len(raters), multi, 0, "fewer than two raters: no inter-rater agreement"
        )
    labels_of = [dict(item.by_rater) for item in items]
    kappas: list[float] = []
    no_overlap = degenerate = 0
    for a, b in itertools.combinations(raters, 2):
        pairs = [
            (labels[a] == Outcome.PASS, labels[b] == Outcome.PASS)
            for labels in labels_of
            if a in labels and b in labels
        ]
        if not pairs:
            no_overlap += 1
            continue
        kappa = Confusion.from_pairs(pairs).kappa
        if kappa is None:
            degenerate += 1
        else:
            kappas.append(kappa)
    notes = []
    if no_overlap:
        notes.append(f"{no_overlap} rater pair(s) share no item")
    if degenerate:
        notes.append(f"{degenerate} rater pair(s) used one class only (kappa undefined)")
    if not kappas:
        notes.insert(0, "degenerate: no rater pair has a defined kappa")
    mean = sum(kappas) / len(kappas) if kappas else None
    return InterRater(mean, len(raters), multi, len(kappas), "; ".join(notes) or None)


# -- the split ---------------------------------------------------------------


class Part(enum.StrEnum):
    ALL = "all"
    CALIBRATION = "calibration"
    HELD_OUT = "held_out"


def split_part(case_id: str, held_out_share: float = DEFAULT_HELD_OUT_SHARE) -> Part:
    """Calibration or held-out, from the first 64 bits of sha256(case id)."""
    digest = hashlib.sha256(case_id.encode("utf-8")).digest()
    position = int.from_bytes(digest[:8], "big") / 2.0**64
    return Part.HELD_OUT if position < held_out_share else Part.CALIBRATION


# -- the report --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Disagreement:
    case_id: str
    labels: tuple[tuple[str, Outcome], ...]
    resolution: Resolution

    def to_json(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "labels": {rater: label.value for rater, label in self.labels},
            "resolution": self.resolution.value,
        }


@dataclass(frozen=True, slots=True)
class CriterionReport:
    """Judge against the human reference for one criterion, judge model and part."""

    criterion: str
    rubric_id: str
    rubric_version: str
    judge_model: str
    part: Part
    items: int  # labelled items of this criterion in this part
    confusion: Confusion
    errors: int  # judge ERROR on a labelled item: out of the statistics
    skipped: int
    missing_verdict: int
    no_reference: int
    inter_rater: InterRater
    unresolved: tuple[Disagreement, ...]
    fit_to_gate: bool
    notes: tuple[str, ...] = ()

    @property
    def kappa(self) -> float | None:
        return self.confusion.kappa

    def to_json(self) -> dict[str, Any]:
        c = self.confusion
        return {
            "criterion": self.criterion,
            "rubric_id": self.rubric_id,
            "rubric_version": self.rubric_version,
            "judge_model": self.judge_model,
            "part": self.part.value,
            "items": self.items,
            "n": c.n,
            "kappa": c.kappa,
            "agreement": c.agreement,
            "balanced_accuracy": c.balanced_accuracy,
            "balanced_f1": c.balanced_f1,
            "macro_f1": c.macro_f1,
            "tp": c.tp,
            "fp": c.fp,
            "fn": c.fn,
            "tn": c.tn,
            "false_pass": c.fp,
            "false_fail": c.fn,
            "errors": self.errors,
            "skipped": self.skipped,
            "missing_verdict": self.missing_verdict,
            "no_reference": self.no_reference,
            "fit_to_gate": self.fit_to_gate,
            "inter_rater_kappa": self.inter_rater.kappa,
            "inter_rater_items": self.inter_rater.items,
            "inter_rater_pairs": self.inter_rater.pairs,
            "raters": self.inter_rater.raters,
            "inter_rater_note": self.inter_rater.note,
            "unresolved_disagreements": [d.to_json() for d in self.unresolved],
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    rows: tuple[CriterionReport, ...]
    kappa_threshold: float
    split: bool
    held_out_share: float | None
    warnings: tuple[str, ...] = ()
    duplicates: int = 0

    @property
    def parts(self) -> tuple[Part, ...]:
        return (Part.CALIBRATION, Part.HELD_OUT) if self.split else (Part.ALL,)

    @property
    def decisive_part(self) -> Part:
        """The part whose figures decide fitness and go into the rubric file."""
        return Part.HELD_OUT if self.split else Part.ALL

    def decisive_rows(self) -> list[CriterionReport]:
        return [row for row in self.rows if row.part == self.decisive_part]

    def to_json(self) -> dict[str, Any]:
        return {
            "kappa_threshold": self.kappa_threshold,
            "split": self.split,
            "held_out_share": self.held_out_share,
            "decisive_part": self.decisive_part.value,
            "duplicates": self.duplicates,
            "warnings": list(self.warnings),
            "criteria": [row.to_json() for row in self.rows],
        }


def fit_to_gate(kappa: float | None, threshold: float = DEFAULT_KAPPA_THRESHOLD) -> bool:
    """A criterion may gate only when its judge-human kappa is defined and at least the threshold."""
    return kappa is not None and kappa >= threshold


def _row(
    criterion: str,
    group: tuple[str, str, str],
    part: Part,
    items: Sequence[Item],
    judged: Mapping[str, Outcome],
    kappa_threshold: float,
) -> CriterionReport:
    pairs: list[tuple[bool, bool]] = []
    errors = skipped = missing = no_reference = 0
    for item in items:
        outcome = judged.get(item.case_id)
        match outcome:
            case None:
                missing += 1
            case Outcome.ERROR:
                errors += 1
            case Outcome.SKIPPED:
                skipped += 1
            case _ if item.reference is None:
                no_reference += 1
            case _:
                pairs.append((item.reference == Outcome.PASS, outcome == Outcome.PASS))
    confusion = Confusion.from_pairs(pairs)
    notes: list[str] = []
    degenerate = confusion.degenerate_note()
    if degenerate:
        notes.append(degenerate)
    if confusion.n == 1:
        notes.append("a single item: agreement figures are not meaningful")
    elif 0 < confusion.n < SMALL_SAMPLE:
        notes.append(f"only {confusion.n} items: kappa is unstable below {SMALL_SAMPLE}")
    kappa = confusion.kappa
    fit = fit_to_gate(kappa, kappa_threshold)
    if kappa is None:
        notes.append("not fit to gate: kappa is undefined")
    elif not fit:
        notes.append(f"not fit to gate: kappa {kappa:.3f} < {kappa_threshold}")
    if errors:
        notes.append(f"{errors} judge ERROR(s) excluded from the statistics")
    rubric_id, rubric_version, judge_model = group
    return CriterionReport(
        criterion=criterion,
        rubric_id=rubric_id,
        rubric_version=rubric_version,
        judge_model=judge_model,
        part=part,
        items=len(items),
        confusion=confusion,
        errors=errors,
        skipped=skipped,
        missing_verdict=missing,
        no_reference=no_reference,
        inter_rater=inter_rater(items),
        unresolved=tuple(
            Disagreement(item.case_id, item.by_rater, item.resolution)
            for item in items
            if item.unresolved
        ),
        fit_to_gate=fit,
        notes=tuple(notes),
    )


def unmatched_labels_warning(items: Iterable[Item], traces: AbstractSet[str]) -> str | None:
    """The warning when labelled cases match no verdict's trace (None when all match)."""
    cases = {item.case_id for item in items}
    unmatched = sorted(cases - traces)
    if not unmatched:
        return None
    return (
        f"{len(unmatched)} of {len(cases)} labelled case(s) match no verdict record "
        f"(first: {unmatched[0]!r}); a label's case_id is the trace_id of a verdict: check "
        "that labels and verdicts come from the same traces"
    )


def calibrate(
    labels: Iterable[HumanLabel],
    verdicts: Sequence[VerdictRecord],
    adjudications: Mapping[tuple[str, str], Outcome] | None = None,
    *,
    kappa_threshold: float = DEFAULT_KAPPA_THRESHOLD,
    split: bool = False,
    held_out_share: float = DEFAULT_HELD_OUT_SHARE,
) -> CalibrationReport:
    """Compare judge verdicts with the human reference, per criterion and judge model."""
    if not -1.0 <= kappa_threshold <= 1.0:
        raise ValueError(f"kappa threshold must be between -1 and 1, got {kappa_threshold}")
    if split and not 0.0 < held_out_share < 1.0:
        raise ValueError(f"held-out share must be between 0 and 1, got {held_out_share}")
    items = build_items(labels, adjudications)
    unique, duplicates = dedupe(verdicts)

    # (rubric, version, judge) -> criterion -> trace id -> outcome
    judged: dict[tuple[str, str, str], dict[str, dict[str, Outcome]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for verdict in unique:
        group = (verdict.rubric_id, verdict.rubric_version, verdict.judge_model)
        for result in verdict.criteria:
            judged[group][result.name].setdefault(verdict.trace_id, result.outcome)

    parts: tuple[Part, ...] = (Part.CALIBRATION, Part.HELD_OUT) if split else (Part.ALL,)
    by_part: dict[tuple[str, Part], list[Item]] = defaultdict(list)
    for item in items:
        part = split_part(item.case_id, held_out_share) if split else Part.ALL
        by_part[(item.criterion, part)].append(item)

    labelled = sorted({item.criterion for item in items})
    rows: list[CriterionReport] = []
    warnings: list[str] = []
    for criterion in labelled:
        groups = sorted(group for group, criteria in judged.items() if criterion in criteria)
        if not groups:
            warnings.append(f"criterion {criterion!r} has human labels but no judge verdicts")
            continue
        for group in groups:
            for part in parts:
                rows.append(
                    _row(
                        criterion,
                        group,
                        part,
                        by_part.get((criterion, part), []),
                        judged[group][criterion],
                        kappa_threshold,
                    )
                )
    judged_only = sorted(
        {name for criteria in judged.values() for name in criteria} - set(labelled)
    )
    if judged_only:
        warnings.append("criteria judged but never labelled: " + ", ".join(judged_only))
    if not items:
        warnings.append("no human labels")
    if unmatched := unmatched_labels_warning(items, {verdict.trace_id for verdict in unique}):
        warnings.append(unmatched)
    if split:
        for criterion in labelled:
            if not by_part.get((criterion, Part.HELD_OUT)):
                warnings.append(f"criterion {criterion!r}: the held-out part is empty")
    else:
        warnings.append(
            "tuning and reporting use the same cases: every labelled case is in one part, so "
            "these figures are optimistic if the rubric was tuned on them (use --split)"
        )
    if duplicates:
        warnings.append(f"{duplicates} duplicate verdict record(s) ignored (same idempotency key)")
    return CalibrationReport(
        rows=tuple(rows),
        kappa_threshold=kappa_threshold,
        split=split,
        held_out_share=held_out_share if split else None,
        warnings=tuple(warnings),
        duplicates=duplicates,
    )
