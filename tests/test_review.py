"""Review routing and the label -> agreement path (pure parts of the human review loop).

The label record and its rule are tested in test_records.py.
"""

from __future__ import annotations

import json

import pytest

from sidecar.calibrate.review import ReviewPolicy, ReviewTracker, review_reasons, review_record
from sidecar.calibrate.rolling import AgreementKey
from sidecar.evaluate.verdict import Verdict, make_verdict
from sidecar.model import CheckResult, CriterionResult, Outcome
from sidecar.wire.labels import parse_label
from tests.builders import TRACE_ID, transcript


def verdict(
    *outcomes: Outcome, judged: bool = True, review: bool = False, trace_id: str = TRACE_ID
) -> Verdict:
    criteria = [CriterionResult(f"c{i}", o) for i, o in enumerate(outcomes)]
    return make_verdict(
        transcript(trace_id=trace_id, answer="ok"),
        rubric_id="refund",
        rubric_version="2",
        judge_model="gemini-2.5-flash",
        checks=[CheckResult("allowed_tools", Outcome.PASS)],
        criteria=criteria,
        judged=judged,
        sample_reason="ratio",
        review=review,
    )


NO_AUDIT = ReviewPolicy(audit_share=0.0, error_share=0.5)


@pytest.mark.parametrize(
    ("case", "want"),
    [
        pytest.param(verdict(Outcome.PASS, Outcome.PASS), (), id="clean-pass"),
        pytest.param(verdict(Outcome.PASS, review=True), ("injection_pass",), id="injection-pass"),
        pytest.param(verdict(Outcome.ERROR, Outcome.PASS), ("errors",), id="half-errors"),
        pytest.param(verdict(Outcome.ERROR, Outcome.PASS, Outcome.PASS), (), id="few-errors"),
        pytest.param(verdict(Outcome.ERROR, review=True), ("injection_pass", "errors"), id="both"),
        pytest.param(verdict(Outcome.SKIPPED, judged=False), (), id="not-judged"),
    ],
)
def test_review_reasons(case: Verdict, want: tuple[str, ...]) -> None:
    assert review_reasons(case, NO_AUDIT) == want


def test_audit_share_is_deterministic_and_close_to_the_share() -> None:
    policy = ReviewPolicy(audit_share=0.1)
    ids = [f"{i:032x}" for i in range(4000)]
    audited = [
        t for t in ids if "audit" in review_reasons(verdict(Outcome.PASS, trace_id=t), policy)
    ]
    again = [t for t in ids if "audit" in review_reasons(verdict(Outcome.PASS, trace_id=t), policy)]
    assert audited == again
    assert 0.08 < len(audited) / len(ids) < 0.12


def test_review_record_carries_transcript_verdict_and_reasons() -> None:
    v = verdict(Outcome.PASS, review=True)
    record = json.loads(review_record(v, transcript(root_span_id=None, answer="ok"), ("audit",)))
    assert record["trace_id"] == TRACE_ID
    assert record["reasons"] == ["audit"]
    assert record["verdict"]["id"] == v.id
    assert record["transcript"]["answer"] == "ok"


def test_labels_pair_with_remembered_verdicts_and_move_agreement() -> None:
    tracker = ReviewTracker(window=4)
    key = AgreementKey("refund", "2", "gemini-2.5-flash", "c0")
    ids = [f"{i:032x}" for i in range(6)]
    for trace_id in ids:
        tracker.remember(verdict(Outcome.PASS, trace_id=trace_id))
    for trace_id in ids[:4]:
        label = parse_label(
            json.dumps({"case_id": trace_id, "criterion": "c0", "label": "PASS"}).encode()
        )
        assert tracker.add_label(label).key == key
    assert tracker.agreement.stats(key).agreement == 1.0
    for trace_id in ids[4:]:
        tracker.add_label(
            parse_label(
                json.dumps({"trace_id": trace_id, "criterion": "c0", "label": "FAIL"}).encode()
            )
        )
    # Window of 4: two agreeing pairs left the window's front, two disagreeing arrived.
    assert tracker.agreement.stats(key).agreement == 0.5


def test_unknown_case_uses_echoed_judge_fields_or_counts_unmatched() -> None:
    tracker = ReviewTracker()
    echoed = {
        "trace_id": "ab" * 16,
        "criterion": "c0",
        "label": "FAIL",
        "rubric_id": "refund",
        "rubric_version": "2",
        "judge_model": "m",
        "judge_outcome": "PASS",
    }
    assert tracker.add_label(parse_label(json.dumps(echoed).encode())).counted
    bare = {"trace_id": "cd" * 16, "criterion": "c0", "label": "FAIL"}
    result = tracker.add_label(parse_label(json.dumps(bare).encode()))
    assert result.key is None
    assert tracker.unmatched == 1


def test_labels_match_trace_ids_in_any_letter_case() -> None:
    tracker = ReviewTracker()
    tracker.remember(verdict(Outcome.PASS))
    label = {"trace_id": TRACE_ID.upper(), "criterion": "c0", "label": "PASS"}
    assert tracker.add_label(parse_label(json.dumps(label).encode())).counted
