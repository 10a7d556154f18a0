from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import SampleDecision, Sampler, trace_fraction
from sidecar.model import CheckResult, ErrorSpan, Outcome, Transcript
from tests.builders import criterion, judge_block, rubric, sampling, tool_call, transcript

JUDGE = judge_block(
    criterion(
        "polite",
        definition="The reply is polite.",
        pass_example="Thanks!",
        fail_example="Go away.",
    ),
    instructions="Grade the reply.",
)
ERRORS = (ErrorSpan("e1", "execute_tool x", "boom"),)


def random_ids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


CHECK_FAIL = CheckResult("allowed_tools", Outcome.FAIL)
CHECK_ERROR = CheckResult("grounded", Outcome.ERROR)
CHECK_PASS = CheckResult("allowed_tools", Outcome.PASS)
UNTRUSTED = tool_call("web_fetch", None, "page text", untrusted=True)
UNTRUSTED_NOT_CAPTURED = tool_call("web_fetch", None, None, untrusted=True)
TRUSTED = tool_call("lookup_order", None, "order 1")
ALL_RULES = ("error", "injection_suspected", "untrusted_content", "check_failed")

# (rubric, sampler kwargs, transcript, checks, injection_suspected) -> (judge, reason)
PRECEDENCE_CASES = [
    pytest.param(
        rubric(sampling=sampling(1.0, *ALL_RULES)),
        {}, transcript(error_spans=ERRORS), [CHECK_FAIL], True,
        (False, "no_judge"), id="1-no-judge-block-beats-everything",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(1.0, *ALL_RULES)),
        {"judge_enabled": False}, transcript(error_spans=ERRORS), [], True,
        (False, "judge_disabled"), id="2-judge-disabled-beats-always-judge",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0, "error")),
        {}, transcript(error_spans=ERRORS), [], False,
        (True, "error"), id="3-always-judge-error-span",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0, "error")),
        {}, transcript(), [CHECK_ERROR], False,
        (True, "error"), id="3-always-judge-check-error",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0, "injection_suspected")),
        {}, transcript(), [], True,
        (True, "injection_suspected"), id="3-always-judge-injection",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0, "untrusted_content")),
        {}, transcript(TRUSTED, UNTRUSTED), [], False,
        (True, "untrusted_content"), id="3-always-judge-untrusted-result",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0, "untrusted_content")),
        {}, transcript(UNTRUSTED_NOT_CAPTURED), [], False,
        (False, "not_sampled"), id="3-untrusted-tool-without-captured-result-no-match",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0, "check_failed")),
        {}, transcript(), [CHECK_PASS, CHECK_FAIL], False,
        (True, "check_failed"), id="3-always-judge-check-failed",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0, "check_failed", "error")),
        {}, transcript(error_spans=ERRORS), [CHECK_FAIL], False,
        (True, "check_failed"), id="3-first-matching-rule-in-rubric-order",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0, "error", "check_failed")),
        {}, transcript(error_spans=ERRORS), [CHECK_FAIL], False,
        (True, "error"), id="3-first-matching-rule-in-rubric-order-reversed",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0)),
        {}, transcript(UNTRUSTED, error_spans=ERRORS), [CHECK_FAIL], True,
        (False, "not_sampled"), id="3-rules-not-listed-do-not-apply",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0, "error")),
        {"warmup_traces": 5}, transcript(error_spans=ERRORS), [], False,
        (True, "error"), id="3-always-judge-beats-warmup",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0)), {"warmup_traces": 1}, transcript(), [], False,
        (True, "warmup"), id="4-warmup-beats-ratio",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0)), {"judge_all": True}, transcript(), [], False,
        (True, "judge_all"), id="judge-all-after-warmup",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(1.0)),
        {}, transcript(), [], False, (True, "ratio"), id="5-ratio-one-judges",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0)),
        {}, transcript(), [], False, (False, "not_sampled"), id="5-ratio-zero-skips",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(1.0)), {"per_minute": 0}, transcript(), [], False,
        (False, "budget"), id="budget-applies-after-the-decision",
    ),
    pytest.param(
        rubric(judge=JUDGE, sampling=sampling(0.0, "error")),
        {"per_day": 0}, transcript(error_spans=ERRORS), [], False,
        (False, "budget"), id="budget-applies-to-always-judge-too",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rub", "kwargs", "tx", "checks", "injection", "expected"), PRECEDENCE_CASES
)
def test_precedence(
    rub: Rubric,
    kwargs: dict[str, Any],
    tx: Transcript,
    checks: list[CheckResult],
    injection: bool,
    expected: tuple[bool, str],
) -> None:
    sampler = Sampler(**{"judge_enabled": True, **kwargs})
    decision = sampler.decide(rub, tx, checks, 0.0, injection_suspected=injection)
    assert (decision.judge, decision.reason) == expected
    assert decision.decision == ("judge" if expected[0] else "skip")


def test_trace_fraction_is_deterministic_and_in_range() -> None:
    for trace_id in random_ids(200, seed=1):
        first = trace_fraction(trace_id)
        assert first == trace_fraction(trace_id)
        assert 0.0 <= first < 1.0


def test_same_trace_same_decision_across_samplers_and_rubrics() -> None:
    ids = random_ids(500, seed=2)
    first = [
        Sampler(judge_enabled=True).decide(
            rubric(judge=JUDGE, sampling=sampling(0.3)), transcript(trace_id=t), [], 0.0
        )
        for t in ids
    ]
    # Another replica, another rubric id, another time: the same answer per trace.
    other = Sampler(judge_enabled=True)
    second = [
        other.decide(
            rubric(id="other", judge=JUDGE, sampling=sampling(0.3)), transcript(trace_id=t), [], 9e9
        )
        for t in ids
    ]
    assert first == second
    assert {d.reason for d in first} == {"ratio", "not_sampled"}


@given(
    trace_bytes=st.binary(min_size=16, max_size=16),
    ratios=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)),
)
def test_lower_ratio_selects_a_subset_of_a_higher_ratio(
    trace_bytes: bytes, ratios: tuple[float, float]
) -> None:
    low, high = sorted(ratios)
    tx = transcript(trace_id=trace_bytes.hex())
    sampler = Sampler(judge_enabled=True)
    if sampler.decide(rubric(judge=JUDGE, sampling=sampling(low)), tx, [], 0.0).judge:
        assert sampler.decide(rubric(judge=JUDGE, sampling=sampling(high)), tx, [], 0.0).judge


@pytest.mark.parametrize(
    "ratio",
    [pytest.param(r, id=f"ratio-{r}") for r in (0.0, 0.001, 0.01, 0.05, 0.25, 0.5, 0.9, 1.0)],
)
def test_observed_fraction_matches_ratio(ratio: float) -> None:
    n = 20_000
    sampler = Sampler(judge_enabled=True)
    rub = rubric(judge=JUDGE, sampling=sampling(ratio))
    judged = sum(
        sampler.decide(rub, transcript(trace_id=t), [], 0.0).judge for t in random_ids(n, 3)
    )
    # Five standard deviations of a binomial proportion; exact at 0 and 1.
    tolerance = 5 * math.sqrt(ratio * (1 - ratio) / n)
    assert abs(judged / n - ratio) <= tolerance


def test_warmup_judges_the_first_n_traces_per_agent_version() -> None:
    sampler = Sampler(judge_enabled=True, warmup_traces=2)
    rub = rubric(judge=JUDGE, sampling=sampling(0.0))
    sequence = [
        (("a", "1"), "warmup"),
        (("a", "1"), "warmup"),
        (("a", "1"), "not_sampled"),
        (("a", "2"), "warmup"),
        (("b", "1"), "warmup"),
        (("a", "2"), "warmup"),
        (("a", "2"), "not_sampled"),
        ((None, None), "warmup"),
    ]
    reasons = [
        sampler.decide(rub, transcript(agent_name=a, agent_version=v), [], 0.0).reason
        for (a, v), _ in sequence
    ]
    assert reasons == [expected for _, expected in sequence]


def test_warmup_counts_per_rubric() -> None:
    sampler = Sampler(judge_enabled=True, warmup_traces=1)
    assert (
        sampler.decide(
            rubric(id="r1", judge=JUDGE, sampling=sampling(0.0)), transcript(), [], 0.0
        ).reason
        == "warmup"
    )
    assert (
        sampler.decide(
            rubric(id="r2", judge=JUDGE, sampling=sampling(0.0)), transcript(), [], 0.0
        ).reason
        == "warmup"
    )
    assert (
        sampler.decide(
            rubric(id="r1", judge=JUDGE, sampling=sampling(0.0)), transcript(), [], 0.0
        ).reason
        == "not_sampled"
    )


BUDGET_CASES = [
    pytest.param(
        {"per_minute": 2},
        [0, 1, 2, 59.9, 60, 61, 61.5],
        ["ratio", "ratio", "budget", "budget", "ratio", "ratio", "budget"],
        id="per-minute-window-slides",
    ),
    pytest.param(
        {"per_day": 3},
        [0, 100, 200, 300, 86_399, 86_400, 86_401],
        ["ratio", "ratio", "ratio", "budget", "budget", "ratio", "budget"],
        id="per-day-window-slides",
    ),
    pytest.param(
        {"per_minute": 2, "per_day": 3},
        [0, 1, 60, 61, 120, 86_400],
        ["ratio", "ratio", "ratio", "budget", "budget", "ratio"],
        id="both-limits",
    ),
    pytest.param({}, [0, 0, 0, 0], ["ratio"] * 4, id="no-budget"),
]


@pytest.mark.parametrize(("limits", "times", "expected"), BUDGET_CASES)
def test_budget(limits: dict[str, int], times: list[float], expected: list[str]) -> None:
    sampler = Sampler(judge_enabled=True, **limits)
    rub = rubric(judge=JUDGE, sampling=sampling(1.0))
    assert [sampler.decide(rub, transcript(), [], now).reason for now in times] == expected


def test_skip_decisions_do_not_spend_budget() -> None:
    sampler = Sampler(judge_enabled=True, per_minute=1)
    assert sampler.decide(
        rubric(judge=JUDGE, sampling=sampling(0.0)), transcript(), [], 0.0
    ) == SampleDecision(False, "not_sampled")
    assert sampler.decide(
        rubric(judge=JUDGE, sampling=sampling(1.0)), transcript(), [], 1.0
    ) == SampleDecision(True, "ratio")
