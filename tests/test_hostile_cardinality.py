"""Metric label values from untrusted input: a closed set, bounded in count and length.

Human-label records may echo any rubric id, version, judge model and
criterion; those four become label values of the agreement metrics. Labels
for rubrics or criteria that are not loaded are refused and counted by
reason, and they never enter the rolling-agreement store (2,000 of them once
made 6,000 series and pushed the real rubric's window out). Agent names and
versions come from traces: their count was capped, their length was not
(40 traces with 200 KB names made ``/metrics`` 21 MB).
"""

from __future__ import annotations

import json

from prometheus_client import generate_latest

from sidecar.adapters.prometheus import MAX_LABEL_CHARS, Metrics, record_verdict
from sidecar.calibrate.review import ReviewTracker
from sidecar.calibrate.rolling import AgreementKey
from sidecar.engine.label_loop import LabelLoop
from sidecar.evaluate.verdict import make_verdict
from sidecar.model import CheckResult, CriterionResult, Outcome
from tests.builders import refund_rubric, transcript

REAL = refund_rubric()
CRITERION = REAL.judge.criteria[0].name if REAL.judge else ""


def _label(i: int, **fields: str) -> bytes:
    return json.dumps(
        {
            "trace_id": f"{i:032x}",
            "criterion": fields.get("criterion", CRITERION),
            "rater": "r",
            "label": "PASS",
            "rubric_id": fields.get("rubric_id", REAL.id),
            "rubric_version": fields.get("rubric_version", REAL.version),
            "judge_model": fields.get("judge_model", REAL.judge_model),
            "judge_outcome": "PASS",
        }
    ).encode()


def _metric(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_labels_for_rubrics_never_loaded_are_refused_and_counted() -> None:
    metrics = Metrics()
    tracker = ReviewTracker(max_keys=10, rubrics=[REAL])
    loop = LabelLoop(tracker, metrics, "labels")
    loop.apply(_label(0))  # a label for the loaded rubric opens its window
    before = len(generate_latest(metrics.registry))
    for i in range(1, 1001):
        loop.apply(_label(i, rubric_id=f"bogus-{i}"))
        loop.apply(_label(i, criterion=f"bogus_{i}"))
    loop.apply(_label(2000, rubric_version="999"))
    loop.apply(_label(2001, judge_model="another-model"))
    after = len(generate_latest(metrics.registry))

    unmatched = "sidecar_human_labels_unmatched_total"
    assert _metric(metrics, unmatched, reason="unknown_rubric") == 1002
    assert _metric(metrics, unmatched, reason="unknown_criterion") == 1000
    # The real rubric's window is still there: nothing bogus entered the store.
    key = AgreementKey(REAL.id, REAL.version, REAL.judge_model, CRITERION)
    assert tracker.agreement.keys() == [key]
    assert tracker.agreement.evicted == 0
    # /metrics grew by the two refusal series only, never per bogus value.
    assert after - before < 1000, (before, after)
    assert b"bogus" not in generate_latest(metrics.registry)


def test_agent_names_of_200_kb_give_a_small_scrape() -> None:
    metrics = Metrics()
    for i in range(40):
        name = f"{i:02d}" + "a" * 200_000
        verdict = make_verdict(
            transcript(trace_id=f"{i:032x}", agent_name=name, agent_version=name, answer="ok"),
            rubric_id=REAL.id,
            rubric_version=REAL.version,
            judge_model=REAL.judge_model,
            checks=[CheckResult("c", Outcome.PASS)],
            criteria=[CriterionResult(CRITERION, Outcome.PASS)],
            judged=True,
            sample_reason="ratio",
        )
        record_verdict(metrics, verdict)
    text = generate_latest(metrics.registry)
    assert len(text) < 1_000_000, len(text)
    # Each value cut to MAX_LABEL_CHARS with the cut marked; distinct names stay distinct.
    cut = "00" + "a" * (MAX_LABEL_CHARS - 3) + "…"
    assert f'agent="{cut}"'.encode() in text
    assert b"a" * (MAX_LABEL_CHARS + 1) not in text
