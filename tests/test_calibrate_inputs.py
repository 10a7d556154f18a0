"""Reading the inputs of calibrate and gate: label, adjudication and verdict lines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.calibrate.inputs import dedupe, parse_adjudications, parse_labels, parse_verdicts
from sidecar.errors import RecordError
from sidecar.model import Outcome
from sidecar.wire.verdicts import VerdictRecord

P, F = Outcome.PASS, Outcome.FAIL


def jsonl(rows: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(row) + "\n" for row in rows]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        pytest.param(["{not json\n"], "labels.jsonl:1: not valid JSON", id="bad-json"),
        pytest.param(["\n", "[1]\n"], "labels.jsonl:2: expected a JSON object", id="not-object"),
        pytest.param(
            ['{"case_id": "a", "criterion": "c", "rater": "x", "label": "MAYBE"}\n'],
            "labels.jsonl:1: field 'label' must be",
            id="bad-label",
        ),
        pytest.param(
            ['{"case_id": "a", "criterion": "c", "label": "PASS"}\n'],
            "labels.jsonl:1: field 'rater'",
            id="missing-rater",
        ),
        pytest.param(
            [
                '{"case_id": "a", "criterion": "c", "rater": "x", "label": "PASS"}\n',
                '{"case_id": "a", "criterion": "c", "rater": "x", "label": "FAIL"}\n',
            ],
            "labels.jsonl:2: rater 'x' labelled case 'a' criterion 'c' FAIL here and PASS on line 1",
            id="rater-contradicts-self",
        ),
    ],
)
def test_parse_labels_errors_name_the_line(lines: list[str], message: str) -> None:
    with pytest.raises(RecordError, match=message):
        parse_labels(lines, "labels.jsonl")


def test_parse_labels_normalises_and_drops_repeats() -> None:
    lines = jsonl(
        [
            {"case_id": "a", "criterion": "c", "rater": "x", "label": "pass"},
            {"case_id": "a", "criterion": "c", "rater": "x", "label": "PASS"},
            {"case_id": 7, "criterion": "c", "rater": "y", "label": "FAIL"},
        ]
    )
    got = parse_labels(lines, "f")
    assert [(h.case_id, h.rater, h.label) for h in got] == [("a", "x", P), ("7", "y", F)]


def test_parse_adjudications_conflict() -> None:
    lines = jsonl(
        [
            {"case_id": "a", "criterion": "c", "label": "PASS"},
            {"case_id": "a", "criterion": "c", "label": "FAIL"},
        ]
    )
    with pytest.raises(RecordError, match="adj:2: case 'a' criterion 'c' adjudicated FAIL"):
        parse_adjudications(lines, "adj")


@pytest.mark.parametrize(
    ("record", "message"),
    [
        pytest.param({"rubric_id": "r"}, "v:1: field 'trace_id'", id="no-trace-id"),
        pytest.param(
            {
                "trace_id": "t",
                "rubric_id": "r",
                "rubric_version": "1",
                "judge_model": "j",
                "criteria": {},
            },
            "v:1: field 'criteria' must be a list",
            id="criteria-not-list",
        ),
        pytest.param(
            {
                "trace_id": "t",
                "rubric_id": "r",
                "rubric_version": "1",
                "judge_model": "j",
                "criteria": [{"name": "c", "outcome": "MAYBE"}],
            },
            "v:1: criteria.0: outcome must be PASS, FAIL, ERROR or SKIPPED",
            id="bad-outcome",
        ),
    ],
)
def test_parse_verdicts_errors(record: dict[str, Any], message: str) -> None:
    with pytest.raises(RecordError, match=message):
        parse_verdicts(jsonl([record]), "v")


def test_parse_verdicts_reads_a_verdict_record() -> None:
    record = {
        "id": "abc",
        "trace_id": "t1",
        "root_span_id": "s",
        "rubric_id": "refund-support",
        "rubric_version": "3",
        "judge_model": "gemini-2.5-flash",
        "outcome": "unacceptable",
        "checks": [{"name": "allowed_tools", "outcome": "FAIL", "gate": True, "detail": "x"}],
        "criteria": [{"name": "correct_amount", "outcome": "PASS", "gate": False, "evidence": "e"}],
    }
    (row,) = parse_verdicts(jsonl([record]), "v")
    assert row.id == "abc"
    assert [(c.name, c.outcome, c.gate) for c in row.checks] == [("allowed_tools", F, True)]
    assert [(c.name, c.outcome, c.gate) for c in row.criteria] == [("correct_amount", P, False)]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        pytest.param(
            ['{"case_id": "a", "criterion": "c", "label": "MAYBE"}\n'],
            "labels.jsonl:1: field 'rater' must be a non-empty string",
            id="rater-is-checked-before-label",
        ),
        pytest.param(
            ['{"case_id": "a", "criterion": "", "rater": "x", "label": "PASS"}\n'],
            "labels.jsonl:1: field 'criterion' must be a non-empty string",
            id="empty-criterion",
        ),
        pytest.param(
            ['{"criterion": "c", "rater": "x", "label": "PASS"}\n'],
            "labels.jsonl:1: field 'case_id' (or 'trace_id') must be a non-empty string",
            id="no-case",
        ),
        pytest.param(
            [
                '{"case_id": "a", "trace_id": "b", "criterion": "c", "rater": "x", "label": "PASS"}\n'
            ],
            "labels.jsonl:1: fields 'trace_id' 'b' and 'case_id' 'a' name different cases",
            id="case-and-trace-differ",
        ),
    ],
)
def test_parse_labels_rule(lines: list[str], message: str) -> None:
    with pytest.raises(RecordError) as raised:
        parse_labels(lines, "labels.jsonl")
    assert str(raised.value) == message


def test_parse_labels_accepts_trace_id_for_case_id() -> None:
    lines = jsonl([{"trace_id": "t1", "criterion": "c", "rater": "x", "label": "FAIL"}])
    (got,) = parse_labels(lines, "f")
    assert (got.case_id, got.criterion, got.rater, got.label) == ("t1", "c", "x", F)


def test_parse_adjudications_ignore_raters_and_keep_one_label_per_item() -> None:
    lines = jsonl(
        [
            {"case_id": "a", "criterion": "c", "label": "fail", "rater": True},
            {"case_id": "a", "criterion": "c", "label": "FAIL"},
            {"trace_id": "b", "criterion": "c", "label": "PASS"},
        ]
    )
    assert parse_adjudications(lines, "adj") == {("a", "c"): F, ("b", "c"): P}


def test_parse_verdicts_reads_hand_made_records() -> None:
    record = {"trace_id": 7, "rubric_id": "r", "rubric_version": 3, "judge_model": "j"}
    (row,) = parse_verdicts(jsonl([record]), "v")
    assert (row.id, row.key, row.rubric_version, row.criteria) == (None, "7/r/3/j", "3", ())


@pytest.mark.parametrize(
    ("record", "message"),
    [
        pytest.param(
            {"trace_id": True, "rubric_id": "r", "rubric_version": "1", "judge_model": "j"},
            "v:1: field 'trace_id' must be a non-empty string",
            id="bool-trace-id",
        ),
        pytest.param(
            {
                "trace_id": "t",
                "rubric_id": "r",
                "rubric_version": "1",
                "judge_model": "j",
                "checks": [1],
            },
            "v:1: checks.0: expected an object",
            id="check-not-object",
        ),
        pytest.param(
            {
                "trace_id": "t",
                "rubric_id": "r",
                "rubric_version": "1",
                "judge_model": "j",
                "criteria": [{"name": "c", "outcome": "PASS", "gate": 1}],
            },
            "v:1: criteria.0: gate must be true or false",
            id="gate-not-bool",
        ),
        pytest.param(
            {
                "trace_id": "t",
                "rubric_id": "r",
                "rubric_version": "1",
                "judge_model": "j",
                "checks": [{"outcome": "PASS"}],
            },
            "v:1: checks.0: field 'name' must be a non-empty string",
            id="check-without-name",
        ),
        pytest.param(
            {
                "trace_id": "t",
                "rubric_id": "r",
                "rubric_version": "1",
                "judge_model": "j",
                "criteria": None,
            },
            "v:1: field 'criteria' must be a list",
            id="criteria-null",
        ),
        pytest.param(
            {
                "trace_id": "t",
                "rubric_id": "r",
                "rubric_version": "1",
                "judge_model": "j",
                "outcome": "fine",
            },
            "v:1: outcome: Input should be 'acceptable', 'unacceptable' or 'errored'",
            id="case-outcome-of-the-wrong-kind",
        ),
    ],
)
def test_parse_verdicts_messages(record: dict[str, Any], message: str) -> None:
    with pytest.raises(RecordError) as raised:
        parse_verdicts(jsonl([record]), "v")
    assert str(raised.value) == message


def test_dedupe_keeps_the_first_record_per_key() -> None:
    def record(key: str | None, trace_id: str) -> VerdictRecord:
        return VerdictRecord(
            id=key, trace_id=trace_id, rubric_id="r", rubric_version="1", judge_model="j"
        )

    first, again, other, unkeyed, unkeyed_again = (
        record("k", "t1"),
        record("k", "t2"),
        record("k2", "t1"),
        record(None, "t3"),
        record(None, "t3"),
    )
    kept, duplicates = dedupe([first, again, other, unkeyed, unkeyed_again])
    assert (kept, duplicates) == ([first, other, unkeyed], 2)
