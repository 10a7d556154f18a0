"""The one back-off policy: exponential delays with jitter, and the loop that sleeps them.

``Backoff(base_s, max_s, jitter)``: attempt n (from 0) waits
``min(max_s, base_s * 2**n)`` scaled by ``1 - jitter * U(0, 1)``. With
``jitter=1`` that is full jitter (any delay up to the ceiling: the judge,
whose many callers must not retry in step); with ``jitter=0`` the ceiling
itself (deterministic, for tests). Kafka delivery uses a little jitter, so
replicas that lost the same broker do not all come back at once.

:meth:`Backoff.attempts` is the retry loop every caller uses::

    async for attempt in backoff.attempts(sleep, limit=5):
        if try_once():
            break
    else:
        give_up()
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential back-off; ``rand`` returns a float in [0, 1)."""

    base_s: float
    max_s: float
    jitter: float = 1.0
    rand: Callable[[], float] = field(default=random.random, compare=False)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0 = the first)."""
        ceiling = min(self.max_s, self.base_s * (2.0 ** min(attempt, 62)))
        return ceiling * ((1.0 - self.jitter) + self.jitter * self.rand())

    async def attempts(self, sleep: Sleep, *, limit: int | None = None) -> AsyncIterator[int]:
        """Attempt numbers 0, 1, ... (at most ``limit``), sleeping the delay between them."""
        attempt = 0
        while limit is None or attempt < limit:
            if attempt:
                await sleep(self.delay(attempt - 1))
            yield attempt
            attempt += 1
