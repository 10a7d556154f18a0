"""The at-least-once partition engine, written once: fetch, buffer, evaluate off the loop, emit, commit.

One engine runs one consumer group's partitions. What it holds and how it
evaluates are given to it:

- a :class:`Buffer` holds what was read until it is *due*: the trace
  assembler (:mod:`sidecar.engine.traces`) and the conversation store
  (:mod:`sidecar.conversation.stage`) are its two kinds;
- a :class:`Work` plans due items on the planning thread (pure CPU, in
  batches) and then finishes them on the loop (judge, emit, deliver),
  saying which item is done as soon as its outputs are acknowledged.

Each round (:meth:`PartitionEngine.step`):

1. back-pressure: at ``max_inflight`` items decided and not released the
   source is paused; it resumes at half of it;
2. fetch; each record goes to the buffer, which may decide items at once
   (bounds) or refuse the record (:class:`~sidecar.errors.DecodeError`: the
   record is dead-lettered with its reason; its offset is held until the
   dead letter is acknowledged);
3. items due are taken while there is room; the round's items go to the
   planning thread in hops of at most :data:`PLAN_BATCH`, queued in order:
   each hop is finished (judged, emitted, released) as soon as it is
   planned, while the next is planned, so room comes back a hop at a time
   and the partitions resume while work is still queued (one hop for the
   whole round would release everything at once, after the last plan, and
   leave the planning thread idle while the next traces wait out their
   decision wait);
4. on ``commit_interval_s``, commit: per topic and partition, the lowest
   offset held by the buffer or by an item in flight, else the next offset
   (:class:`~sidecar.ingest.offsets.TopicOffsets`).

Every decided item has a stage (:mod:`sidecar.engine.flight`); the flight is
the one place that accounts for items in flight.

Shutdown (:meth:`PartitionEngine.drain`, once fetching has stopped):
decide what the buffer decides at shutdown (``Buffer.drain``), wait bounded
by ``shutdown_timeout_s`` for the items in flight, cancel the rest (their
offsets stay held: read again by the next owner), commit.

Rebalance: on revoke the engine commits while the partitions are still
its own, then the buffer drops their items (the new owner reads them from
the committed offset); on assignment the work's hook learns what the
previous owner left in the commit metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from sidecar.engine.deliver import Deliverer
from sidecar.engine.flight import Flight, Item, Stage
from sidecar.engine.offload import Offload
from sidecar.errors import DecodeError
from sidecar.ingest.offsets import Held, TopicOffsets
from sidecar.ports import OutRecord, Position, Record, RecordKind, RecordSource
from sidecar.telemetry import FaultRaised, NullTelemetry, Rebalanced, Telemetry

log = logging.getLogger(__name__)

T = TypeVar("T")
P = TypeVar("P")
T_in = TypeVar("T_in", contravariant=True)
P_in = TypeVar("P_in", contravariant=True)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

# Items planned in one hop to the planning thread, at most.
PLAN_BATCH = 64


class Buffer(Protocol[T]):
    """What an engine holds until it is due."""

    async def add(self, record: Record, now: float) -> Sequence[T]:
        """Take one record; the items it decides at once. DecodeError: dead-letter the record."""
        ...

    def due(self, now: float, limit: int) -> Sequence[T]:
        """At most ``limit`` items due at ``now``, decided and gone from the buffer."""
        ...

    def drain(self) -> Sequence[T]:
        """At shutdown: the items to decide now (the rest stay, uncommitted)."""
        ...

    def holds(self, item: T) -> Held:
        """The offsets ``item`` was read from: ``{topic: {partition: lowest offset}}``."""
        ...

    def held_offsets(self) -> Held:
        """Per topic and partition, the lowest offset still held by what is buffered."""
        ...

    def drop_partitions(self, partitions: set[int]) -> int:
        """Forget what was read from ``partitions`` (revoked); how many items went."""
        ...


class Work(Protocol[T_in, P_in]):
    """How an engine's items are evaluated."""

    def plan(self, items: Sequence[T_in]) -> Sequence[object]:
        """On the planning thread: each item's plan, or the exception that stopped it."""
        ...

    def finish(self, planned: Sequence[tuple[T_in, P_in]]) -> AsyncIterator[int]:
        """Judge, emit, deliver; yields each item's position once its outputs are acknowledged."""
        ...

    async def assigned(self, partitions: set[int], metadata: Mapping[int, str]) -> None:
        """Partitions were assigned (``metadata``: what was committed with them)."""
        ...

    def commit_position(self, partition: int, offset: int) -> Position:
        """What to commit on the first topic's ``partition`` when ``offset`` may be (or lower)."""
        ...


@dataclass(slots=True)
class EngineStats:
    """Records read and dead-lettered, by reason; the flight's counts are in ``Flight.stats``."""

    records: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)
    paused: bool = False
    assigned: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class EngineSettings:
    max_inflight: int
    commit_interval_s: float
    shutdown_timeout_s: float
    # The first topic's commits are the work's to shape (the handover's metadata).
    primary_topic: str


class PartitionEngine(Generic[T, P]):
    """One consumer group's partitions, at least once (see the module docstring)."""

    def __init__(
        self,
        name: str,
        settings: EngineSettings,
        *,
        buffer: Buffer[T],
        work: Work[T, P],
        deliverer: Deliverer,
        offload: Offload,
        telemetry: Telemetry | None = None,
        clock: Clock,
        sleep: Sleep,
    ) -> None:
        self.name = name
        self.settings = settings
        self.buffer = buffer
        self.work = work
        self.deliverer = deliverer
        self.offload = offload
        self.telemetry: Telemetry = telemetry if telemetry is not None else NullTelemetry()
        self.clock = clock
        self.sleep = sleep
        self.offsets = TopicOffsets()
        self.flight: Flight[T | Record] = Flight(self.offsets, settings.max_inflight)
        self.stats = EngineStats()
        self._source: RecordSource | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._round: list[Item[T | Record]] = []
        self._committed: dict[tuple[str, int], Position] = {}
        self._last_commit = 0.0

    @property
    def source(self) -> RecordSource:
        assert self._source is not None, "PartitionEngine.start() sets the source"
        return self._source

    async def start(self, source: RecordSource) -> None:
        """Join the group through ``source`` (this engine is its rebalance listener)."""
        self._source = source
        await source.start(self)
        self._last_commit = self.clock()

    async def run(self, stop: asyncio.Event) -> None:
        """Rounds until ``stop`` is set, then :meth:`drain`."""
        while not stop.is_set():
            await self.step()
        await self.drain()

    # -- one round ----------------------------------------------------------------------

    async def step(self) -> None:
        """Back-pressure, fetch, buffer, start what is due, commit on interval."""
        self._apply_backpressure()
        records = await self.source.fetch()
        now = self.clock()
        for record in records:
            await self._take(record, now)
        self._dispatch_due(now)
        if now - self._last_commit >= self.settings.commit_interval_s:
            await self.commit()
            self._last_commit = now

    async def _take(self, record: Record, now: float) -> None:
        self.stats.records += 1
        try:
            decided = await self.buffer.add(record, now)
        except DecodeError as exc:
            self._dead_letter(record, exc.reason, str(exc))
            return
        # Per-record isolation: should a bug make a buffer raise anything else, that one
        # record is dead-lettered, not the partition stopped.
        except Exception as exc:
            log.exception(
                "%s: reading record %s[%d]@%d failed",
                self.name,
                record.topic,
                record.partition,
                record.offset,
            )
            self.telemetry.event(FaultRaised("decode"))
            self._dead_letter(record, "internal_error", f"{type(exc).__name__} while decoding")
            return
        for item in decided:
            self._decided(item, now)
        self.offsets.consumed(record.topic, record.partition, record.offset)

    def _decided(self, item: T, now: float) -> None:
        self.flight.decided(item, self.buffer.holds(item), now)

    def _dispatch_due(self, now: float) -> None:
        """Start what waits, then take due items while there is room; a task per hop."""
        self._start_waiting()
        room = self.flight.room()
        if room > 0 and not self.flight.waiting:
            for item in self.buffer.due(now, room):
                self._decided(item, now)
            self._start_waiting()
        self._flush_round()

    def _start_waiting(self) -> None:
        self._round.extend(self.flight.take(self.flight.room()))

    def _flush_round(self) -> None:
        if self._round:
            batch, self._round = self._round, []
            for start in range(0, len(batch), PLAN_BATCH):
                self._spawn(self._evaluate(batch[start : start + PLAN_BATCH]))

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            await work

        task = asyncio.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _evaluate(self, batch: list[Item[T | Record]]) -> None:
        """Plan the round's items on the planning thread, then finish them on the loop."""
        items: list[T] = [item.value for item in batch]  # type: ignore[misc]
        try:
            planned = await self.offload(lambda: self.work.plan(items))
        except asyncio.CancelledError:
            self.flight.abandon(batch)
            raise
        ready: list[Item[T | Record]] = []
        pairs: list[tuple[T, P]] = []
        for item, result in zip(batch, planned, strict=True):
            if isinstance(result, BaseException):
                self._failed(item, result)
                continue
            self.flight.finishing(item)
            ready.append(item)
            pairs.append((item.value, result))  # type: ignore[arg-type]
        if not ready:
            return
        try:
            async for position in self.work.finish(pairs):
                self.flight.release(ready[position])
        except asyncio.CancelledError:
            self.flight.abandon(ready)
            raise
        # The last resort: the work isolates faults per item, so this is a bug in emitting;
        # the items' offsets are released all the same (their verdicts are lost, counted).
        except Exception as exc:  # noqa: BLE001
            for item in ready:
                if item.stage is Stage.FINISHING:
                    self._failed(item, exc)

    def _failed(self, item: Item[T | Record], exc: BaseException) -> None:
        log.error(
            "%s: evaluating an item failed",
            self.name,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        self.telemetry.event(FaultRaised("evaluate"))
        self.flight.release(item)

    # -- dead letters -------------------------------------------------------------------

    def _dead_letter(self, record: Record, reason: str, detail: str) -> None:
        """Send ``record`` to the dead-letter topic; its offset is held until acknowledged."""
        self.stats.dead_letters[reason] = self.stats.dead_letters.get(reason, 0) + 1
        # Repeats are held back by the log handler (sidecar.logs), counted in the next line.
        log.warning(
            "record %s[%d]@%d goes to the dead-letter topic: %s (%s)",
            record.topic,
            record.partition,
            record.offset,
            reason,
            detail[:200],
        )
        self.offsets.consumed(record.topic, record.partition, record.offset)
        item = self.flight.running_now(
            record, {record.topic: {record.partition: record.offset}}, self.clock()
        )
        out = OutRecord(RecordKind.DEAD_LETTER, record.topic, record.key, record.value)
        origin = (
            ("sidecar.source.topic", record.topic.encode()),
            ("sidecar.source.partition", str(record.partition).encode()),
            ("sidecar.source.offset", str(record.offset).encode()),
        )

        async def send() -> None:
            try:
                await self.deliverer.dead_letter(out, reason, detail, origin)
            except asyncio.CancelledError:
                self.flight.abandon([item])
                raise
            self.flight.release(item)

        self._spawn(send())

    # -- shutdown -----------------------------------------------------------------------

    async def drain(self) -> None:
        """Shutdown (fetching has stopped): decide, wait bounded, cancel the rest, commit."""
        now = self.clock()
        for item in self.buffer.drain():
            self._decided(item, now)
        self._start_waiting()
        self._flush_round()
        pending = await self._wait_in_flight()
        left = self.flight.busy
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.flight.abandon_all()
        if left:
            log.warning(
                "shutdown: %d %s still in flight were not committed; they are read again",
                left,
                self.name,
            )
        await self.commit()

    async def _wait_in_flight(self) -> set[asyncio.Task[None]]:
        """Wait until nothing is in flight, at most ``shutdown_timeout_s`` on ``sleep``."""
        pending = {t for t in self._tasks if not t.done()}
        if not pending:
            return pending
        timer = asyncio.ensure_future(self.sleep(self.settings.shutdown_timeout_s))
        try:
            while pending and not timer.done():
                await asyncio.wait({*pending, timer}, return_when=asyncio.FIRST_COMPLETED)
                self._start_waiting()
                self._flush_round()
                pending = {t for t in self._tasks if not t.done()}
        finally:
            timer.cancel()
        return pending

    # -- offsets, rebalance, back-pressure ---------------------------------------------

    async def commit(self) -> None:
        wanted: dict[tuple[str, int], Position] = {}
        for topic, offsets in self.offsets.committable(self.buffer.held_offsets()).items():
            primary = topic == self.settings.primary_topic
            for partition, offset in offsets.items():
                wanted[(topic, partition)] = (
                    self.work.commit_position(partition, offset) if primary else Position(offset)
                )
        changed = {tp: p for tp, p in wanted.items() if self._committed.get(tp) != p}
        if changed and await self.source.commit(changed):
            self._committed.update(changed)

    async def on_revoked(self, partitions: set[int]) -> None:
        """Commit while the partitions are still ours, then leave their items to the new owner."""
        self.telemetry.event(Rebalanced("revoked", len(partitions)))
        await self.commit()
        dropped = self.buffer.drop_partitions(partitions)
        self.offsets.drop_partitions(partitions)
        self._committed = {tp: p for tp, p in self._committed.items() if tp[1] not in partitions}
        self.stats.assigned = self.stats.assigned - partitions
        if not partitions:
            return  # a first join revokes nothing: not worth a line
        log.info(
            "%s: partitions %s revoked%s",
            self.name,
            sorted(partitions),
            f": {dropped} open items left to the new owner" if dropped else "",
        )

    async def on_assigned(self, partitions: set[int], metadata: Mapping[int, str]) -> None:
        self.telemetry.event(Rebalanced("assigned", len(partitions)))
        self.stats.assigned = self.stats.assigned | partitions
        log.info("%s: partitions assigned: %s", self.name, sorted(partitions))
        if partitions:
            await self.work.assigned(partitions, metadata)

    def _apply_backpressure(self) -> None:
        limit = self.settings.max_inflight
        busy = self.flight.busy
        if busy >= limit and not self.stats.paused:
            self.source.pause()
            self.stats.paused = True
        elif self.stats.paused and busy <= limit // 2:
            self.source.resume()
            self.stats.paused = False
