from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sidecar import __version__
from sidecar.adapters.prometheus import Metrics, record_rubrics, record_sampling, record_verdict
from sidecar.model import CheckResult, Outcome
from tests.builders import ROOT_SPAN_ID, rubric
from tests.builders import metric_verdict as verdict

RUBRIC = {"rubric": "refund-support", "rubric_version": "3"}


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry(), max_agents=2)


# The verdict families carry a scope label; these tests are about trace verdicts.
SCOPED = {"sidecar_cases_total", "sidecar_check_results_total", "sidecar_criterion_verdicts_total"}


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    if name in SCOPED:
        labels.setdefault("scope", "trace")
    return metrics.registry.get_sample_value(name, labels)


def test_build_info(metrics: Metrics) -> None:
    assert value(metrics, "sidecar_build_info", version=__version__) == 1


def test_record_verdict_counts_case_checks_and_criteria(metrics: Metrics) -> None:
    record_verdict(metrics, verdict())
    record_verdict(metrics, verdict())

    case = {
        **RUBRIC,
        "judge_model": "gemini-2.5-flash",
        "agent": "refund-agent",
        "agent_version": "1.4.2",
    }
    assert value(metrics, "sidecar_cases_total", **case, outcome="unacceptable") == 2
    assert value(metrics, "sidecar_cases_total", **case, outcome="acceptable") is None
    checks = "sidecar_check_results_total"
    assert value(metrics, checks, **RUBRIC, check="allowed_tools", outcome="FAIL") == 2
    assert value(metrics, checks, **RUBRIC, check="fast_enough", outcome="PASS") == 2
    criteria = "sidecar_criterion_verdicts_total"
    model = {
        **RUBRIC,
        "judge_model": "gemini-2.5-flash",
        "judge_model_version": "gemini-2.5-flash-001",
    }
    assert (
        value(metrics, criteria, **model, criterion="correct_amount", gate="true", outcome="PASS")
        == 2
    )
    assert value(metrics, criteria, **model, criterion="polite", gate="false", outcome="ERROR") == 2


@pytest.mark.parametrize(
    ("overrides", "outcome"),
    [
        pytest.param({}, "unacceptable", id="gating-check-fail"),
        pytest.param(
            {"checks": [CheckResult("a", Outcome.ERROR)], "criteria": []}, "errored", id="error"
        ),
        pytest.param({"checks": [], "criteria": []}, "acceptable", id="acceptable"),
    ],
)
def test_case_outcome_label(metrics: Metrics, overrides: dict[str, Any], outcome: str) -> None:
    record_verdict(metrics, verdict(**overrides))
    labels = {
        **RUBRIC,
        "judge_model": "gemini-2.5-flash",
        "agent": "refund-agent",
        "agent_version": "1.4.2",
        "outcome": outcome,
    }
    assert value(metrics, "sidecar_cases_total", **labels) == 1


def test_review_cases_are_counted_by_review_routing_not_here(metrics: Metrics) -> None:
    # sidecar.calibrate.review decides the reasons; the service counts each routed case once.
    record_verdict(metrics, verdict(review=True, injection_suspected=True))
    assert metrics.registry.get_sample_value(
        "sidecar_review_cases_total", {"rubric": "refund-support", "reason": "injection_pass"}
    ) in (None, 0.0)


AGENT_CASES = [
    pytest.param([("a", "1"), ("b", "1")], [("a", "1"), ("b", "1")], id="under-the-cap"),
    pytest.param(
        [("a", "1"), ("b", "1"), ("c", "1")],
        [("a", "1"), ("b", "1"), ("other", "other")],
        id="third-pair-is-other",
    ),
    pytest.param(
        [("a", "1"), ("a", "2"), ("a", "3"), ("a", "1")],
        [("a", "1"), ("a", "2"), ("other", "other"), ("a", "1")],
        id="versions-count-toward-the-cap-known-pairs-keep-labels",
    ),
    pytest.param(
        [(None, None), ("a", None)],
        [("unknown", "unknown"), ("a", "unknown")],
        id="missing-agent-is-unknown",
    ),
]


@pytest.mark.parametrize(("pairs", "expected"), AGENT_CASES)
def test_agent_labels_are_capped(
    metrics: Metrics,
    pairs: list[tuple[str | None, str | None]],
    expected: list[tuple[str, str]],
) -> None:
    assert [metrics.agent_labels(a, v) for a, v in pairs] == expected


def test_agent_overflow_is_counted_as_other(metrics: Metrics) -> None:
    for agent in ("a", "b", "c", "d"):
        record_verdict(metrics, verdict(agent=agent, checks=[], criteria=[]))
    labels = {**RUBRIC, "judge_model": "gemini-2.5-flash", "outcome": "acceptable"}
    assert (
        value(metrics, "sidecar_cases_total", **labels, agent="other", agent_version="other") == 2
    )
    assert value(metrics, "sidecar_cases_total", **labels, agent="a", agent_version="1.4.2") == 1


def test_no_label_ever_carries_a_trace_id_or_text(metrics: Metrics) -> None:
    trace_ids = [f"{n:032x}" for n in range(1, 60)]
    for trace_id in trace_ids:
        v = verdict(trace_id, agent=f"agent-{trace_id[-4:]}")
        record_verdict(metrics, v)
        record_sampling(metrics, "refund-support", "judge", "ratio")
    forbidden = {*trace_ids, ROOT_SPAN_ID, "refund of $40", "missing", "hi"}
    forbidden |= {verdict(t).id for t in trace_ids}
    values = {
        label
        for family in metrics.registry.collect()
        for sample in family.samples
        for label in sample.labels.values()
    }
    assert not any(f in label for f in forbidden for label in values)
    agents = {
        s.labels["agent"]
        for f in metrics.registry.collect()
        if f.name == "sidecar_cases"
        for s in f.samples
    }
    assert "other" in agents
    assert len(agents) == metrics.max_agents + 1  # the cap, plus "other"


def test_record_sampling_and_rubric_info(metrics: Metrics) -> None:
    record_sampling(metrics, "refund-support", "skip", "budget")
    record_rubrics(metrics, [rubric(id="refund-support", version="3")])
    assert (
        value(
            metrics,
            "sidecar_sampling_decisions_total",
            rubric="refund-support",
            decision="skip",
            reason="budget",
        )
        == 1
    )
    assert value(metrics, "sidecar_rubric_info", **RUBRIC, judge_model="none") == 1


def test_metric_names_follow_the_conventions(metrics: Metrics) -> None:
    for family in metrics.registry.collect():
        assert family.name.startswith("sidecar_")
        assert family.documentation
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
