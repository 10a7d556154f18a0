"""The one back-off policy (``sidecar.retry``): delays with jitter, and the retry loop."""

from __future__ import annotations

import itertools

import pytest

from sidecar.retry import Backoff


@pytest.mark.parametrize(
    ("attempt", "rand", "want"),
    [
        pytest.param(0, 0.5, 0.05, id="first-retry-half"),
        pytest.param(1, 0.5, 0.1, id="doubles"),
        pytest.param(3, 0.999, 0.7992, id="near-ceiling"),
        pytest.param(10, 1.0, 2.0, id="capped"),
        pytest.param(10_000, 1.0, 2.0, id="huge-attempt-no-overflow"),
        pytest.param(2, 0.0, 0.0, id="full-jitter-can-be-zero"),
    ],
)
def test_backoff_full_jitter(attempt: int, rand: float, want: float) -> None:
    backoff = Backoff(base_s=0.1, max_s=2.0, rand=lambda: rand)
    assert backoff.delay(attempt) == pytest.approx(want)


def test_backoff_spreads_delays_with_the_injected_random_source() -> None:
    values = itertools.cycle([0.1, 0.9])
    backoff = Backoff(base_s=1.0, max_s=100.0, rand=lambda: next(values))
    assert [backoff.delay(2), backoff.delay(2)] == pytest.approx([0.4, 3.6])


@pytest.mark.parametrize(
    ("jitter", "rand", "want"),
    [
        pytest.param(0.0, 0.3, 4.0, id="no-jitter-is-the-ceiling"),
        pytest.param(0.2, 1.0, 4.0, id="top-of-the-range"),
        pytest.param(0.2, 0.0, 3.2, id="shortened-by-at-most-the-share"),
        pytest.param(1.0, 0.25, 1.0, id="full-jitter"),
    ],
)
def test_jitter_shortens_each_delay_by_at_most_its_share(
    jitter: float, rand: float, want: float
) -> None:
    backoff = Backoff(base_s=1.0, max_s=30.0, jitter=jitter, rand=lambda: rand)
    assert backoff.delay(2) == pytest.approx(want)


async def test_attempts_sleep_between_tries_and_stop_at_the_limit() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    backoff = Backoff(base_s=0.5, max_s=30.0, jitter=0.0)
    tried = [attempt async for attempt in backoff.attempts(sleep, limit=4)]
    assert tried == [0, 1, 2, 3]
    assert slept == [0.5, 1.0, 2.0]  # no sleep before the first try or after the last


async def test_attempts_without_a_limit_go_on_until_the_caller_stops() -> None:
    async def sleep(seconds: float) -> None:
        pass

    backoff = Backoff(base_s=0.1, max_s=1.0, jitter=0.0)
    tried = []
    async for attempt in backoff.attempts(sleep):
        tried.append(attempt)
        if attempt == 9:
            break
    assert tried == list(range(10))
