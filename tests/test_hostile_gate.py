"""An injection-suspected PASS is not a pass until reviewed: not in the gate, not in pass rates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sidecar import cli
from sidecar.adapters.prometheus import HELD, Metrics, record_verdict
from sidecar.calibrate.release_gate import evaluate_gate
from sidecar.evaluate.verdict import make_verdict
from sidecar.model import CriterionResult, Outcome, Transcript
from sidecar.wire.verdicts import CriterionRecord, VerdictRecord

P, F = Outcome.PASS, Outcome.FAIL


def records(passes: int, fails: int, suspected_passes: int) -> list[VerdictRecord]:
    rows = [(P, False)] * passes + [(F, False)] * fails + [(P, True)] * suspected_passes
    return [
        VerdictRecord(
            id=f"v{i}",
            trace_id=f"t{i}",
            rubric_id="refund",
            rubric_version="3",
            judge_model="j",
            injection_suspected=suspected,
            review=suspected,
            criteria=(CriterionRecord(name="amount", outcome=outcome, gate=True),),
        )
        for i, (outcome, suspected) in enumerate(rows)
    ]


def test_suspected_passes_are_held_out_of_the_pass_rate() -> None:
    report = evaluate_gate(records(75, 5, 20))
    [criterion] = report.criteria
    assert (criterion.tally.passes, criterion.tally.n, criterion.tally.held) == (75, 80, 20)
    assert criterion.pass_rate == 75 / 80
    assert report.held_for_review == 20
    document = report.to_json()
    assert document["held_for_review"] == 20
    assert document["criteria"][0]["held_for_review"] == 20


def test_a_run_of_only_suspected_passes_does_not_pass_the_gate() -> None:
    report = evaluate_gate(records(0, 0, 50))
    assert not report.passed
    assert report.reasons == (
        "criterion 'amount': no PASS/FAIL verdicts (0 ERROR, 0 SKIPPED);"
        " 50 injection-suspected PASS held for review",
    )


def test_suspected_passes_can_turn_a_passing_gate_into_a_failing_one() -> None:
    # 90 of 100 pass on their face; 20 of those PASSes are suspected: 70/80 remain.
    assert evaluate_gate(records(90, 10, 0)).passed
    assert not evaluate_gate(records(70, 10, 20)).passed


def test_the_command_reports_the_held_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "verdicts.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in records(95, 0, 3)), encoding="utf-8")
    assert cli.main(["gate", "--verdicts", str(path)]) == 0
    assert "3 injection-suspected PASS held for review" in capsys.readouterr().out
    assert cli.main(["gate", "--verdicts", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["held_for_review"] == 3


def test_the_pass_rate_metric_counts_a_suspected_pass_as_held() -> None:
    metrics = Metrics(CollectorRegistry())
    transcript = Transcript("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", answer="hi")
    for suspected in (True, False):
        record_verdict(
            metrics,
            make_verdict(
                transcript,
                rubric_id="refund",
                rubric_version="3",
                judge_model="j",
                checks=[],
                criteria=[
                    CriterionResult("amount", P, evidence="40"),
                    CriterionResult("polite", F),
                ],
                judged=True,
                sample_reason="ratio",
                injection_suspected=suspected,
                review=suspected,
            ),
        )

    def count(criterion: str, outcome: str) -> float:
        labels = {
            "rubric": "refund",
            "rubric_version": "3",
            "judge_model": "j",
            "judge_model_version": "none",  # these verdicts say no served version
            "criterion": criterion,
            "gate": "true",
            "outcome": outcome,
            "scope": "trace",
        }
        return metrics.registry.get_sample_value("sidecar_criterion_verdicts_total", labels) or 0

    assert (count("amount", "PASS"), count("amount", HELD)) == (1, 1)
    assert count("polite", "FAIL") == 2  # a FAIL stays a FAIL
