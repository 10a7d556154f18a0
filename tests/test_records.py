"""Every record format (sidecar.wire.records): bytes as written before, round trips, the label rule."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from sidecar.calibrate.review import review_record
from sidecar.errors import InputFileError, RecordError
from sidecar.evaluate.verdict import Verdict, make_verdict
from sidecar.model import CheckResult, CriterionResult, Outcome, Transcript
from sidecar.wire.records import (
    Adjudication,
    HumanLabel,
    PairRecord,
    ReviewRecord,
    TranscriptRecord,
    VerdictRecord,
    parse_label,
    parse_pairs,
    read_records,
    validate,
)
from tests.builders import tool_call, transcript

P, F, E = Outcome.PASS, Outcome.FAIL, Outcome.ERROR
TRACE = "ab" * 16

# Hostile text: control characters, quotes, a line separator, astral and non-ASCII characters.
TRANSCRIPT = transcript(
    tool_call("t", '{"a":1}', "res\n", call_id="c1", untrusted=True),
    trace_id=TRACE,
    root_span_id=None,
    agent_name="ägent\u2028",
    user_input='hi\x00\x1f"\\ é 💥',
    answer="ok\ud7ff",
    models=("m",),
    latency_ms=12.5,
)


def _verdict(transcript: Transcript = TRANSCRIPT, **extra: Any) -> Verdict:
    v = make_verdict(
        transcript,
        rubric_id="r",
        rubric_version="1",
        judge_model="j",
        checks=[CheckResult("c", Outcome.FAIL, False, "d\t")],
        criteria=[
            CriterionResult("k", Outcome.PASS, True, "ev", None),
            CriterionResult("k2", Outcome.ERROR, True, None, "missing"),
        ],
        judged=True,
        sample_reason="ratio",
        **extra,
    )
    return dataclasses.replace(v, sidecar_version="0.1.0")


FULL = _verdict(injection_suspected=True, review=True, judge_error="timeout", raw_output='{"x": 1}')
BARE = dataclasses.replace(
    make_verdict(
        transcript(trace_id="cd" * 16, root_span_id="s"),
        rubric_id="r",
        rubric_version="1",
        judge_model="j",
        checks=[],
        criteria=[],
        judged=False,
        sample_reason="not_sampled",
    ),
    sidecar_version="0.1.0",
)

# What Verdict.to_json and review_record wrote before the records had models (dict + json.dumps).
FULL_LINE = (
    '{"id":"43ff3b84add2dab8816589ac6e128104eba4a5c23508e573210be0189e4aa5d6",'
    '"trace_id":"abababababababababababababababab","root_span_id":null,"rubric_id":"r",'
    '"rubric_version":"1","judge_model":"j","agent":"ägent\u2028","agent_version":null,'
    '"outcome":"errored","judged":true,"sample_reason":"ratio","injection_suspected":true,'
    '"review":true,"checks":[{"name":"c","outcome":"FAIL","gate":false,"detail":"d\\t"}],'
    '"criteria":[{"name":"k","outcome":"PASS","gate":true,"evidence":"ev"},'
    '{"name":"k2","outcome":"ERROR","gate":true,"reason":"missing"}],"truncated":false,'
    '"sidecar_version":"0.1.0","judge_error":"timeout","raw_output":"{\\"x\\": 1}"}'
)
BARE_LINE = (
    '{"id":"ac44b5477b8bea3d6c43e9fe121d8685a362a164a3e543e62c04e5f823ec0302",'
    '"trace_id":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","root_span_id":"s","rubric_id":"r",'
    '"rubric_version":"1","judge_model":"j","agent":null,"agent_version":null,'
    '"outcome":"acceptable","judged":false,"sample_reason":"not_sampled",'
    '"injection_suspected":false,"review":false,"checks":[],"criteria":[],"truncated":false,'
    '"sidecar_version":"0.1.0"}'
)
REVIEW_LINE = (
    '{"trace_id":"abababababababababababababababab","reasons":["audit","errors"],"verdict":'
    + FULL_LINE
    + ',"transcript":{"agent":"ägent\u2028","agent_version":null,'
    '"user_input":"hi\\u0000\\u001f\\"\\\\ é 💥","tool_calls":[{"name":"t","call_id":"c1",'
    '"arguments":"{\\"a\\":1}","result":"res\\n","error":null,"untrusted":true}],'
    '"answer":"ok\ud7ff","models":["m"],"latency_ms":12.5}}'
)


# -- bytes as before -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "line"),
    [
        pytest.param(FULL, FULL_LINE, id="judged-with-extras"),
        pytest.param(BARE, BARE_LINE, id="bare"),
    ],
)
def test_verdict_record_bytes_are_unchanged(verdict: Verdict, line: str) -> None:
    assert verdict.to_json() == line
    assert verdict.to_record() == json.loads(line)


def test_review_record_bytes_are_unchanged() -> None:
    assert review_record(FULL, TRANSCRIPT, ("audit", "errors")) == REVIEW_LINE.encode("utf-8")


# -- round trips: emitted JSON -> model -> the same JSON, and model -> JSON -> model -----------


@pytest.mark.parametrize("line", [FULL_LINE, BARE_LINE], ids=["judged-with-extras", "bare"])
def test_emitted_verdict_parses_back_unchanged(line: str) -> None:
    ((_, record),) = read_records([line + "\n"], "v", VerdictRecord)
    assert record == VerdictRecord.of(FULL if line == FULL_LINE else BARE)
    assert record.to_json() == line


def test_emitted_review_parses_back_unchanged() -> None:
    record = validate(ReviewRecord, json.loads(REVIEW_LINE))
    assert record == ReviewRecord.of(FULL, TRANSCRIPT, ("audit", "errors"))
    assert record.to_json() == REVIEW_LINE
    assert record.transcript == TranscriptRecord.of(TRANSCRIPT)


@pytest.mark.parametrize(
    "record",
    [
        pytest.param(
            VerdictRecord(trace_id="t", rubric_id="r", rubric_version="1", judge_model="j"),
            id="hand-made-verdict",
        ),
        pytest.param(
            HumanLabel(case_id="t", criterion="c", label=P, rater="ann", judge_outcome=E),
            id="label",
        ),
        pytest.param(HumanLabel(case_id="t", criterion="c", label=F), id="label-without-rater"),
        pytest.param(Adjudication(case_id="t", criterion="c", label=F), id="adjudication"),
        pytest.param(PairRecord(id="1", prompt="p", candidate="", baseline="b"), id="pair"),
    ],
)
def test_model_json_model(
    record: VerdictRecord | HumanLabel | Adjudication | PairRecord,
) -> None:
    again = validate(type(record), json.loads(record.to_json()))
    assert again == record
    assert again.to_json() == record.to_json()


# -- the label rule (one for the labels topic and for calibration files) --------------------


@pytest.mark.parametrize(
    ("data", "want"),
    [
        pytest.param(
            {"trace_id": "AB", "criterion": "c", "rater": "ann", "label": "PASS"},
            ("AB", "c", "ann", P),
            id="topic-form",
        ),
        pytest.param(
            {"case_id": "a", "criterion": "c", "rater": "ann", "label": "FAIL"},
            ("a", "c", "ann", F),
            id="file-form",
        ),
        pytest.param(
            {"case_id": 7, "criterion": 3, "rater": 1, "label": "fail"},
            ("7", "3", "1", F),
            id="numbers-and-lower-case",
        ),
        pytest.param(
            {"trace_id": "a", "case_id": "a", "criterion": "c", "label": "Pass"},
            ("a", "c", None, P),
            id="both-ids-equal-no-rater",
        ),
        pytest.param(
            {"trace_id": "", "case_id": "a", "criterion": "c", "rater": None, "label": "PASS"},
            ("a", "c", None, P),
            id="empty-trace-id-falls-back",
        ),
    ],
)
def test_label_rule_accepts(data: dict[str, Any], want: tuple[object, ...]) -> None:
    label = parse_label(json.dumps(data).encode())
    assert (label.case_id, label.criterion, label.rater, label.label) == want


def test_label_echo_is_optional_and_forgiving() -> None:
    echoed = {
        "trace_id": "a",
        "criterion": "c",
        "label": "PASS",
        "rubric_id": "refund",
        "rubric_version": 2,
        "judge_model": "m",
        "judge_outcome": "ERROR",
        "note": "ignored",
    }
    label = parse_label(json.dumps(echoed).encode())
    assert (label.rubric_id, label.rubric_version, label.judge_model) == ("refund", "2", "m")
    assert label.judge_outcome is E
    for ignored in ("SKIPPED", "pass", 1):
        other = parse_label(json.dumps({**echoed, "judge_outcome": ignored}).encode())
        assert other.judge_outcome is None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        pytest.param(
            b"{bad",
            "labels: not valid JSON: Expecting property name enclosed in double quotes",
            id="not-json",
        ),
        pytest.param(b"\xff", "labels: not UTF-8 text (byte 0)", id="not-utf8"),
        pytest.param(b"[1]", "labels: expected a JSON object", id="not-object"),
        pytest.param(
            b'{"criterion": "c0", "label": "PASS"}',
            "labels: field 'case_id' (or 'trace_id') must be a non-empty string",
            id="no-trace",
        ),
        pytest.param(
            b'{"trace_id": true, "criterion": "c0", "label": "PASS"}',
            "labels: field 'case_id' (or 'trace_id') must be a non-empty string",
            id="bool-trace",
        ),
        pytest.param(
            b'{"trace_id": "a", "case_id": "b", "criterion": "c0", "label": "PASS"}',
            "labels: fields 'trace_id' 'a' and 'case_id' 'b' name different cases",
            id="ids-disagree",
        ),
        pytest.param(
            b'{"trace_id": "a", "label": "PASS"}',
            "labels: field 'criterion' must be a non-empty string",
            id="no-criterion",
        ),
        pytest.param(
            b'{"trace_id": "a", "criterion": "", "label": "PASS"}',
            "labels: field 'criterion' must be a non-empty string",
            id="empty-criterion",
        ),
        pytest.param(
            b'{"trace_id": "a", "criterion": "c0", "rater": "", "label": "PASS"}',
            "labels: field 'rater' must be a non-empty string",
            id="empty-rater",
        ),
        pytest.param(
            b'{"trace_id": "a", "criterion": "c0", "rater": {"x": 1}, "label": "PASS"}',
            "labels: field 'rater' must be a non-empty string",
            id="rater-not-text",
        ),
        pytest.param(
            b'{"trace_id": "a", "criterion": "c0", "label": "YES"}',
            "labels: field 'label' must be \"PASS\" or \"FAIL\", got 'YES'",
            id="bad-label",
        ),
        pytest.param(
            b'{"trace_id": "a", "criterion": "c0"}',
            'labels: field \'label\' must be "PASS" or "FAIL", got None',
            id="no-label",
        ),
    ],
)
def test_label_rule_rejects_with_a_message(payload: bytes, message: str) -> None:
    with pytest.raises(RecordError) as raised:
        parse_label(payload, "labels")
    assert str(raised.value) == message


def test_a_required_rater_is_asked_for_before_the_label() -> None:
    data = {"case_id": "a", "criterion": "c", "label": "MAYBE"}
    with pytest.raises(RecordError, match=r"^f:1: field 'rater' must be a non-empty string$"):
        list(read_records([json.dumps(data)], "f", HumanLabel, context={"require_rater": True}))
    assert validate(HumanLabel, {**data, "label": "PASS"}).rater is None


# -- reading --------------------------------------------------------------------------------


def test_read_records_skips_blank_lines_and_numbers_the_rest() -> None:
    lines = ["\n", '{"case_id": "a", "criterion": "c", "label": "PASS"}\n', "  \n"]
    ((number, record),) = read_records(lines, "adj", Adjudication)
    assert (number, record.case_id, record.label) == (2, "a", P)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        pytest.param(
            {"criteria": [{"name": "c", "outcome": "MAYBE"}]},
            "v:1: field 'trace_id' must be a non-empty string",
            id="required-fields-first",
        ),
        pytest.param(
            {
                "trace_id": "t",
                "rubric_id": "r",
                "rubric_version": "1",
                "judge_model": "j",
                "criteria": [{"name": "c", "outcome": "PASS"}, {"name": "d", "outcome": "MAYBE"}],
            },
            "v:1: criteria.1: outcome must be PASS, FAIL, ERROR or SKIPPED, got 'MAYBE'",
            id="nested-path",
        ),
        pytest.param(
            {
                "trace_id": "t",
                "rubric_id": "r",
                "rubric_version": "1",
                "judge_model": "j",
                "agent": 3,
            },
            "v:1: agent: Input should be a valid string",
            id="pydantic-message-for-other-fields",
        ),
    ],
)
def test_verdict_problems_name_line_path_and_field(record: dict[str, Any], message: str) -> None:
    with pytest.raises(RecordError) as raised:
        list(read_records([json.dumps(record)], "v", VerdictRecord))
    assert str(raised.value) == message


def test_pairs_parse_with_their_own_wording() -> None:
    lines = [
        '{"id": 1, "prompt": "p", "candidate": "", "baseline": "b", "extra": 0}\n',
        "\n",
        '{"id": "x", "prompt": "q", "candidate": "c", "baseline": "d"}\n',
    ]
    assert parse_pairs(lines, "pairs") == [
        PairRecord(id="1", prompt="p", candidate="", baseline="b"),
        PairRecord(id="x", prompt="q", candidate="c", baseline="d"),
    ]
    with pytest.raises(InputFileError, match=r"^pairs: no pairs$"):
        parse_pairs(["\n"], "pairs")
    with pytest.raises(RecordError, match=r'^pairs:1: "id" must be a non-empty string$'):
        parse_pairs(['{"id": 1.5, "prompt": "p", "candidate": "c", "baseline": "b"}'], "pairs")
    with pytest.raises(RecordError, match=r"^pairs:2: duplicate id '1'$"):
        parse_pairs(
            [
                '{"id": 1, "prompt": "p", "candidate": "c", "baseline": "b"}',
                '{"id": "1", "prompt": "p", "candidate": "c", "baseline": "b"}',
            ],
            "pairs",
        )
