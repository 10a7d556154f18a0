from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.judge.parse import all_error, evidence_supported, parse_verdicts
from sidecar.judge.prompt import JudgeRequest, build_request
from sidecar.model import CriterionResult, Outcome
from tests.builders import criterion, judge_block, rubric, tool_call, transcript

RUBRIC = rubric(
    id="refund-support",
    version="3",
    judge=judge_block(
        criterion(
            "correct_amount",
            definition="The amount told equals the amount in the tool result.",
            pass_example="Your refund of $40 is on its way.",
            fail_example="You will get $45 back.",
        ),
        criterion(
            "polite",
            definition="The reply is courteous.",
            pass_example="Thanks for waiting.",
            fail_example="Whatever.",
            gate=False,
        ),
        instructions="Grade the refund agent.",
    ),
)
TRANSCRIPT = transcript(
    tool_call("lookup_order", '{"order_id": "A1"}', '{"amount": 40.0,\n "currency": "USD"}'),
    user_input="Please refund   order A1.",
    answer="Thanks for waiting!\nYour refund of $40 is on its way.",
)
REQUEST: JudgeRequest = build_request(RUBRIC, TRANSCRIPT, nonce="0123456789abcdef0123")


def entry(criterion: str, verdict: Any = "PASS", evidence: Any = "NONE") -> dict[str, Any]:
    return {"criterion": criterion, "evidence": evidence, "verdict": verdict}


def answer(*entries: Any) -> str:
    return json.dumps({"criteria": list(entries)})


GOOD = answer(
    entry("correct_amount", "PASS", "Your refund of $40 is on its way."),
    entry("polite", "PASS", "Thanks for waiting!"),
)

P, F, E = Outcome.PASS, Outcome.FAIL, Outcome.ERROR


@pytest.mark.parametrize(
    ("raw", "expected", "error"),
    [
        pytest.param(GOOD, [(P, None), (P, None)], None, id="happy-path"),
        pytest.param(f"```json\n{GOOD}\n```", [(P, None), (P, None)], None, id="json-fence"),
        pytest.param(f"  ```\n{GOOD}```  ", [(P, None), (P, None)], None, id="bare-fence"),
        pytest.param(
            answer(entry("polite", "FAIL", "NONE"), entry("correct_amount", "FAIL", "NONE")),
            [(F, None), (F, None)],
            None,
            id="rubric-order-not-model-order",
        ),
        pytest.param(
            answer(entry("correct_amount", "PASS", "NONE")),
            [(P, None), (E, "missing")],
            None,
            id="missing-criterion",
        ),
        pytest.param(answer(), [(E, "missing"), (E, "missing")], None, id="empty-criteria-array"),
        pytest.param(
            answer(entry("correct_amount", "pass"), entry("polite", "MAYBE")),
            [(E, "bad_verdict"), (E, "bad_verdict")],
            None,
            id="verdict-outside-enum",
        ),
        pytest.param(
            answer(entry("correct_amount", True), entry("polite", None)),
            [(E, "bad_verdict"), (E, "bad_verdict")],
            None,
            id="verdict-not-a-string",
        ),
        pytest.param(
            answer({"criterion": "correct_amount", "evidence": "NONE"}, entry("polite")),
            [(E, "bad_verdict"), (P, None)],
            None,
            id="verdict-absent",
        ),
        pytest.param(
            answer(
                entry("correct_amount", "PASS"), entry("correct_amount", "FAIL"), entry("polite")
            ),
            [(E, "conflict"), (P, None)],
            None,
            id="conflicting-duplicates",
        ),
        pytest.param(
            answer(
                entry("correct_amount", "PASS", "NONE"),
                entry("correct_amount", "PASS", "Your refund of $40 is on its way."),
                entry("polite"),
            ),
            [(E, "conflict"), (P, None)],
            None,
            id="duplicates-differing-in-evidence",
        ),
        pytest.param(
            answer(
                entry("correct_amount", "FAIL"), entry("correct_amount", "FAIL"), entry("polite")
            ),
            [(F, None), (P, None)],
            None,
            id="identical-duplicates",
        ),
        pytest.param(
            answer(entry("correct_amount"), entry("polite"), entry("sneaky", "FAIL"), "junk", {}),
            [(P, None), (P, None)],
            None,
            id="extra-entries-ignored",
        ),
        pytest.param(
            answer(entry("correct_amount", "PASS", "Your refund of $45"), entry("polite")),
            [(E, "unsupported_evidence"), (P, None)],
            None,
            id="evidence-not-in-data",
        ),
        pytest.param(
            answer(
                entry(
                    "correct_amount",
                    "PASS",
                    "The amount told equals the amount in the tool result.",
                ),
                entry("polite"),
            ),
            [(E, "unsupported_evidence"), (P, None)],
            None,
            id="evidence-from-instructions",
        ),
        pytest.param(
            answer(entry("correct_amount", "PASS", "the agent's final answer"), entry("polite")),
            [(E, "unsupported_evidence"), (P, None)],
            None,
            id="evidence-from-heading-outside-blocks",
        ),
        pytest.param(
            answer(entry("correct_amount", "PASS", ""), entry("polite", "PASS", "   ")),
            [(E, "unsupported_evidence"), (E, "unsupported_evidence")],
            None,
            id="blank-evidence",
        ),
        pytest.param(
            answer(entry("correct_amount", "PASS", "none"), entry("polite", "PASS", 7)),
            [(E, "unsupported_evidence"), (E, "unsupported_evidence")],
            None,
            id="evidence-lowercase-none-or-not-text",
        ),
        pytest.param(
            answer({"criterion": "correct_amount", "verdict": "FAIL"}, entry("polite")),
            [(E, "unsupported_evidence"), (P, None)],
            None,
            id="evidence-absent",
        ),
        pytest.param(
            answer(entry("correct_amount", "PASS", "refund ... on its way"), entry("polite")),
            [(E, "unsupported_evidence"), (P, None)],
            None,
            id="ellipsis-is-not-verbatim",
        ),
        pytest.param("", None, "empty", id="empty"),
        pytest.param("  \n ", None, "empty", id="whitespace"),
        pytest.param(None, None, "empty", id="none"),
        pytest.param("PASS", None, "non_json", id="prose"),
        pytest.param(f"Here you go: {GOOD}", None, "non_json", id="text-around-json"),
        pytest.param(GOOD[:-5], None, "non_json", id="truncated"),
        pytest.param("[]", None, "bad_shape", id="top-level-array"),
        pytest.param('"PASS"', None, "bad_shape", id="top-level-string"),
        pytest.param(
            '{"criteria": {"correct_amount": "PASS"}}', None, "bad_shape", id="criteria-object"
        ),
        pytest.param('{"verdicts": []}', None, "bad_shape", id="no-criteria-key"),
        pytest.param(
            '{"criteria": [{"criterion": "polite", "verdict": "FAIL", "verdict": "PASS",'
            ' "evidence": "NONE"}]}',
            None,
            "bad_shape",
            id="duplicate-json-key",
        ),
    ],
)
def test_parse_verdicts(
    raw: str | None, expected: list[tuple[Outcome, str | None]] | None, error: str | None
) -> None:
    results, reason = parse_verdicts(raw, REQUEST, RUBRIC)
    assert reason == error
    assert [r.name for r in results] == ["correct_amount", "polite"]
    assert [r.gate for r in results] == [True, False]
    if expected is None:
        assert all(r.outcome is Outcome.ERROR and r.reason == error for r in results)
    else:
        assert [(r.outcome, r.reason) for r in results] == expected


def test_evidence_is_kept_normalised() -> None:
    raw = answer(
        entry("correct_amount", "PASS", '  "amount":   40.0, "currency": "USD" '),
        entry("polite", "PASS", "NONE"),
    )
    results, _ = parse_verdicts(raw, REQUEST, RUBRIC)
    assert results[0].evidence == '"amount": 40.0, "currency": "USD"'
    assert results[1].evidence is None


@pytest.mark.parametrize(
    ("evidence", "supported"),
    [
        pytest.param("Your refund of $40 is on its way.", True, id="exact"),
        pytest.param("Thanks for waiting! Your refund", True, id="across-a-newline"),
        pytest.param("Please refund order A1.", True, id="whitespace-collapsed"),
        pytest.param('"Your refund of $40"', True, id="quoted"),
        pytest.param("\u201cYour refund of $40\u201d", True, id="curly-quoted"),
        pytest.param(
            '{"amount": 40.0, "currency": "USD"}', True, id="tool-result-without-prefixes"
        ),
        pytest.param('| {"amount": 40.0,', True, id="tool-result-with-prefix"),
        pytest.param("lookup_order", True, id="tool-name"),
        pytest.param("your refund of $40", False, id="case-differs"),
        pytest.param("Your refund of $40 is on its way today.", False, id="extended"),
        pytest.param("0123456789abcdef0123", False, id="nonce"),
        pytest.param("BEGIN RESPONSE", False, id="marker"),
        pytest.param('""', False, id="empty-quotes"),
    ],
)
def test_evidence_supported(evidence: str, supported: bool) -> None:
    raw = answer(entry("correct_amount", "FAIL", evidence), entry("polite"))
    results, _ = parse_verdicts(raw, REQUEST, RUBRIC)
    assert (results[0].outcome is Outcome.FAIL) is supported
    assert (results[0].reason is None) is supported


def test_evidence_supported_helper() -> None:
    assert evidence_supported(" a\n b ", ("x a b y",))
    assert not evidence_supported("a c", ("x a b y",))


def test_evidence_must_come_from_neutralised_text() -> None:
    hostile = transcript(answer="ok <<<fine>>> zero\u200bwidth")
    request = build_request(RUBRIC, hostile)
    for evidence, outcome in [
        ("ok << <fine>> > zero\\u{200B}width", Outcome.PASS),
        ("ok <<<fine>>>", Outcome.ERROR),
        ("zero\u200bwidth", Outcome.ERROR),
    ]:
        raw = answer(entry("correct_amount", "PASS", evidence), entry("polite"))
        results, _ = parse_verdicts(raw, request, RUBRIC)
        assert results[0].outcome is outcome, evidence


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_arbitrary_text_never_passes(raw: str) -> None:
    results, _ = parse_verdicts(raw, REQUEST, RUBRIC)
    assert all(r.outcome is not Outcome.PASS for r in results)


@settings(max_examples=300)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_arbitrary_json_never_passes(value: Any) -> None:
    results, _ = parse_verdicts(json.dumps(value), REQUEST, RUBRIC)
    assert all(r.outcome is not Outcome.PASS for r in results)


def test_all_error() -> None:
    assert all_error(RUBRIC, "judge_unavailable") == (
        CriterionResult("correct_amount", Outcome.ERROR, gate=True, reason="judge_unavailable"),
        CriterionResult("polite", Outcome.ERROR, gate=False, reason="judge_unavailable"),
    )
    no_judge = rubric(id="checks-only")
    assert all_error(no_judge, "blocked") == ()
    with pytest.raises(ValueError, match="no judge block"):
        parse_verdicts(GOOD, REQUEST, no_judge)
