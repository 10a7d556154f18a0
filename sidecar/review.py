"""Human review in production: which cases go to people, and what their labels tell us.

Routing (a case may have several reasons; it is published once):

- ``injection_pass``: injection was suspected and the judge still said PASS
  somewhere (``review`` on the verdict) — a PASS that must not be trusted silently;
- ``errors``: at least ``error_share`` of the judged criteria are ERROR;
- ``audit``: a deterministic random share of judged cases (hash of the trace
  id with its own salt, so it is independent of the sampling decision).

Labels come back as ``{"trace_id", "criterion", "rater", "label": PASS|FAIL}``
(``case_id`` is accepted for ``trace_id``). Each is paired with the judge's
verdict on that case and criterion, remembered in a bounded LRU of reviewed
cases, or, when the label echoes them, from ``rubric_id``, ``rubric_version``,
``judge_model`` and ``judge_outcome``. Pairs feed a rolling window per
(rubric, version, judge model, criterion).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sidecar.calibrate.rolling import AgreementKey, RollingAgreement
from sidecar.model import Outcome, Transcript
from sidecar.verdict import Verdict


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


def transcript_record(t: Transcript) -> dict[str, Any]:
    return {
        "agent": t.agent_name,
        "agent_version": t.agent_version,
        "user_input": t.user_input,
        "tool_calls": [
            {
                "name": c.name,
                "call_id": c.call_id,
                "arguments": c.arguments,
                "result": c.result,
                "error": c.error,
                "untrusted": c.untrusted,
            }
            for c in t.tool_calls
        ],
        "answer": t.answer,
        "models": list(t.models),
        "latency_ms": t.latency_ms,
    }


def review_record(verdict: Verdict, transcript: Transcript, reasons: tuple[str, ...]) -> bytes:
    record = {
        "trace_id": verdict.trace_id,
        "reasons": list(reasons),
        "verdict": verdict.to_record(),
        "transcript": transcript_record(transcript),
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True, slots=True)
class Label:
    trace_id: str
    criterion: str
    rater: str
    label: Outcome
    rubric_id: str | None = None
    rubric_version: str | None = None
    judge_model: str | None = None
    judge_outcome: Outcome | None = None


class LabelError(ValueError):
    """A label record is malformed; the message says which field."""


def parse_label(payload: bytes) -> Label:
    try:
        data = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LabelError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise LabelError("expected a JSON object")
    trace_id = data.get("trace_id") or data.get("case_id")
    if not isinstance(trace_id, str) or not trace_id:
        raise LabelError("trace_id (or case_id) is missing")
    for field_name in ("criterion", "label"):
        if not isinstance(data.get(field_name), str):
            raise LabelError(f"{field_name} is missing")
    if data["label"] not in ("PASS", "FAIL"):
        raise LabelError(f"label must be PASS or FAIL, not {data['label']!r}")
    judge_outcome = data.get("judge_outcome")
    return Label(
        trace_id=trace_id.lower(),
        criterion=data["criterion"],
        rater=str(data.get("rater", "")),
        label=Outcome(data["label"]),
        rubric_id=_opt(data.get("rubric_id")),
        rubric_version=_opt(data.get("rubric_version")),
        judge_model=_opt(data.get("judge_model")),
        judge_outcome=Outcome(judge_outcome)
        if judge_outcome in ("PASS", "FAIL", "ERROR")
        else None,
    )


def _opt(value: object) -> str | None:
    return str(value) if value is not None else None


@dataclass(frozen=True, slots=True)
class LabelResult:
    key: AgreementKey | None  # None when the label could not be matched to a judged case
    counted: bool


class ReviewTracker:
    """Remembers reviewed cases' judge verdicts (bounded LRU) and keeps rolling agreement."""

    def __init__(self, *, memory: int = 50_000, window: int = 200, max_keys: int = 1_000) -> None:
        self._memory = memory
        self._cases: OrderedDict[str, Verdict] = OrderedDict()
        self.agreement = RollingAgreement(size=window, max_keys=max_keys)
        self.unmatched = 0

    def remember(self, verdict: Verdict) -> None:
        self._cases[verdict.trace_id] = verdict
        self._cases.move_to_end(verdict.trace_id)
        if len(self._cases) > self._memory:
            self._cases.popitem(last=False)

    def add_label(self, label: Label) -> LabelResult:
        verdict = self._cases.get(label.trace_id)
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
            return LabelResult(None, False)
        return LabelResult(key, self.agreement.add(key, judge, label.label))
