"""Where the service runs CPU-bound evaluation: off the event loop.

The event loop answers ``/healthz``, ``/readyz`` and ``/metrics``, sends the
Kafka group heartbeats and fetches records. Planning a trace (transcript,
every deterministic check, injection screening, sampling) is pure CPU and can
take long on a large or hostile trace. Run on the loop, a few seconds of it
would freeze the probes and let the consumer group expire the replica's
session (a rebalance, and every partition re-read).

:class:`PlanThread` runs that work on one dedicated thread. The interpreter
hands the GIL back to the loop every few milliseconds (``sys.getswitchinterval``),
so the loop keeps serving while a check runs. One thread, not a pool: the
work is CPU-bound (more threads add no speed under the GIL), and one thread
runs plans in the order they were submitted, so the sampler's budget is
spent in the same order as before and is only ever touched by that thread.

:func:`inline` runs the work on the loop itself; deterministic tests that
step the service by hand pass it as the ``offload`` seam.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

T = TypeVar("T")


class Offload(Protocol):
    """Runs ``work`` somewhere and returns its result (or raises its exception)."""

    def __call__(self, work: Callable[[], T]) -> Awaitable[T]: ...


async def inline(work: Callable[[], T]) -> T:
    """Run ``work`` on the event loop (tests; blocks the loop while it runs)."""
    return work()


class PlanThread:
    """One worker thread for CPU-bound evaluation; created on first use, closed by :meth:`close`."""

    def __init__(self, name: str = "sidecar-plan") -> None:
        self._name = name
        self._executor: ThreadPoolExecutor | None = None

    def __call__(self, work: Callable[[], T]) -> Awaitable[T]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        return asyncio.get_running_loop().run_in_executor(self._executor, work)

    def close(self) -> None:
        """Drop queued work and let the running one finish on its own (never waits)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
