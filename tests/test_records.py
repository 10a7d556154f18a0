"""Every record format (sidecar.wire): the bytes written, round trips, versions, the label rule."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.calibrate.review import review_record
from sidecar.errors import InputFileError, RecordError
from sidecar.evaluate.verdict import Verdict, make_verdict
from sidecar.model import CaseOutcome, CheckResult, CriterionResult, Outcome, Transcript
from sidecar.wire import read_records, validate
from sidecar.wire.labels import Adjudication, HumanLabel, parse_label
from sidecar.wire.pairs import PairRecord, parse_pairs
from sidecar.wire.redaction import DEFAULT_REDACTION, Content, Redaction
from sidecar.wire.reviews import ReviewRecord
from sidecar.wire.state_records import parse_state
from sidecar.wire.turn_records import parse_turn
from sidecar.wire.verdicts import VerdictRecord, utc_text, verdict_dict, verdict_json
from tests.builders import tool_call, transcript
from tests.fuzz_strategies import FUZZ

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


# 2026-05-01T12:00:00.123456789Z, one second later, and five seconds after that (Unix ns).
START, END, DECIDED = (
    1_777_636_800_123_456_789,
    1_777_636_801_123_456_789,
    1_777_636_806_000_000_999,
)
FULL = dataclasses.replace(
    _verdict(injection_suspected=True, review=True, judge_error="timeout", raw_output='{"x": 1}'),
    trace_start=START,
    trace_end=END,
    decided_at=DECIDED,
)
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

# What verdict_json and review_record write: a change here is a change of the format.
FULL_LINE = (
    '{"v":1,"id":"43ff3b84add2dab8816589ac6e128104eba4a5c23508e573210be0189e4aa5d6",'
    '"trace_id":"abababababababababababababababab","root_span_id":null,"rubric_id":"r",'
    '"rubric_version":"1","judge_model":"j","agent":"ägent\u2028","agent_version":null,'
    '"trace_start":"2026-05-01T12:00:00.123456Z","trace_end":"2026-05-01T12:00:01.123456Z",'
    '"decided_at":"2026-05-01T12:00:06.000000Z","outcome":"errored","judged":true,"sample_reason":"ratio","injection_suspected":true,'
    '"review":true,"checks":[{"name":"c","outcome":"FAIL","gate":false,"detail":"d\\t"}],'
    '"criteria":[{"name":"k","outcome":"PASS","gate":true,"evidence":"ev"},'
    '{"name":"k2","outcome":"ERROR","gate":true,"reason":"missing"}],"truncated":false,'
    '"sidecar_version":"0.1.0","judge_error":"timeout","raw_output":"{\\"x\\": 1}"}'
)
BARE_LINE = (
    '{"v":1,"id":"ac44b5477b8bea3d6c43e9fe121d8685a362a164a3e543e62c04e5f823ec0302",'
    '"trace_id":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","root_span_id":"s","rubric_id":"r",'
    '"rubric_version":"1","judge_model":"j","agent":null,"agent_version":null,'
    '"trace_start":null,"trace_end":null,"decided_at":null,"outcome":"acceptable","judged":false,"sample_reason":"not_sampled",'
    '"injection_suspected":false,"review":false,"checks":[],"criteria":[],"truncated":false,'
    '"sidecar_version":"0.1.0"}'
)
REVIEW_LINE = (
    '{"v":1,"trace_id":"abababababababababababababababab","reasons":["audit","errors"],"verdict":'
    + FULL_LINE
    + ',"transcript":{"agent":"ägent\u2028","agent_version":null,'
    '"user_input":"hi\\u0000\\u001f\\"\\\\ é 💥","tool_calls":[{"name":"t","call_id":"c1",'
    '"arguments":"{\\"a\\":1}","result":"res\\n","error":null,"untrusted":true}],'
    '"answer":"ok\ud7ff","models":["m"],"latency_ms":12.5}}'
)


# -- the bytes written -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "line"),
    [
        pytest.param(FULL, FULL_LINE, id="judged-with-extras"),
        pytest.param(BARE, BARE_LINE, id="bare"),
    ],
)
def test_verdict_record_bytes_are_unchanged(verdict: Verdict, line: str) -> None:
    assert verdict_json(verdict) == line
    assert verdict_dict(verdict) == json.loads(line)


def test_review_record_bytes_are_unchanged() -> None:
    assert review_record(FULL, TRANSCRIPT, ("audit", "errors")) == REVIEW_LINE.encode("utf-8")


# -- round trips: written JSON -> model -> the same values and the same JSON ----------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def assert_reads_back(
    record: VerdictRecord, v: Verdict, redaction: Redaction = DEFAULT_REDACTION
) -> None:
    """``record``, read from ``v``'s written record, holds ``v``'s values (content redacted)."""
    r = redaction.text
    for name in (
        "id",
        "trace_id",
        "root_span_id",
        "rubric_id",
        "rubric_version",
        "judge_model",
        "agent",
        "agent_version",
        "judged",
        "sample_reason",
        "injection_suspected",
        "review",
        "truncated",
        "flags",
        "sidecar_version",
        "rubric_hash",
        "judge_model_version",
        "judge_error",
        "backfill",
        "conversation_id",
        "turns",
        "trace_ids",
        "revision",
    ):
        assert getattr(record, name) == getattr(v, name), name
    assert record.v == 1
    assert record.outcome is v.outcome
    assert record.scope == (None if v.scope == "trace" else v.scope)
    assert (record.raw_output, record.redacted) == (r(v.raw_output), redaction.marker)
    assert [(c.name, c.outcome, c.gate, c.detail) for c in record.checks] == [
        (c.name, c.outcome, c.gate, r(c.detail)) for c in v.checks
    ]
    assert [(c.name, c.outcome, c.gate, c.evidence, c.reason) for c in record.criteria] == [
        (c.name, c.outcome, c.gate, r(c.evidence), c.reason) for c in v.criteria
    ]
    for name in ("trace_start", "trace_end", "decided_at"):
        nanos = getattr(v, name)
        want = None if nanos is None else _EPOCH + timedelta(microseconds=nanos // 1000)
        assert getattr(record, name) == want, name


@pytest.mark.parametrize("line", [FULL_LINE, BARE_LINE], ids=["judged-with-extras", "bare"])
def test_emitted_verdict_parses_back_unchanged(line: str) -> None:
    ((_, record),) = read_records([line + "\n"], "v", VerdictRecord)
    assert_reads_back(record, FULL if line == FULL_LINE else BARE)
    assert record.to_json() == line


def test_emitted_review_parses_back_unchanged() -> None:
    record = validate(ReviewRecord, json.loads(REVIEW_LINE))
    assert (record.v, record.trace_id, record.reasons) == (1, TRACE, ("audit", "errors"))
    assert_reads_back(record.verdict, FULL)
    assert record.to_json() == REVIEW_LINE
    seen = record.transcript
    assert (seen.agent, seen.user_input, seen.answer, seen.models, seen.latency_ms) == (
        TRANSCRIPT.agent_name,
        TRANSCRIPT.user_input,
        TRANSCRIPT.answer,
        TRANSCRIPT.models,
        TRANSCRIPT.latency_ms,
    )
    assert [(c.name, c.call_id, c.arguments, c.result, c.untrusted) for c in seen.tool_calls] == [
        (c.name, c.call_id, c.arguments, c.result, c.untrusted) for c in TRANSCRIPT.tool_calls
    ]


TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            "ok",
            "a.b@example.org paid",
            "card 4111 1111 1111 1111",
            'é\u2028"\\',
            "+44 20 7946 0958",
        ]
    ),
    st.text(max_size=40),
)
OPTIONAL = st.none() | TEXT
ID = st.text(min_size=1, max_size=12)
# Unix nanoseconds from 1970 to 2554 (OTLP's uint64).
NANOS = st.none() | st.integers(0, 2**64 - 1)
VERDICTS = st.builds(
    Verdict,
    id=ID,
    trace_id=ID,
    root_span_id=st.none() | ID,
    rubric_id=ID,
    rubric_version=ID,
    judge_model=ID,
    agent=OPTIONAL,
    agent_version=OPTIONAL,
    outcome=st.sampled_from(CaseOutcome),
    judged=st.booleans(),
    sample_reason=TEXT,
    injection_suspected=st.booleans(),
    review=st.booleans(),
    checks=st.lists(
        st.builds(
            CheckResult, name=ID, outcome=st.sampled_from(Outcome), gate=st.booleans(), detail=TEXT
        ),
        max_size=4,
    ).map(tuple),
    criteria=st.lists(
        st.builds(
            CriterionResult,
            name=ID,
            outcome=st.sampled_from(Outcome),
            gate=st.booleans(),
            evidence=OPTIONAL,
            reason=OPTIONAL,
        ),
        max_size=4,
    ).map(tuple),
    truncated=st.booleans(),
    flags=st.lists(ID, max_size=3).map(tuple),
    judge_error=OPTIONAL,
    raw_output=OPTIONAL,
    rubric_hash=st.none() | ID,
    judge_model_version=st.none() | ID,
    backfill=st.booleans(),
    scope=st.sampled_from(["trace", "conversation"]),
    conversation_id=st.none() | ID,
    turns=st.none() | st.integers(0, 50),
    trace_ids=st.lists(ID, max_size=3).map(tuple),
    revision=st.none() | st.integers(0, 9),
    trace_start=NANOS,
    trace_end=NANOS,
    decided_at=NANOS,
)
REDACTIONS = st.sampled_from(
    [
        Redaction(),
        Redaction.build(Content.KEEP, ["email", "card_number"]),
        Redaction.build(Content.KEEP, ["phone", "regex:paid|ok"]),
        Redaction.build(Content.HASH, []),
        Redaction.build(Content.DROP, []),
    ]
)


@settings(FUZZ, max_examples=max(FUZZ.max_examples, 300))
@given(VERDICTS, REDACTIONS)
def test_every_written_verdict_reads_back_to_its_values(
    verdict: Verdict, redaction: Redaction
) -> None:
    line = verdict_json(verdict, redaction)
    ((_, record),) = read_records([line], "v", VerdictRecord)
    assert_reads_back(record, verdict, redaction)
    # Reading loses nothing: the record read is written as the line it came from.
    assert record.to_json() == line


@pytest.mark.parametrize(
    ("nanos", "text"),
    [
        pytest.param(0, "1970-01-01T00:00:00.000000Z", id="epoch"),
        pytest.param(START, "2026-05-01T12:00:00.123456Z", id="cut-not-rounded"),
        pytest.param(999, "1970-01-01T00:00:00.000000Z", id="under-a-microsecond"),
        pytest.param(2**64 - 1, "2554-07-21T23:34:33.709551Z", id="largest-otlp-time"),
        pytest.param(None, None, id="unknown"),
    ],
)
def test_times_are_rfc3339_utc_with_microseconds(nanos: int | None, text: str | None) -> None:
    assert utc_text(nanos) == text


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
            "labels: not valid JSON: Expecting property name enclosed in double quotes (column 2)",
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


# -- versions and strictness ----------------------------------------------------------------

MINIMAL: list[tuple[type[Any], str, dict[str, Any]]] = [
    (
        VerdictRecord,
        "verdict record",
        {"trace_id": "t", "rubric_id": "r", "rubric_version": "1", "judge_model": "j"},
    ),
    (
        ReviewRecord,
        "review record",
        {
            "trace_id": "t",
            "reasons": ["audit"],
            "verdict": {
                "trace_id": "t",
                "rubric_id": "r",
                "rubric_version": "1",
                "judge_model": "j",
            },
            "transcript": {},
        },
    ),
    (HumanLabel, "label record", {"case_id": "t", "criterion": "c", "label": "PASS"}),
    (Adjudication, "label record", {"case_id": "t", "criterion": "c", "label": "FAIL"}),
    (PairRecord, "pair record", {"id": 1, "prompt": "p", "candidate": "c", "baseline": "b"}),
]


@pytest.mark.parametrize(
    ("model", "family", "data"), [pytest.param(*m, id=m[1].replace(" ", "-")) for m in MINIMAL]
)
def test_records_without_a_version_are_of_earlier_releases(
    model: type[Any], family: str, data: dict[str, Any]
) -> None:
    ((_, record),) = read_records([json.dumps(data)], "f", model)
    assert record.v == 1
    ((_, same),) = read_records([json.dumps({**data, "v": 1})], "f", model)
    assert same == record


@pytest.mark.parametrize(
    ("model", "family", "data"), [pytest.param(*m, id=m[1].replace(" ", "-")) for m in MINIMAL]
)
@pytest.mark.parametrize(
    ("v", "message"),
    [
        pytest.param(
            2,
            "f:1: {family} version 2 is newer than this release reads (version 1); "
            "upgrade sidecar to read it",
            id="newer",
        ),
        pytest.param("1", "f:1: field 'v' must be {family} version 1, got '1'", id="text"),
        pytest.param(True, "f:1: field 'v' must be {family} version 1, got True", id="bool"),
        pytest.param(0, "f:1: field 'v' must be {family} version 1, got 0", id="older"),
    ],
)
def test_another_version_is_refused_by_name(
    model: type[Any], family: str, data: dict[str, Any], v: object, message: str
) -> None:
    with pytest.raises(RecordError) as raised:
        list(read_records([json.dumps({**data, "v": v})], "f", model))
    assert str(raised.value) == message.format(family=family)


VERDICT_BASE = MINIMAL[0][2]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param({"judged": "true"}, "f:1: judged: Input should be a valid boolean", id="bool"),
        pytest.param({"turns": "3"}, "f:1: turns: Input should be a valid integer", id="int"),
        pytest.param({"turns": 3.0}, "f:1: turns: Input should be a valid integer", id="float"),
        pytest.param(
            {"flags": "partial"}, "f:1: field 'flags' must be a list of strings", id="flags"
        ),
        pytest.param({"checks": {}}, "f:1: field 'checks' must be a list", id="checks"),
        pytest.param(
            {"trace_start": "yesterday"},
            "f:1: field 'trace_start' must be an RFC 3339 time with a zone, "
            "like 2026-05-01T12:00:00.123456Z",
            id="time-not-a-time",
        ),
        pytest.param(
            {"decided_at": "2026-05-01T12:00:00"},
            "f:1: field 'decided_at' must be an RFC 3339 time with a zone, "
            "like 2026-05-01T12:00:00.123456Z",
            id="time-without-zone",
        ),
        pytest.param(
            {"trace_end": 1777636800},
            "f:1: field 'trace_end' must be an RFC 3339 time with a zone, "
            "like 2026-05-01T12:00:00.123456Z",
            id="time-as-number",
        ),
    ],
)
def test_verdict_fields_are_not_coerced(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(RecordError) as raised:
        list(read_records([json.dumps({**VERDICT_BASE, **extra})], "f", VerdictRecord))
    assert str(raised.value) == message


def test_times_with_an_offset_read_as_utc() -> None:
    line = json.dumps({**VERDICT_BASE, "trace_start": "2026-05-01T14:00:00.5+02:00"})
    ((_, record),) = read_records([line], "f", VerdictRecord)
    assert record.trace_start == datetime(2026, 5, 1, 12, 0, 0, 500_000, tzinfo=UTC)
    assert json.loads(record.to_json())["trace_start"] == "2026-05-01T12:00:00.500000Z"


@pytest.mark.parametrize(
    ("parse", "payload", "message"),
    [
        pytest.param(
            parse_turn,
            b'{"v": 2, "conversation_id": "c", "rubrics": ["r"], "trace_id": "t"}',
            "eval_turns: turn record version 2 is newer than this release reads (version 1); "
            "upgrade sidecar to read it",
            id="turn",
        ),
        pytest.param(
            parse_state,
            b'{"v": 2, "group": "g", "topic": "t", "rubric_id": "r", "conversation_id": "c",'
            b' "revision": 1, "decided_at": 1.0, "turns": []}',
            "eval_conversations: state record version 2 is newer than this release reads "
            "(version 1); upgrade sidecar to read it",
            id="state",
        ),
        pytest.param(
            parse_state,
            b'{"group": "g", "topic": "t", "rubric_id": "r", "conversation_id": "c",'
            b' "revision": "1", "decided_at": 1.0, "turns": []}',
            "eval_conversations: revision: Input should be a valid integer",
            id="state-strict",
        ),
    ],
)
def test_internal_records_refuse_other_versions(
    parse: Callable[[bytes], object], payload: bytes, message: str
) -> None:
    with pytest.raises(RecordError) as raised:
        parse(payload)
    assert str(raised.value) == message


# A record as the release before versions and times wrote it: calibrate, gate and diff read it.
EARLIER_LINE = (
    '{"id":"43ff3b84add2dab8816589ac6e128104eba4a5c23508e573210be0189e4aa5d6",'
    '"trace_id":"abababababababababababababababab","root_span_id":null,"rubric_id":"r",'
    '"rubric_version":"1","judge_model":"j","agent":"ägent\\u2028","agent_version":null,'
    '"outcome":"errored","judged":true,"sample_reason":"ratio","injection_suspected":true,'
    '"review":true,"checks":[{"name":"c","outcome":"FAIL","gate":false,"detail":"d\\t"}],'
    '"criteria":[{"name":"k","outcome":"PASS","gate":true,"evidence":"ev"},'
    '{"name":"k2","outcome":"ERROR","gate":true,"reason":"missing"}],"truncated":false,'
    '"sidecar_version":"0.1.0","judge_error":"timeout","raw_output":"{\\"x\\": 1}"}'
)


def test_a_record_of_an_earlier_release_reads_as_version_1_without_times() -> None:
    ((_, record),) = read_records([EARLIER_LINE], "v", VerdictRecord)
    untimed = dataclasses.replace(FULL, trace_start=None, trace_end=None, decided_at=None)
    assert_reads_back(record, untimed)
    assert json.loads(record.to_json()) == json.loads(verdict_json(untimed))
