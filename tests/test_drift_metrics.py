"""The drift gauges: the service's verdicts and canary runs feed the detectors (Prometheus adapter)."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry

from sidecar.adapters.prometheus import Metrics
from sidecar.drift.attribute import RETIRE_AFTER_S, DriftSettings, Observation
from sidecar.model import CriterionResult, Outcome
from sidecar.telemetry import CanaryRan, VerdictEmitted
from tests.builders import metric_verdict
from tests.drift_streams import CRITERION, RUBRIC, Scenario, observations

SETTINGS = DriftSettings(alpha=0.01, guard_s=6 * 3600, baseline=600, every=300, canary_baseline=400)


def _feed(metrics: Metrics, s: Scenario, seed: int, hours: float | None = None) -> None:
    end = None if hours is None else observations(s, seed).__next__().time + hours * 3600
    for n, o in enumerate(observations(s, seed)):
        if end is not None and o.time > end:
            break
        metrics.event(_event(o, n))


def _event(o: Observation, n: int) -> object:
    ((_, name, outcome),) = o.results
    base = metric_verdict(
        trace_id=f"{n:032x}",
        rubric_id=o.rubric,
        checks=[],
        criteria=[CriterionResult(name, outcome)],
        judge_model_version=o.judge_version,
    )
    v = dataclasses.replace(base, decided_at=round(o.time * 1e9))
    if o.labels is None:
        return VerdictEmitted(v, None, False)
    return CanaryRan(RUBRIC, "1", "judge", "judge-1", True, (), cases=((v, o.labels),))


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(
        name, {"rubric": RUBRIC, "criterion": CRITERION, **labels}
    )


def test_no_drift_keeps_the_evidence_low_and_the_attribution_none() -> None:
    metrics = Metrics(CollectorRegistry(), drift=SETTINGS)
    _feed(metrics, Scenario("none"), 3)
    assert (_value(metrics, "sidecar_drift_evalue", stream="agent") or 0) < 200
    assert (_value(metrics, "sidecar_drift_evalue", stream="judge") or 0) < 200
    assert _value(metrics, "sidecar_drift_attribution", cause="none") == 1
    assert _value(metrics, "sidecar_drift_attribution", cause="agent") == 0
    assert metrics.registry.get_sample_value("sidecar_drift_evalue_threshold") == 200


def test_an_agent_regression_shows_as_agent_after_the_guard_window() -> None:
    metrics = Metrics(CollectorRegistry(), drift=SETTINGS)
    s = Scenario("agent", agent_drop=0.15)
    _feed(metrics, s, 1, hours=10)  # alarmed at about 8.5 h: still pending at 10 h
    assert _value(metrics, "sidecar_drift_attribution", cause="agent") == 0
    metrics = Metrics(CollectorRegistry(), drift=SETTINGS)
    _feed(metrics, s, 1, hours=16)
    assert _value(metrics, "sidecar_drift_attribution", cause="agent") == 1
    assert _value(metrics, "sidecar_drift_attribution", cause="judge") == 0
    alarms = {"stream": "agent", "attribution": "agent"}
    assert _value(metrics, "sidecar_drift_alarms_total", **alarms) == 1


def test_a_silent_judge_bump_shows_as_judge_and_never_as_agent() -> None:
    metrics = Metrics(CollectorRegistry(), drift=SETTINGS)
    s = Scenario("judge", judge_strict=0.2)
    seen_agent = False
    end = None
    for n, o in enumerate(observations(s, 0)):
        end = end or o.time + 14 * 3600
        if o.time > end:
            break
        metrics.event(_event(o, n))
        seen_agent |= _value(metrics, "sidecar_drift_attribution", cause="agent") == 1
    assert not seen_agent
    assert _value(metrics, "sidecar_drift_attribution", cause="judge") == 1
    assert _value(metrics, "sidecar_drift_alarms_total", stream="judge", attribution="judge") == 1
    assert (
        _value(metrics, "sidecar_drift_alarms_total", stream="agent", attribution="agent") is None
    )


def test_the_streams_watched_retired_and_dropped_are_exposed() -> None:
    metrics = Metrics(CollectorRegistry(), drift=dataclasses.replace(SETTINGS, max_streams=2))
    times = (0.0, 0.0, 1.0, RETIRE_AFTER_S + 1.0)  # rubric a's stream is idle by the last
    for n, (rubric, at) in enumerate(zip(("a", "b", "c", "c"), times, strict=True)):
        v = metric_verdict(trace_id=f"{n:032x}", rubric_id=rubric, checks=[], criteria=[])
        v = dataclasses.replace(
            v, criteria=(CriterionResult("c", Outcome.PASS),), decided_at=int(at * 1e9)
        )
        metrics.event(VerdictEmitted(v, None, False))
    get = metrics.registry.get_sample_value
    assert get("sidecar_drift_streams") == 1  # c, after a and b made room
    assert get("sidecar_drift_results_dropped_total") == 1  # c's first, both in use
    assert get("sidecar_drift_streams_retired_total") == 2  # a and b, idle for a week
    # The retired criteria's series are gone with them.
    evalue = {"criterion": "c", "stream": "agent"}
    assert get("sidecar_drift_evalue", {"rubric": "a", **evalue}) is None
    assert get("sidecar_drift_evalue", {"rubric": "c", **evalue}) is not None


def test_a_cause_is_shown_for_one_guard_window_even_when_its_verdicts_stop() -> None:
    clock = [0.0]
    metrics = Metrics(CollectorRegistry(), drift=SETTINGS, monotonic=lambda: clock[0])
    _feed(metrics, Scenario("agent", agent_drop=0.15), 1, hours=16)
    assert _value(metrics, "sidecar_drift_attribution", cause="agent") == 1
    # No verdict comes for the criterion any more (its rubric was removed, say). The
    # decision (about 14.5 h) is held for one guard window (6 h), then the gauge lets go.
    clock[0] += 3600.0
    assert _value(metrics, "sidecar_drift_attribution", cause="agent") == 1
    clock[0] += SETTINGS.guard_s
    assert _value(metrics, "sidecar_drift_attribution", cause="agent") == 0
    assert _value(metrics, "sidecar_drift_attribution", cause="none") == 1
