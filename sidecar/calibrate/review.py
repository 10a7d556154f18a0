"""Human review in production: which cases go to people, and what their labels tell us.

Routing (a case may have several reasons; it is published once):

- ``injection_pass``: injection was suspected and the judge still said PASS
  somewhere (``review`` on the verdict) — a PASS that must not be trusted silently;
- ``errors``: at least ``error_share`` of the judged criteria are ERROR;
- ``audit``: a deterministic random share of judged cases (hash of the trace
  id with its own salt, so it is independent of the sampling decision).

Labels come back as :class:`~sidecar.wire.labels.HumanLabel` records
(``{"trace_id", "criterion", "rater", "label": PASS|FAIL}``, read by
:func:`sidecar.wire.labels.parse_label` under the one label rule). Each is paired
with the judge's verdict on that case and criterion (trace ids compared in
their normal form, lower-case hex), remembered in a bounded LRU of reviewed cases, or, when the label
echoes them, from ``rubric_id``, ``rubric_version``, ``judge_model`` and
``judge_outcome``. Pairs feed a rolling window per (rubric, version, judge
model, criterion).

Those four become metric label values, so they are a closed set: with the
loaded rubrics given, a label echoing a rubric, version or judge model that is
not loaded is refused (``unknown_rubric``), and so is one naming a criterion
the rubric does not have (``unknown_criterion``). Refused labels are counted
by reason; they never open a window, so they cannot push the real rubrics'
windows out of the bounded store.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from sidecar.calibrate.rolling import AgreementKey, RollingAgreement
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.verdict import Verdict
from sidecar.model import Outcome, Transcript
from sidecar.wire._base import normal_id
from sidecar.wire.labels import HumanLabel
from sidecar.wire.redaction import DEFAULT_REDACTION, Redaction
from sidecar.wire.reviews import review_json


@dataclass(frozen=True, slots=True)
class ReviewPolicy:
    audit_share: float = 0.01
    error_share: float = 0.5


def review_reasons(verdict: Verdict, policy: ReviewPolicy) -> tuple[str, ...]:
    if not verdict.judged:
        return ()
    reasons: list[str] = []
    if verdict.review:
        reasons.append("injection_pass")
    judged = [c for c in verdict.criteria if c.outcome is not Outcome.SKIPPED]
    errors = sum(1 for c in judged if c.outcome is Outcome.ERROR)
    if judged and errors / len(judged) >= policy.error_share:
        reasons.append("errors")
    if _audit_fraction(verdict.trace_id) < policy.audit_share:
        reasons.append("audit")
    return tuple(reasons)


def _audit_fraction(trace_id: str) -> float:
    digest = hashlib.sha256(b"sidecar-audit\x00" + trace_id.encode("ascii", "replace")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def review_record(
    verdict: Verdict,
    transcript: Transcript,
    reasons: tuple[str, ...],
    redaction: Redaction = DEFAULT_REDACTION,
) -> bytes:
    """The message for the review topic (:mod:`sidecar.wire.reviews`), redacted."""
    return review_json(verdict, transcript, reasons, redaction).encode("utf-8")


@dataclass(frozen=True, slots=True)
class LabelResult:
    key: AgreementKey | None  # None when the label could not be matched to a judged case
    counted: bool
    # Why ``key`` is None: unknown_case, unknown_rubric or unknown_criterion.
    reason: str = ""


UNKNOWN_CASE = "unknown_case"
UNKNOWN_RUBRIC = "unknown_rubric"
UNKNOWN_CRITERION = "unknown_criterion"


class ReviewTracker:
    """Remembers reviewed cases' judge verdicts (bounded LRU) and keeps rolling agreement."""

    def __init__(
        self,
        *,
        memory: int = 50_000,
        window: int = 200,
        max_keys: int = 1_000,
        rubrics: Iterable[Rubric] | None = None,
    ) -> None:
        self._memory = memory
        self._cases: OrderedDict[str, Verdict] = OrderedDict()
        self.agreement = RollingAgreement(size=window, max_keys=max_keys)
        self.unmatched = 0
        # (rubric id, version, judge model) -> criterion names; None: every label is taken.
        self._known: dict[tuple[str, str, str], frozenset[str]] | None = (
            None
            if rubrics is None
            else {
                (r.id, r.version, r.judge_model): frozenset(
                    c.name for c in (r.judge.criteria if r.judge else ())
                )
                for r in rubrics
            }
        )

    def remember(self, verdict: Verdict) -> None:
        case = normal_id(verdict.trace_id)
        self._cases[case] = verdict
        self._cases.move_to_end(case)
        if len(self._cases) > self._memory:
            self._cases.popitem(last=False)

    def add_label(self, label: HumanLabel) -> LabelResult:
        verdict = self._cases.get(normal_id(label.case_id))
        key: AgreementKey | None = None
        judge: Outcome | None = None
        if verdict is not None:
            for c in verdict.criteria:
                if c.name == label.criterion:
                    judge = c.outcome
                    key = AgreementKey(
                        verdict.rubric_id, verdict.rubric_version, verdict.judge_model, c.name
                    )
        elif label.rubric_id and label.rubric_version and label.judge_model and label.judge_outcome:
            judge = label.judge_outcome
            key = AgreementKey(
                label.rubric_id, label.rubric_version, label.judge_model, label.criterion
            )
        if key is None or judge is None:
            self.unmatched += 1
            return LabelResult(None, False, UNKNOWN_CASE)
        if self._known is not None:
            criteria = self._known.get((key.rubric, key.rubric_version, key.judge_model))
            if criteria is None or key.criterion not in criteria:
                self.unmatched += 1
                return LabelResult(
                    None, False, UNKNOWN_RUBRIC if criteria is None else UNKNOWN_CRITERION
                )
        return LabelResult(key, self.agreement.add(key, judge, label.label))
