"""The judge's state is explicit: a gauge with a reason, and a warning naming what is SKIPPED."""

from __future__ import annotations

import logging

import pytest

from sidecar.adapters.prometheus import Metrics
from sidecar.commands._wiring import JUDGE_REASONS, JudgeState
from tests.builders import refund_rubric


def enabled(metrics: Metrics, reason: str) -> float | None:
    return metrics.registry.get_sample_value("sidecar_judge_enabled", {"reason": reason})


def test_without_credentials_the_gauge_is_zero_and_the_skipped_rubrics_are_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rubric = refund_rubric()
    assert rubric.judge is not None
    metrics = Metrics()

    with caplog.at_level(logging.WARNING):
        JudgeState.of([rubric], judge_on=False).report(metrics, logging.getLogger("sidecar"))

    assert enabled(metrics, "no_credentials") == 0.0
    assert enabled(metrics, "configured") is None
    [warning] = caplog.records
    assert f"{rubric.id}@{rubric.version}" in warning.getMessage()
    assert "SKIPPED" in warning.getMessage()
    assert "GOOGLE_API_KEY" in warning.getMessage()


def test_with_credentials_the_gauge_is_one_and_nothing_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    with caplog.at_level(logging.WARNING):
        JudgeState.of([refund_rubric()], judge_on=True).report(metrics, logging.getLogger("x"))
    assert enabled(metrics, "configured") == 1.0
    assert caplog.records == []


def test_rubrics_without_judge_criteria_need_no_judge_and_raise_no_alarm() -> None:
    rubric = refund_rubric().model_copy(update={"judge": None})
    state = JudgeState.of([rubric], judge_on=False)
    assert (state.enabled, state.reason, state.skipped_rubrics) == (False, "no_judge_criteria", ())


def test_the_reason_is_one_of_a_closed_set() -> None:
    rubric = refund_rubric()
    without = rubric.model_copy(update={"judge": None})
    reasons = {
        JudgeState.of(rubrics, judge_on=on).reason
        for rubrics in ([rubric], [without], [])
        for on in (True, False)
    }
    assert reasons == set(JUDGE_REASONS)
