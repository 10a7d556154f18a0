from __future__ import annotations

import pytest

from sidecar.judge.limits import BreakerState, CircuitBreaker, RateLimiter, TokenBucket

# --- TokenBucket -----------------------------------------------------------


def test_bucket_starts_full_and_refuses_when_empty() -> None:
    bucket = TokenBucket(capacity=3, rate_per_s=1.0, now=0.0)
    assert [bucket.reserve(1, 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve(1, 0.0) == pytest.approx(1.0)
    # A refusal takes nothing: after the announced wait the unit is there.
    assert bucket.reserve(1, 1.0) == 0.0


@pytest.mark.parametrize(
    ("taken", "elapsed", "want_level"),
    [
        pytest.param(10, 0.0, 0.0, id="drained"),
        pytest.param(10, 2.5, 5.0, id="partly-refilled"),
        pytest.param(10, 100.0, 10.0, id="refill-capped-at-capacity"),
        pytest.param(0, 50.0, 10.0, id="never-above-capacity"),
    ],
)
def test_bucket_refill(taken: int, elapsed: float, want_level: float) -> None:
    bucket = TokenBucket(capacity=10, rate_per_s=2.0, now=0.0)
    if taken:
        assert bucket.reserve(taken, 0.0) == 0.0
    assert bucket.level(elapsed) == pytest.approx(want_level)


def test_bucket_amount_above_capacity_waits_for_a_full_bucket_not_forever() -> None:
    bucket = TokenBucket(capacity=100, rate_per_s=10.0, now=0.0)
    assert bucket.reserve(50, 0.0) == 0.0
    assert bucket.reserve(500, 0.0) == pytest.approx(5.0)
    assert bucket.reserve(500, 5.0) == 0.0
    # It went into debt: the next caller waits for the debt to be repaid too.
    assert bucket.wait_time(1, 5.0) == pytest.approx(40.1)


def test_bucket_adjust_charges_and_refunds() -> None:
    bucket = TokenBucket(capacity=100, rate_per_s=1.0, now=0.0)
    bucket.reserve(10, 0.0)
    bucket.adjust(30, 0.0)  # used 40, estimated 10
    assert bucket.level(0.0) == pytest.approx(60.0)
    bucket.adjust(-1000, 0.0)  # refunds never exceed capacity
    assert bucket.level(0.0) == pytest.approx(100.0)


def test_bucket_clock_going_backwards_does_not_refill() -> None:
    bucket = TokenBucket(capacity=10, rate_per_s=1.0, now=100.0)
    bucket.reserve(10, 100.0)
    assert bucket.level(90.0) == 0.0
    assert bucket.level(101.0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("capacity", "rate"),
    [pytest.param(0, 1.0, id="no-capacity"), pytest.param(1, 0.0, id="no-rate")],
)
def test_bucket_rejects_nonsense(capacity: float, rate: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        TokenBucket(capacity, rate, now=0.0)


# --- RateLimiter -----------------------------------------------------------


def test_rate_limiter_requests_per_minute() -> None:
    limiter = RateLimiter(requests_per_minute=2, tokens_per_minute=1_000_000, now=0.0)
    assert limiter.reserve(10, 0.0) == 0.0
    assert limiter.reserve(10, 0.0) == 0.0
    assert limiter.reserve(10, 0.0) == pytest.approx(30.0)
    assert limiter.reserve(10, 30.0) == 0.0


def test_rate_limiter_tokens_per_minute_and_no_partial_reservation() -> None:
    limiter = RateLimiter(requests_per_minute=100, tokens_per_minute=600, now=0.0)
    assert limiter.reserve(500, 0.0) == 0.0
    wait = limiter.reserve(500, 0.0)
    assert wait == pytest.approx(40.0)  # 400 missing at 10 tokens/s
    # The refused call took no request slot either.
    assert limiter.requests.level(0.0) == pytest.approx(99.0)


def test_rate_limiter_settle_charges_real_usage() -> None:
    limiter = RateLimiter(requests_per_minute=100, tokens_per_minute=600, now=0.0)
    assert limiter.reserve(100, 0.0) == 0.0
    limiter.settle(estimated_tokens=100, actual_tokens=550, now=0.0)
    assert limiter.tokens.level(0.0) == pytest.approx(50.0)
    assert limiter.reserve(100, 0.0) == pytest.approx(5.0)


# --- CircuitBreaker --------------------------------------------------------


def test_breaker_opens_after_consecutive_failures_only() -> None:
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout_s=10.0)
    breaker.record_failure(0.0)
    breaker.record_failure(0.0)
    breaker.record_success()  # resets the count
    breaker.record_failure(1.0)
    breaker.record_failure(1.0)
    assert breaker.state(1.0) is BreakerState.CLOSED
    breaker.record_failure(1.0)
    assert breaker.state(1.0) is BreakerState.OPEN
    assert not breaker.allow(5.0)
    assert breaker.retry_after(5.0) == pytest.approx(6.0)


def test_breaker_half_open_allows_one_probe_and_success_closes() -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout_s=10.0)
    breaker.record_failure(0.0)
    assert breaker.state(10.0) is BreakerState.HALF_OPEN
    assert breaker.retry_after(10.0) == 0.0
    assert breaker.allow(10.0)  # the probe
    assert not breaker.allow(10.5)  # a second caller waits for the probe
    assert breaker.retry_after(10.5) == pytest.approx(9.5)
    breaker.record_success()
    assert breaker.state(10.5) is BreakerState.CLOSED
    assert breaker.allow(10.5)


def test_breaker_failed_probe_reopens_for_a_full_timeout() -> None:
    breaker = CircuitBreaker(failure_threshold=2, reset_timeout_s=10.0)
    breaker.record_failure(0.0)
    breaker.record_failure(0.0)
    assert breaker.allow(12.0)
    breaker.record_failure(12.0)
    assert breaker.state(21.0) is BreakerState.OPEN
    assert breaker.state(22.0) is BreakerState.HALF_OPEN


def test_breaker_forgets_a_probe_that_never_reported() -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout_s=10.0)
    breaker.record_failure(0.0)
    assert breaker.allow(10.0)
    assert not breaker.allow(19.9)
    assert breaker.allow(20.0)


def test_breaker_wait_and_state_agree_under_float_rounding() -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout_s=30.0)
    opened = 1000.015
    breaker.record_failure(opened)
    later = opened + breaker.retry_after(opened)  # 1030.0149999999999
    assert breaker.retry_after(later) == 0.0
    assert breaker.state(later) is BreakerState.HALF_OPEN
    assert breaker.allow(later)


def test_bucket_waiting_the_announced_time_always_suffices() -> None:
    bucket = TokenBucket(capacity=7, rate_per_s=0.1, now=0.3)
    now = 0.3
    for _ in range(20):
        wait = bucket.reserve(3, now)
        if wait:
            now += wait
            assert bucket.reserve(3, now) == 0.0


@pytest.mark.parametrize(
    ("threshold", "reset"),
    [pytest.param(0, 1.0, id="threshold-0"), pytest.param(1, 0.0, id="reset-0")],
)
def test_breaker_rejects_nonsense(threshold: int, reset: float) -> None:
    with pytest.raises(ValueError, match="required"):
        CircuitBreaker(threshold, reset)
