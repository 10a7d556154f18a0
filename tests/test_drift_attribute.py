"""Attribution (``sidecar.drift.attribute``) on simulated streams: none, agent or judge."""

from __future__ import annotations

import dataclasses
import random
from typing import Literal

import pytest

from sidecar.drift.attribute import (
    RETIRE_AFTER_S,
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
    return list(monitor.decisions)


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


def test_a_waiting_alarm_is_decided_by_observations_of_other_streams() -> None:
    # The monitor settles on every observation, whichever stream it feeds: an alarm
    # waits out its guard window even when its own criterion sees no more verdicts.
    settings = dataclasses.replace(SETTINGS, baseline=100, every=50, guard_s=100.0)
    monitor = DriftMonitor(settings)
    t = 0.0
    for i in range(2000):
        t = float(i)
        good = i < 100 or i % 2 == 0
        outcome = Outcome.PASS if good else Outcome.FAIL
        assert monitor.observe(Observation(t, "r", "trace", (("criterion", "c", outcome),))) == []
        if monitor.streams[StreamKey("r", "criterion", "c")].pending:
            break
    alarmed = t
    quiet: list[tuple[Literal["criterion"], str, Outcome]] = [("criterion", "other", Outcome.PASS)]
    for step in (50.0, 99.0):
        monitor.observe(Observation(alarmed + step, "r", "trace", tuple(quiet)))
        assert monitor.settle(alarmed + step) == []
    monitor.observe(Observation(alarmed + 100.0, "r", "trace", tuple(quiet)))
    (late,) = monitor.settle(alarmed + 100.0)
    assert (late.key.name, late.attribution, late.time) == ("c", "agent", alarmed)
    assert monitor.settle(alarmed + 200.0) == []


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


def test_a_bounded_monitor_keeps_its_latest_decisions() -> None:
    settings = dataclasses.replace(SETTINGS, baseline=20, every=10)
    bounded, whole = DriftMonitor(settings, remember=2), DriftMonitor(settings)
    for i in range(2000):
        # Five checks drop one after another; a check's alarm is decided at once.
        results = tuple(
            ("check", f"k{k}", Outcome.FAIL if i >= 100 * (k + 1) and i % 4 else Outcome.PASS)
            for k in range(5)
        )
        for monitor in (bounded, whole):
            monitor.observe(Observation(float(i), "r", "trace", results))
    assert len(whole.decisions) == 5
    assert list(bounded.decisions) == list(whole.decisions)[-2:]


def test_streams_over_the_cap_are_dropped_and_counted() -> None:
    monitor = DriftMonitor(dataclasses.replace(SETTINGS, max_streams=2))
    for name in ("a", "b", "c", "d", "a"):
        monitor.observe(Observation(0.0, "r", "trace", (("criterion", name, Outcome.PASS),)))
    assert [k.name for k in monitor.streams] == ["a", "b"]
    assert monitor.streams[StreamKey("r", "criterion", "a")].passes.seen == 2
    assert (monitor.dropped, monitor.retired) == (2, 0)


def test_a_stream_fed_nothing_for_a_week_is_retired_and_makes_room() -> None:
    monitor = DriftMonitor(dataclasses.replace(SETTINGS, max_streams=2))
    for version in ("v1", "v2"):
        monitor.observe(
            Observation(0.0, "r", "trace", (("check", "k", Outcome.PASS),), agent_version=version)
        )
    # v2 keeps serving; v1 stops.
    later = RETIRE_AFTER_S - 1.0
    monitor.observe(
        Observation(later, "r", "trace", (("check", "k", Outcome.PASS),), agent_version="v2")
    )
    monitor.observe(
        Observation(later, "r", "trace", (("check", "k", Outcome.PASS),), agent_version="v3")
    )
    assert monitor.dropped == 1  # both in use: v3 waits
    monitor.observe(
        Observation(
            RETIRE_AFTER_S + 1.0, "r", "trace", (("check", "k", Outcome.PASS),), agent_version="v3"
        )
    )
    versions = [s.key.agent_version for s in monitor.siblings(StreamKey("r", "check", "k"))]
    assert versions == ["v2", "v3"]
    assert (monitor.retired, monitor.dropped) == (1, 1)
    assert monitor.take_gone() == []  # the check still has streams


def test_a_retired_stream_decides_its_waiting_alarm() -> None:
    settings = dataclasses.replace(SETTINGS, baseline=100, every=50, guard_s=2 * RETIRE_AFTER_S)
    monitor = DriftMonitor(settings)
    key = StreamKey("r", "criterion", "c")
    t = 0.0
    for i in range(2000):
        t = float(i)
        outcome = Outcome.PASS if i < 100 or i % 2 == 0 else Outcome.FAIL
        monitor.observe(Observation(t, "r", "trace", (("criterion", "c", outcome),)))
        if monitor.streams[key].pending:
            break
    # The criterion sees no verdict for a week: its stream goes, and the alarm is decided.
    later = Observation(t + RETIRE_AFTER_S, "r", "trace", (("criterion", "other", Outcome.PASS),))
    (decided,) = monitor.observe(later)
    assert (decided.key, decided.attribution) == (key, "agent")
    assert key not in monitor.streams
    assert monitor.take_gone() == [key]
    assert monitor.settle(t + 3 * RETIRE_AFTER_S) == []


def test_the_drift_settings_block_defaults_to_the_detectors_defaults() -> None:
    assert drift_settings(DriftSectionSettings()) == DriftSettings()
    small = DriftSectionSettings(alpha=0.05, baseline=40, every=20, guard_s=5.0)
    assert drift_settings(small) == dataclasses.replace(
        DriftSettings(), alpha=0.05, baseline=40, every=20, guard_s=5.0
    )


def _versions_stream(
    plan: list[tuple[int, float, float]], seed: int, keyed: bool = True
) -> list[Observation]:
    """``plan``: (verdicts, share of version 2.0, pass rate of 2.0); 1.0 passes 90%."""
    rng = random.Random(seed)
    out: list[Observation] = []
    t = 1_800_000_000.0
    for n, share, rate in plan:
        for _ in range(n):
            t += 60.0
            v2 = rng.random() < share
            passed = rng.random() < (rate if v2 else 0.9)
            outcome = Outcome.PASS if passed else Outcome.FAIL
            version = ("2.0" if v2 else "1.0") if keyed else None
            out.append(
                Observation(
                    t,
                    "support",
                    "trace",
                    (("criterion", "resolved", outcome),),
                    judge_version="judge-1",
                    agent_version=version,
                )
            )
    return out


def test_a_regression_shipped_with_a_new_agent_version_is_tested_against_the_old_one() -> None:
    monitor = DriftMonitor(SETTINGS)
    # 1.0 alone sets the baseline; then 2.0 takes all traffic and passes 75% instead of 90%.
    monitor.observe_all(_versions_stream([(1000, 0.0, 0.9), (1500, 1.0, 0.75)], seed=4))
    monitor.finish()
    alarms = [d for d in monitor.decisions if d.measure == "pass_rate"]
    assert alarms, "the regression went unseen"
    first = alarms[0]
    assert first.key.agent_version == "2.0"
    assert first.attribution == "agent"
    assert "agent version 2.0 tested against 1.0's baseline" in first.reason
    assert first.alarm.baseline_rate > 0.85  # 1.0's rate, not 2.0's own
    assert first.to_json()["agent_version"] == "2.0"
    assert {k.agent_version for k in monitor.streams} == {"1.0", "2.0"}


@pytest.mark.parametrize(
    ("keyed", "alarmed"),
    [pytest.param(True, False, id="per-version-streams"), pytest.param(False, True, id="blended")],
)
def test_a_traffic_shift_between_two_steady_versions_is_not_drift(
    keyed: bool, alarmed: bool
) -> None:
    # Both versions serve from the start, each steady (90% and 65%); then 2.0 takes 90% of
    # the traffic. The blended pass rate falls from 0.87 to 0.68, each version's does not.
    monitor = DriftMonitor(SETTINGS)
    plan = [(1500, 0.1, 0.65), (2500, 0.9, 0.65)]
    monitor.observe_all(_versions_stream(plan, seed=5, keyed=keyed))
    monitor.finish()
    assert bool([d for d in monitor.decisions if d.measure == "pass_rate"]) is alarmed


def test_a_canary_judge_alarm_decides_the_pending_alarms_of_every_agent_version() -> None:
    settings = dataclasses.replace(SETTINGS, canary_baseline=40, canary_every=10)
    monitor = DriftMonitor(settings)
    observations = _versions_stream([(1000, 0.0, 0.9), (200, 1.0, 0.6)], seed=6)
    monitor.observe_all(observations)
    pending = [s for s in monitor.streams.values() if s.pending]
    assert [s.key.agent_version for s in pending] == ["2.0"]
    t = observations[-1].time
    labels = {"resolved": Outcome.PASS}
    for n in range(200):  # the canaries: the judge starts failing PASS-labelled cases
        outcome = Outcome.PASS if n < 40 or n % 2 else Outcome.FAIL
        monitor.observe(
            Observation(
                t + n, "support", "trace", (("criterion", "resolved", outcome),), labels=labels
            )
        )
    decided = [d for d in monitor.decisions if d.measure == "pass_rate"]
    assert decided
    assert all(d.attribution == "judge" for d in decided)
    assert decided[0].key.agent_version == "2.0"
