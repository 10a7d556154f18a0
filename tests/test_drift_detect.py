"""The betting detector (``sidecar.drift.detect``): its level, its power, its determinism.

Streams are simulated with seeded generators; the false-alarm checks run
many drift-free streams and compare the share that alarmed with ``alpha``
(with room for the simulation's own noise: a binomial count far above its
mean would fail).
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.drift.detect import Alarm, Detector, lower_bound


def _stream(rate: float, n: int, rng: random.Random) -> list[bool]:
    return [rng.random() < rate for _ in range(n)]


def _first_alarm(detector: Detector, outcomes: list[bool]) -> tuple[int, Alarm] | None:
    for i, x in enumerate(outcomes):
        alarm = detector.update(x)
        if alarm is not None:
            return i, alarm
    return None


# -- the baseline's bound, against published Clopper-Pearson intervals -----------------------


@pytest.mark.parametrize(
    ("successes", "n", "delta", "expected"),
    [
        # 95% two-sided Clopper-Pearson intervals (lower ends), as tabulated e.g. by R's
        # binom.test: 5 of 10 -> 0.1871, 1 of 10 -> 0.002529, 9 of 10 -> 0.5550, 45 of 50 -> 0.7819 (the Beta(45, 6) 2.5% quantile).
        (5, 10, 0.025, 0.187086),
        (1, 10, 0.025, 0.002529),
        (9, 10, 0.025, 0.554984),
        (45, 50, 0.025, 0.781865),
        (10, 10, 0.05, 0.05 ** (1 / 10)),  # all successes: delta ** (1/n)
    ],
)
def test_lower_bound_matches_clopper_pearson(
    successes: int, n: int, delta: float, expected: float
) -> None:
    assert lower_bound(successes, n, delta) == pytest.approx(expected, abs=2e-6)


def test_lower_bound_is_zero_without_successes_and_rejects_nonsense() -> None:
    assert lower_bound(0, 30, 0.01) == 0.0
    with pytest.raises(ValueError, match="successes <= n"):
        lower_bound(11, 10, 0.05)
    with pytest.raises(ValueError, match="delta"):
        lower_bound(1, 10, 0.0)


# -- level: drift-free streams rarely alarm ---------------------------------------------------


@settings(max_examples=4, deadline=None, derandomize=True)
@given(rate=st.floats(0.05, 0.97), seed=st.integers(0, 2**32 - 1))
def test_drift_free_streams_alarm_at_most_alpha(rate: float, seed: int) -> None:
    alpha, streams = 0.05, 200
    rng = random.Random(seed)
    alarms = 0
    for _ in range(streams):
        detector = Detector(alpha=alpha, baseline=200, every=100)
        alarms += _first_alarm(detector, _stream(rate, 1200, rng)) is not None
    # E[alarms] <= 10; P(Binomial(200, 0.05) >= 20) < 0.002.
    assert alarms < 20, f"{alarms} of {streams} drift-free streams at rate {rate:.3f} alarmed"


def test_drift_free_rise_detector_also_keeps_its_level() -> None:
    rng = random.Random(7)
    alarms = sum(
        _first_alarm(
            Detector(alpha=0.05, direction="up", baseline=100, every=50), _stream(0.1, 800, rng)
        )
        is not None
        for _ in range(200)
    )
    assert alarms < 20


# -- power: real moves are caught, in the right direction only --------------------------------


def test_a_drop_is_detected_after_it_happens_with_the_rates_reported() -> None:
    rng = random.Random(11)
    delays = []
    for _ in range(20):
        outcomes = _stream(0.9, 1000, rng) + _stream(0.7, 2000, rng)
        found = _first_alarm(Detector(alpha=0.01, baseline=500, every=250), outcomes)
        assert found is not None
        at, alarm = found
        assert at >= 1000
        assert alarm.direction == "down"
        assert alarm.e_value >= 200
        assert alarm.reference < alarm.baseline_rate
        assert 0.85 < alarm.baseline_rate < 0.95
        assert alarm.recent_rate < alarm.baseline_rate
        delays.append(at - 1000)
    assert sorted(delays)[10] < 600


def test_a_rise_in_disagreement_is_detected_and_a_fall_is_not() -> None:
    rng = random.Random(3)
    rise = _stream(0.1, 300, rng) + _stream(0.35, 700, rng)
    found = _first_alarm(Detector(alpha=0.01, direction="up", baseline=200, every=100), rise)
    assert found is not None
    assert found[0] >= 300
    assert found[1].direction == "up"
    assert found[1].recent_rate > found[1].baseline_rate
    fall = _stream(0.3, 300, rng) + _stream(0.02, 3000, rng)
    assert _first_alarm(Detector(alpha=0.01, direction="up", baseline=200, every=100), fall) is None


def test_after_an_alarm_the_detector_starts_over_with_a_new_baseline() -> None:
    rng = random.Random(5)
    detector = Detector(alpha=0.01, baseline=300, every=100)
    first = _first_alarm(detector, _stream(0.9, 300, rng) + _stream(0.5, 1000, rng))
    assert first is not None
    assert not detector.testing
    assert detector.e_value == 1.0
    # The lower rate is the new normal: it does not alarm again.
    assert _first_alarm(detector, _stream(0.5, 3000, rng)) is None


# -- determinism and bounds on any outcomes ---------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    outcomes=st.lists(st.booleans(), max_size=600),
    direction=st.sampled_from(["down", "up"]),
    alpha=st.floats(0.001, 0.2),
)
def test_the_same_outcomes_give_the_same_evidence(
    outcomes: list[bool], direction: str, alpha: float
) -> None:
    def run() -> tuple[list[Alarm | None], float]:
        d = Detector(alpha=alpha, direction=direction, baseline=50, every=20)  # type: ignore[arg-type]
        seen = [d.update(x) for x in outcomes]
        assert math.isfinite(d.log_e_value) or d.log_e_value == -math.inf
        return seen, d.e_value

    first, again = run(), run()
    assert first == again
    alarms, e_value = first
    assert all(a is None for a in alarms[:50])  # never during the first baseline
    assert e_value >= 0.0


def test_settings_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="alpha"):
        Detector(alpha=1.5)
    with pytest.raises(ValueError, match="baseline"):
        Detector(baseline=0)
    with pytest.raises(ValueError, match="tolerance"):
        Detector(tolerance=-0.1)


# -- the update, against the method written plainly ------------------------------------------


def _plain_log_e(outcomes: list[bool], p0: float, every: int) -> list[float]:
    """log e after each outcome of a test against ``p0`` (direction down), every gambler
    stepped and the sum taken at every outcome: the method as the module docstring states it.
    """
    ons = 2.0 / (2.0 - math.log(3.0))
    gamblers: list[list[float]] = []  # [log share, log wealth, stake, curvature]
    joined = 0
    found = []
    for i, outcome in enumerate(outcomes):
        if i % every == 0:
            joined += 1
            gamblers.append([-math.log(joined * (joined + 1)), 0.0, 0.0, 1.0])
            if len(gamblers) > 32:
                gamblers.remove(min(gamblers, key=lambda g: g[1]))
        gain = (p0 - outcome) / (1.0 - p0)
        for g in gamblers:
            if g[2] == 0.0 and gain <= 0.0:
                g[3] += gain * gain
                continue
            factor = 1.0 + g[2] * gain
            g[1] += math.log(factor)
            z = gain / factor
            g[3] += z * z
            g[2] = min(0.5, max(0.0, g[2] + ons * z / g[3]))
        gamblers = [g for g in gamblers if g[1] > -30.0]
        logs = [g[0] + g[1] for g in gamblers]
        top = max(logs, default=-math.inf)
        found.append(top + math.log(sum(math.exp(v - top) for v in logs)) if logs else -math.inf)
    return found


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.booleans(), min_size=1, max_size=400),
    st.floats(min_value=0.05, max_value=0.95),
    st.integers(min_value=1, max_value=50),
)
def test_update_gives_the_plain_methods_evidence(
    outcomes: list[bool], p0: float, every: int
) -> None:
    # Steps that move no wealth keep the sum as it was instead of taking it again: the
    # evidence must be the plain method's, bit for bit, until an alarm restarts the test.
    detector = Detector(alpha=1e-300, fixed=p0, every=every)
    expected = _plain_log_e(outcomes, p0, every)
    for outcome, log_e in zip(outcomes, expected, strict=True):
        assert detector.update(outcome) is None
        assert detector.log_e_value == log_e
