"""Ids compared in one normal form: trace and span ids as lower-case hex.

Labels whose trace ids were upper-cased paired 0 of 20 in ``calibrate``
(compared as text), while the labels topic lower-cased them. Every reader of
ids (labels, adjudications, verdict records) now keeps them in one form.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.calibrate.agreement import calibrate
from sidecar.calibrate.inputs import parse_labels, parse_verdicts
from sidecar.calibrate.review import ReviewTracker
from sidecar.cli import main
from sidecar.evaluate.verdict import make_verdict
from sidecar.model import CriterionResult, Outcome
from sidecar.wire import validate
from sidecar.wire._base import normal_id
from sidecar.wire.labels import HumanLabel, parse_label
from sidecar.wire.verdicts import VerdictRecord
from tests.builders import refund_rubric, transcript

IDS = [f"{i:032x}" for i in range(0xABC000, 0xABC000 + 20)]
OUTCOMES = ["PASS", "FAIL"] * 10


def _lines(rows: list[dict[str, object]]) -> list[str]:
    return [json.dumps(r) + "\n" for r in rows]


def _verdicts(ids: list[str]) -> list[dict[str, object]]:
    return [
        {
            "id": f"v{i}",
            "trace_id": t,
            "root_span_id": "B7AD6B7169203331",
            "rubric_id": "r",
            "rubric_version": "1",
            "judge_model": "j",
            "criteria": [{"name": "c", "outcome": o}],
        }
        for i, (t, o) in enumerate(zip(ids, OUTCOMES, strict=True))
    ]


def _labels(ids: list[str]) -> list[dict[str, object]]:
    return [
        {"trace_id": t, "criterion": "c", "rater": "ann", "label": o}
        for t, o in zip(ids, OUTCOMES, strict=True)
    ]


@pytest.mark.parametrize(
    ("label_ids", "verdict_ids"),
    [
        pytest.param([t.upper() for t in IDS], IDS, id="labels-upper"),
        pytest.param(IDS, [t.upper() for t in IDS], id="verdicts-upper"),
        pytest.param([t.title() for t in IDS], [t.upper() for t in IDS], id="mixed"),
    ],
)
def test_upper_cased_trace_ids_pair_in_calibrate(
    label_ids: list[str], verdict_ids: list[str]
) -> None:
    labels = parse_labels(_lines(_labels(label_ids)), "labels.jsonl")
    verdicts = parse_verdicts(_lines(_verdicts(verdict_ids)), "verdicts.jsonl")
    report = calibrate(labels, verdicts)
    [row] = report.rows
    assert row.confusion.n == 20
    assert row.confusion.agreement == 1.0


def test_the_calibrate_command_pairs_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(_lines(_labels([t.upper() for t in IDS]))), encoding="utf-8")
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text("".join(_lines(_verdicts(IDS))), encoding="utf-8")
    out = tmp_path / "out.json"
    assert (
        main(
            [
                "calibrate",
                "--labels",
                str(labels),
                "--verdicts",
                str(verdicts),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    document = json.loads(out.read_text(encoding="utf-8"))
    assert [row["n"] for row in document["criteria"]] == [20]


def test_one_normal_form_in_every_record() -> None:
    upper = IDS[0].upper()
    record = validate(VerdictRecord, {**_verdicts([upper] * 20)[0], "trace_ids": [upper]})
    assert (record.trace_id, record.root_span_id, record.trace_ids) == (
        IDS[0],
        "b7ad6b7169203331",
        (IDS[0],),
    )
    label = parse_label(
        json.dumps(
            {"trace_id": upper, "case_id": IDS[0], "criterion": "c", "label": "PASS"}
        ).encode(),
        "t",
    )
    assert label.case_id == IDS[0]
    assert (
        validate(HumanLabel, {"case_id": "Case-7", "criterion": "c", "label": "PASS"}).case_id
        == "Case-7"
    )
    assert normal_id(" " + upper + " ") == IDS[0]
    assert normal_id("0XABC") == "0XABC"  # not a hex id: kept as written


def test_review_pairs_a_label_whatever_the_case_of_its_trace_id() -> None:

    rubric = refund_rubric()
    tracker = ReviewTracker(rubrics=[rubric])
    verdict = make_verdict(
        transcript(trace_id=IDS[1].upper(), answer="ok"),
        rubric_id=rubric.id,
        rubric_version=rubric.version,
        judge_model=rubric.judge_model,
        checks=[],
        criteria=[CriterionResult("grounded", Outcome.PASS)],
        judged=True,
        sample_reason="ratio",
    )
    tracker.remember(verdict)
    label = parse_label(
        json.dumps({"trace_id": IDS[1], "criterion": "grounded", "label": "PASS"}).encode(), "t"
    )
    assert tracker.add_label(label).key is not None
