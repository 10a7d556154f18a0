"""The engine plans a round's items in hops, and each hop is released once it is finished.

One hop for the whole round would release nothing until the last item was
planned: the partitions would stay paused, nothing new would be read, and
the planning thread would idle while the next traces wait out their
decision wait. Here the planning thread is a queue the test runs one hop
at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from sidecar.engine.deliver import Deliverer
from sidecar.engine.partitions import PLAN_BATCH, EngineSettings, PartitionEngine
from sidecar.ingest.offsets import Held
from sidecar.ports import Position, Record

T = TypeVar("T")


class DueBuffer:
    """Items 0..n-1, every one due at once."""

    def __init__(self, n: int) -> None:
        self.items = list(range(n))

    async def add(self, record: Record, now: float) -> Sequence[int]:
        return []

    def due(self, now: float, limit: int) -> Sequence[int]:
        taken, self.items = self.items[:limit], self.items[limit:]
        return taken

    def drain(self) -> Sequence[int]:
        return []

    def holds(self, item: int) -> Held:
        return {"spans": {0: item}}

    def held_offsets(self) -> Held:
        return {"spans": {0: self.items[0]}} if self.items else {}

    def drop_partitions(self, partitions: set[int]) -> int:
        return 0


class RecordingWork:
    def __init__(self) -> None:
        self.planned: list[list[int]] = []
        self.finished: list[int] = []

    def plan(self, items: Sequence[int]) -> Sequence[object]:
        self.planned.append(list(items))
        return [f"plan {item}" for item in items]

    async def finish(self, planned: Sequence[tuple[int, Any]]) -> AsyncIterator[int]:
        for position, (item, _) in enumerate(planned):
            self.finished.append(item)
            yield position

    async def assigned(self, partitions: set[int], metadata: Mapping[int, str]) -> None:
        return None

    def commit_position(self, partition: int, offset: int) -> Position:
        return Position(offset)


class QuietSource:
    def __init__(self) -> None:
        self.paused = False

    async def start(self, listener: object) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def fetch(self) -> Sequence[Record]:
        await asyncio.sleep(0)
        return []

    async def commit(self, positions: Mapping[tuple[str, int], Position]) -> bool:
        return True

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False


class QueuedThread:
    """An offload whose work runs, in order, only when the test says ``run_one``."""

    def __init__(self) -> None:
        self.queue: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []

    def __call__(self, work: Callable[[], T]) -> asyncio.Future[T]:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.queue.append((work, future))
        return future

    def run_one(self) -> None:
        work, future = self.queue.pop(0)
        future.set_result(work())


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_round_is_planned_in_hops_and_each_hop_is_released_when_finished() -> None:
    items, limit = 3 * PLAN_BATCH + 5, 10 * PLAN_BATCH
    work, thread, source = RecordingWork(), QueuedThread(), QuietSource()
    engine: PartitionEngine[int, Any] = PartitionEngine(
        "items",
        EngineSettings(limit, commit_interval_s=1e9, shutdown_timeout_s=1.0, primary_topic="spans"),
        buffer=DueBuffer(items),
        work=work,
        deliverer=cast(Deliverer, None),
        offload=thread,
        clock=lambda: 0.0,
        sleep=asyncio.sleep,
    )
    await engine.start(source)
    await engine.step()
    await settle()
    # Every item is in flight, in hops queued in order on the planning thread.
    assert len(thread.queue) == 4
    assert engine.flight.busy == items
    thread.run_one()
    await settle()
    # The first hop is finished and released while the others still wait to be planned.
    assert work.planned == [list(range(PLAN_BATCH))]
    assert work.finished == list(range(PLAN_BATCH))
    assert engine.flight.busy == items - PLAN_BATCH
    while thread.queue:
        thread.run_one()
        await settle()
    assert [len(hop) for hop in work.planned] == [PLAN_BATCH] * 3 + [5]
    assert work.finished == list(range(items))
    assert engine.flight.busy == 0
