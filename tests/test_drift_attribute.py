"""Attribution (``sidecar.drift.attribute``) on simulated streams: none, agent or judge."""

from __future__ import annotations

import dataclasses

import pytest

from sidecar.drift.attribute import (
    CriterionDrift,
    Decision,
    DriftMonitor,
    DriftSettings,
    Observation,
    StreamKey,
    drift_settings,
)
from sidecar.model import Outcome
from sidecar.settings import DriftSectionSettings
from tests.drift_streams import T0, Scenario, observations

SETTINGS = DriftSettings(alpha=0.01, guard_s=6 * 3600, baseline=600, every=300, canary_baseline=400)

SCENARIOS = {
    "none": Scenario("none"),
    "agent": Scenario("agent", agent_drop=0.15),
    "judge": Scenario("judge", judge_strict=0.2),
}


def _decide(s: Scenario, seed: int) -> list[Decision]:
    monitor = DriftMonitor(SETTINGS)
    monitor.observe_all(observations(s, seed))
    monitor.finish()
    return monitor.decisions


def _verdict_of(decisions: list[Decision]) -> str:
    """What a person would be told: judge if any alarm is the judge's, else agent, else none."""
    causes = {d.attribution for d in decisions}
    return "judge" if "judge" in causes else ("agent" if "agent" in causes else "none")


@pytest.mark.parametrize("name", ["none", "agent", "judge"])
def test_each_scenario_is_attributed_to_its_cause(name: str) -> None:
    s = SCENARIOS[name]
    results = [_verdict_of(_decide(s, seed)) for seed in range(6)]
    assert results == [s.expected] * 6


def test_a_silent_judge_bump_never_pages_as_an_agent_drop() -> None:
    for seed in range(6):
        decisions = _decide(SCENARIOS["judge"], seed)
        assert decisions, f"seed {seed}: the judge bump was not detected"
        assert all(d.attribution == "judge" for d in decisions)
        assert any(d.stream == "judge" and d.measure == "disagreement" for d in decisions)
        for d in decisions:
            assert d.time >= T0 + SCENARIOS["judge"].change_s


def test_an_agent_regression_alarms_after_the_change_with_its_evidence() -> None:
    s = SCENARIOS["agent"]
    (decision,) = _decide(s, 1)
    assert (decision.stream, decision.measure, decision.direction) == ("agent", "pass_rate", "down")
    assert decision.time > T0 + s.change_s
    assert decision.alarm.e_value >= 2 / SETTINGS.alpha
    assert decision.reason == "no judge alarm within the guard window"
    record = decision.to_json()
    assert record["attribution"] == "agent"
    assert record["kind"] == "criterion"
    assert record["time"].endswith("Z")
    assert record["evidence"]["e_value"] >= 200


def test_the_agent_alarm_is_pending_for_the_guard_window_then_decided() -> None:
    key = StreamKey("r", "criterion", "c")
    settings = dataclasses.replace(SETTINGS, baseline=100, every=50, guard_s=100.0)
    drift = CriterionDrift(key, settings)
    decided: list[Decision] = []
    t = 0.0
    for i in range(2000):
        t = float(i)
        good = i < 100 or i % 2 == 0  # 100% PASS, then 50%
        decided += drift.verdict(t, Outcome.PASS if good else Outcome.FAIL)
        if drift.pending:
            break
    assert drift.pending
    assert not decided
    assert drift.settle(t + 99.0) == []
    (late,) = drift.settle(t + 100.0)
    assert late.attribution == "agent"
    assert late.time == t
    assert late.reason == "no canary cases watch this criterion's judge"


def test_a_judge_version_change_in_the_window_attributes_to_the_judge() -> None:
    key = StreamKey("r", "criterion", "c")
    settings = dataclasses.replace(SETTINGS, baseline=100, every=50)
    drift = CriterionDrift(key, settings)
    decided: list[Decision] = []
    for i in range(3000):
        new = i >= 100
        outcome = Outcome.PASS if (not new or i % 2 == 0) else Outcome.FAIL
        decided += drift.verdict(float(i), outcome, "model-b" if new else "model-a", "h1")
        if decided:
            break
    (d,) = decided
    assert d.attribution == "judge"
    assert d.reason == "judge_model_version changed from model-a to model-b"


def test_check_alarms_are_the_agents_and_errors_on_criteria_the_judges() -> None:
    settings = dataclasses.replace(SETTINGS, baseline=100, every=50)
    monitor = DriftMonitor(settings)
    for i in range(1500):
        late = i >= 100
        check = Outcome.FAIL if late and i % 2 else Outcome.PASS
        criterion = Outcome.ERROR if late and i % 3 == 0 else Outcome.PASS
        monitor.observe(
            Observation(
                float(i), "r", "trace", (("check", "k", check), ("criterion", "c", criterion))
            )
        )
    monitor.finish()
    by = {(d.key.kind, d.measure): d.attribution for d in monitor.decisions}
    assert by[("check", "pass_rate")] == "agent"
    assert by[("criterion", "error_rate")] == "judge"


def test_streams_over_the_cap_are_dropped_and_counted() -> None:
    monitor = DriftMonitor(dataclasses.replace(SETTINGS, max_streams=2))
    for name in ("a", "b", "c", "d"):
        monitor.observe(Observation(0.0, "r", "trace", (("criterion", name, Outcome.PASS),)))
    assert len(monitor.streams) == 2
    assert monitor.dropped == 2


def test_the_drift_settings_block_defaults_to_the_detectors_defaults() -> None:
    assert drift_settings(DriftSectionSettings()) == DriftSettings()
    small = DriftSectionSettings(alpha=0.05, baseline=40, every=20, guard_s=5.0)
    assert drift_settings(small) == dataclasses.replace(
        DriftSettings(), alpha=0.05, baseline=40, every=20, guard_s=5.0
    )
