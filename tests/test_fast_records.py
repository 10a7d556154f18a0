"""The verdict record built directly (``VerdictRecord.dump``) is the model's record, byte for byte."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.evaluate.verdict import Verdict
from sidecar.model import CaseOutcome, CheckResult, CriterionResult, Outcome
from sidecar.wire.records import VerdictRecord
from sidecar.wire.redact import Content, Redaction
from tests.fuzz_strategies import FUZZ

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

CHECKS = st.builds(
    CheckResult, name=ID, outcome=st.sampled_from(Outcome), gate=st.booleans(), detail=TEXT
)
CRITERIA = st.builds(
    CriterionResult,
    name=ID,
    outcome=st.sampled_from(Outcome),
    gate=st.booleans(),
    evidence=OPTIONAL,
    reason=OPTIONAL,
)
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
    checks=st.lists(CHECKS, max_size=4).map(tuple),
    criteria=st.lists(CRITERIA, max_size=4).map(tuple),
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
def test_the_direct_record_is_the_models_record(verdict: Verdict, redaction: Redaction) -> None:
    model = VerdictRecord.of(verdict, redaction)
    assert verdict.to_record(redaction) == model.model_dump(mode="json")
    assert verdict.to_json(redaction) == model.to_json()
    # And it reads back as the record it was made from.
    assert VerdictRecord.model_validate_json(verdict.to_json(redaction)).key == model.key
