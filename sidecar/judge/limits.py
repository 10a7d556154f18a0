"""Rate limits and the circuit breaker for the judge (its back-off is :class:`sidecar.retry.Backoff`).

Pure state machines: every method takes ``now`` (seconds on a monotonic
clock) and none of them sleeps. The caller decides how to wait, which keeps
tests free of real time.
"""

from __future__ import annotations

import enum


class TokenBucket:
    """``capacity`` units, refilled continuously at ``rate_per_s``.

    ``reserve`` takes units now if they are there and otherwise says how long
    to wait. ``adjust`` settles an estimate against the real amount afterwards;
    the level may go below zero (debt), which delays later callers.
    """

    def __init__(self, capacity: float, rate_per_s: float, now: float) -> None:
        if capacity <= 0 or rate_per_s <= 0:
            raise ValueError("capacity and rate must be positive")
        self.capacity = capacity
        self.rate_per_s = rate_per_s
        self._level = capacity
        self._updated = now

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._updated)
        self._level = min(self.capacity, self._level + elapsed * self.rate_per_s)
        self._updated = max(self._updated, now)

    def level(self, now: float) -> float:
        self._refill(now)
        return self._level

    def wait_time(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` units are available (0 when they are now)."""
        self._refill(now)
        # An amount above capacity could never be served; serve it from a full bucket.
        needed = min(amount, self.capacity)
        # The epsilon absorbs float rounding, so waiting the announced time always suffices.
        if self._level >= needed - 1e-9:
            return 0.0
        return (needed - self._level) / self.rate_per_s

    def reserve(self, amount: float, now: float) -> float:
        """Take ``amount`` and return 0, or take nothing and return the wait in seconds."""
        wait = self.wait_time(amount, now)
        if wait == 0.0:
            self._level -= amount
        return wait

    def adjust(self, delta: float, now: float) -> None:
        """Take ``delta`` more units (or give back, if negative) without waiting."""
        self._refill(now)
        self._level = min(self.capacity, self._level - delta)


class RateLimiter:
    """Requests per minute and tokens per minute, reserved together.

    Tokens are not known before the call, so a request reserves an estimate
    and ``settle`` charges the difference once usage is reported.
    """

    def __init__(self, requests_per_minute: float, tokens_per_minute: float, now: float) -> None:
        self.requests = TokenBucket(requests_per_minute, requests_per_minute / 60.0, now)
        self.tokens = TokenBucket(tokens_per_minute, tokens_per_minute / 60.0, now)

    def reserve(self, estimated_tokens: int, now: float) -> float:
        """Reserve one request and ``estimated_tokens``; 0 when granted, else the wait."""
        # Check both before taking either, so a refusal leaves no partial reservation.
        wait = max(self.requests.wait_time(1, now), self.tokens.wait_time(estimated_tokens, now))
        if wait > 0:
            return wait
        self.requests.reserve(1, now)
        self.tokens.reserve(estimated_tokens, now)
        return 0.0

    def settle(self, estimated_tokens: int, actual_tokens: int, now: float) -> None:
        self.tokens.adjust(actual_tokens - estimated_tokens, now)


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """Stop calling a judge that keeps failing, and probe it again later.

    closed: calls pass; ``failure_threshold`` consecutive failures open it.
    open: calls are refused until ``reset_timeout_s`` has passed, then it is
    half-open. half-open: one probe call passes; its success closes the
    breaker, its failure opens it again for another ``reset_timeout_s``. A
    probe that never reports (its caller was cancelled) is forgotten after
    ``reset_timeout_s`` so the breaker cannot stay stuck.
    """

    def __init__(self, failure_threshold: int, reset_timeout_s: float) -> None:
        if failure_threshold < 1 or reset_timeout_s <= 0:
            raise ValueError("failure_threshold >= 1 and reset_timeout_s > 0 required")
        self.failure_threshold = failure_threshold
        self.reset_timeout_s = reset_timeout_s
        self._failures = 0
        # Deadlines rather than start times, so every comparison is the same
        # float expression (``now < deadline``) and state and wait always agree.
        self._half_open_at: float | None = None
        self._probe_expires: float | None = None

    def state(self, now: float) -> BreakerState:
        if self._half_open_at is None:
            return BreakerState.CLOSED
        if now < self._half_open_at:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    def retry_after(self, now: float) -> float:
        """Seconds until a call may be allowed again (0 when one may be now)."""
        match self.state(now):
            case BreakerState.CLOSED:
                return 0.0
            case BreakerState.OPEN:
                assert self._half_open_at is not None
                return self._half_open_at - now
            case BreakerState.HALF_OPEN:
                if self._probe_expires is None or now >= self._probe_expires:
                    return 0.0
                return self._probe_expires - now

    def allow(self, now: float) -> bool:
        """May a call start now? In half-open state this claims the single probe."""
        match self.state(now):
            case BreakerState.CLOSED:
                return True
            case BreakerState.OPEN:
                return False
            case BreakerState.HALF_OPEN:
                if self._probe_expires is None or now >= self._probe_expires:
                    self._probe_expires = now + self.reset_timeout_s
                    return True
                return False

    def record_success(self) -> None:
        self._failures = 0
        self._half_open_at = None
        self._probe_expires = None

    def record_failure(self, now: float) -> None:
        self._probe_expires = None
        if self._half_open_at is not None:
            # A failed probe (or a late failure while open) restarts the wait.
            self._half_open_at = now + self.reset_timeout_s
            return
        self._failures += 1
        if self._failures >= self.failure_threshold:
            self._half_open_at = now + self.reset_timeout_s
