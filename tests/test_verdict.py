from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest

from sidecar import __version__
from sidecar.evaluate.verdict import (
    case_outcome,
    decided,
    decided_after,
    idempotency_key,
    make_verdict,
)
from sidecar.model import CaseOutcome, CheckResult, CriterionResult, Outcome
from sidecar.wire.verdicts import verdict_json
from tests.builders import transcript

PASS, FAIL, ERROR, SKIPPED = Outcome.PASS, Outcome.FAIL, Outcome.ERROR, Outcome.SKIPPED
OK, BAD, ERR = CaseOutcome.ACCEPTABLE, CaseOutcome.UNACCEPTABLE, CaseOutcome.ERRORED


def chk(outcome: Outcome, gate: bool = True) -> CheckResult:
    return CheckResult(f"check_{outcome.value.lower()}", outcome, gate, detail="d")


def crit(outcome: Outcome, gate: bool = True) -> CriterionResult:
    return CriterionResult(f"crit_{outcome.value.lower()}", outcome, gate)


OUTCOME_CASES = [
    pytest.param([], [], OK, id="nothing-is-acceptable"),
    pytest.param([chk(PASS)], [crit(PASS)], OK, id="all-pass"),
    pytest.param([chk(FAIL)], [crit(PASS)], BAD, id="gating-check-fail"),
    pytest.param([chk(PASS)], [crit(FAIL)], BAD, id="gating-criterion-fail"),
    pytest.param([chk(ERROR)], [crit(FAIL)], BAD, id="fail-beats-error"),
    pytest.param([chk(FAIL)], [crit(ERROR)], BAD, id="fail-beats-error-other-column"),
    pytest.param([chk(ERROR)], [crit(PASS)], ERR, id="gating-check-error"),
    pytest.param([chk(PASS)], [crit(ERROR)], ERR, id="gating-criterion-error"),
    pytest.param([chk(FAIL, gate=False)], [crit(PASS)], OK, id="advisory-check-fail-ignored"),
    pytest.param([chk(PASS)], [crit(FAIL, gate=False)], OK, id="advisory-criterion-fail-ignored"),
    pytest.param([chk(ERROR, gate=False)], [], OK, id="advisory-check-error-ignored"),
    pytest.param([], [crit(ERROR, gate=False)], OK, id="advisory-criterion-error-ignored"),
    pytest.param(
        [chk(FAIL, gate=False)], [crit(ERROR)], ERR, id="advisory-fail-does-not-mask-gating-error"
    ),
    pytest.param([chk(PASS)], [crit(SKIPPED)], OK, id="skipped-criteria-do-not-count"),
    pytest.param([chk(ERROR)], [crit(SKIPPED)], ERR, id="skipped-with-check-error"),
    pytest.param([chk(FAIL)], [crit(SKIPPED)], BAD, id="skipped-with-check-fail"),
]


@pytest.mark.parametrize(("checks", "criteria", "expected"), OUTCOME_CASES)
def test_case_outcome_rule(
    checks: list[CheckResult], criteria: list[CriterionResult], expected: CaseOutcome
) -> None:
    assert case_outcome(checks, criteria) is expected


KEY = ("0af7651916cd43dd8448eb211c80319c", "refund-support", "3", "gemini-2.5-flash")


def test_idempotency_key_is_stable_sha256() -> None:
    key = idempotency_key(*KEY)
    assert key == idempotency_key(*KEY)
    assert key == hashlib.sha256("\x1f".join(KEY).encode()).hexdigest()


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(("1" * 32, *KEY[1:]), id="other-trace"),
        pytest.param((KEY[0], "refund-other", *KEY[2:]), id="other-rubric"),
        pytest.param((*KEY[:2], "4", KEY[3]), id="other-rubric-version"),
        pytest.param((*KEY[:3], "gemini-2.5-pro"), id="other-judge-model"),
        pytest.param((KEY[0], "refund-support3", "", KEY[3]), id="no-ambiguous-concatenation"),
    ],
)
def test_idempotency_key_differs(other: tuple[str, str, str, str]) -> None:
    assert idempotency_key(*other) != idempotency_key(*KEY)


TRANSCRIPT = transcript(trace_id=KEY[0], agent_name="refund-agent", agent_version="1.4.2")

DESIGN_KEYS = {
    "id": str,
    "trace_id": str,
    "root_span_id": str,
    "rubric_id": str,
    "rubric_version": str,
    "judge_model": str,
    "agent": str,
    "agent_version": str,
    "outcome": str,
    "judged": bool,
    "sample_reason": str,
    "injection_suspected": bool,
    "review": bool,
    "checks": list,
    "criteria": list,
}
# The version, and when the trace ran and the verdict was decided (null when unknown).
ALWAYS_EXTRAS = {
    "v": int,
    "trace_start": (str, type(None)),
    "trace_end": (str, type(None)),
    "decided_at": (str, type(None)),
    "truncated": bool,
    "sidecar_version": str,
}


def verdict(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "rubric_id": KEY[1],
        "rubric_version": KEY[2],
        "judge_model": KEY[3],
        "checks": [CheckResult("allowed_tools", FAIL, True, "called delete_account")],
        "criteria": [
            CriterionResult("correct_amount", PASS, True, evidence="refund of $40"),
            CriterionResult("polite", ERROR, False, reason="missing"),
        ],
        "judged": True,
        "sample_reason": "ratio",
    }
    fields.update(overrides)
    return make_verdict(TRANSCRIPT, **fields)


def test_make_verdict_fills_provenance_and_outcome() -> None:
    v = verdict()
    assert v.id == idempotency_key(*KEY)
    assert (v.trace_id, v.root_span_id, v.agent, v.agent_version) == (
        KEY[0],
        "b7ad6b7169203331",
        "refund-agent",
        "1.4.2",
    )
    assert v.outcome is BAD
    assert v.sidecar_version == __version__


@pytest.mark.parametrize(
    "at", [None, 0, 1_796_628_627_652_000_000], ids=["unset", "zero", "a-time"]
)
def test_decided_is_replace_with_the_decision_time(at: int | None) -> None:
    v = dataclasses.replace(verdict(), review=True, flags=("partial",), trace_end=5)
    made = decided(v, at)
    assert made == dataclasses.replace(v, decided_at=at)
    assert type(made) is type(v)
    assert verdict_json(made) == verdict_json(dataclasses.replace(v, decided_at=at))


def test_make_verdict_equals_the_dataclass_constructor() -> None:
    v = verdict()
    fields = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
    assert type(v)(**fields) == v


def test_record_has_exactly_the_design_keys_with_their_types() -> None:
    line = verdict_json(verdict())
    assert "\n" not in line
    record = json.loads(line)
    assert set(record) == set(DESIGN_KEYS) | set(ALWAYS_EXTRAS)
    for key, kind in {**DESIGN_KEYS, **ALWAYS_EXTRAS}.items():
        assert isinstance(record[key], kind), key
    assert record == {
        "v": 1,
        "id": idempotency_key(*KEY),
        "trace_id": KEY[0],
        "root_span_id": "b7ad6b7169203331",
        "rubric_id": "refund-support",
        "rubric_version": "3",
        "judge_model": "gemini-2.5-flash",
        "agent": "refund-agent",
        "agent_version": "1.4.2",
        "trace_start": None,
        "trace_end": None,
        "decided_at": None,
        "outcome": "unacceptable",
        "judged": True,
        "sample_reason": "ratio",
        "injection_suspected": False,
        "review": False,
        "checks": [
            {
                "name": "allowed_tools",
                "outcome": "FAIL",
                "gate": True,
                "detail": "called delete_account",
            }
        ],
        "criteria": [
            {
                "name": "correct_amount",
                "outcome": "PASS",
                "gate": True,
                "evidence": "refund of $40",
            },
            {"name": "polite", "outcome": "ERROR", "gate": False, "reason": "missing"},
        ],
        "truncated": False,
        "sidecar_version": __version__,
    }


@pytest.mark.parametrize(
    ("overrides", "extra"),
    [
        pytest.param({"judge_error": "timeout"}, {"judge_error": "timeout"}, id="judge-error"),
        pytest.param({"raw_output": "{}"}, {"raw_output": "{}"}, id="raw-output"),
    ],
)
def test_record_optional_extras(overrides: dict[str, Any], extra: dict[str, str]) -> None:
    record = json.loads(verdict_json(verdict(**overrides)))
    assert set(record) == set(DESIGN_KEYS) | set(ALWAYS_EXTRAS) | set(extra)
    assert {k: record[k] for k in extra} == extra


def test_record_of_unjudged_case_without_agent() -> None:
    bare = transcript(trace_id=KEY[0], root_span_id=None)
    v = make_verdict(
        bare,
        rubric_id="r",
        rubric_version="1",
        judge_model="none",
        checks=[],
        criteria=[CriterionResult("polite", SKIPPED, reason="not_sampled")],
        judged=False,
        sample_reason="not_sampled",
    )
    record = json.loads(verdict_json(v))
    assert (record["root_span_id"], record["agent"], record["agent_version"]) == (None, None, None)
    assert record["outcome"] == "acceptable"
    assert record["criteria"] == [
        {"name": "polite", "outcome": "SKIPPED", "gate": True, "reason": "not_sampled"}
    ]


def test_the_verdict_carries_when_its_trace_ran_and_is_decided_after_it() -> None:
    timed = transcript(trace_id=KEY[0], start_unix_nano=10 * 10**9, end_unix_nano=12 * 10**9)
    v = make_verdict(
        timed,
        rubric_id="r",
        rubric_version="1",
        judge_model="j",
        checks=[],
        criteria=[],
        judged=False,
        sample_reason="not_sampled",
    )
    assert (v.trace_start, v.trace_end, v.decided_at) == (10 * 10**9, 12 * 10**9, None)
    assert decided_after(v, 5.0).decided_at == 17 * 10**9
    assert decided_after(v, 0.25).decided_at == 12_250_000_000
    untimed = dataclasses.replace(v, trace_end=None)
    assert decided_after(untimed, 5.0).decided_at is None
    record = json.loads(verdict_json(decided_after(v, 5.0)))
    assert (record["trace_start"], record["trace_end"], record["decided_at"]) == (
        "1970-01-01T00:00:10.000000Z",
        "1970-01-01T00:00:12.000000Z",
        "1970-01-01T00:00:17.000000Z",
    )
