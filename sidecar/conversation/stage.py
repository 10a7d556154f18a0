"""The conversation stage: turn records in from ``eval_turns``, conversation verdicts out.

It reads ``eval_turns`` as a member of its own consumer group (default
``<group>.conversations``), so conversations scale out like traces: more
replicas share the partitions, and all turns of a conversation (keyed by its
id) reach the one replica that owns its partition.

Each round (:meth:`ConversationStage.step`): fetch turn records; hold each in
the store (:mod:`.store`), which may decide a conversation at once
(``turn_limit``, ``evicted``); take the conversations due (``idle``,
``max_age``); evaluate each decided conversation (checks, screening, sampling
by conversation id, judge: :mod:`.evaluate`) and hand its verdict to ``emit``
(the service's: span, metrics, verdict record, review); commit.

Commit rule (at-least-once): for each partition, the lowest offset still held
by a turn of an open conversation or of a decided one whose verdict is not yet
emitted (acknowledged), else the next offset. So a restart, a crash or a
rebalance rebuilds the open conversations by reading the topic again from the
committed offset. At shutdown open conversations are *not* decided: they are
left, uncommitted, to be rebuilt; in-flight verdicts get a bounded wait.

Bounds: ``max_open_conversations`` (the least recently active conversation is
decided early, flagged ``decided_early``, counted), ``max_turns`` per
conversation (rubric), ``decided_memory`` decided conversations remembered for
re-opening, ``max_inflight`` conversations evaluated at once (the partitions
pause beyond it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from sidecar.conversation.evaluate import conversation_verdict, plan_conversation
from sidecar.conversation.store import ConversationStore, DecidedConversation, StoreStats
from sidecar.conversation.turns import parse_turn
from sidecar.errors import RecordError
from sidecar.judge import Judge, screen_case
from sidecar.model import RecordRef
from sidecar.offsets import OffsetTracker
from sidecar.pipeline import Case, Fault, Screen
from sidecar.rubric import Rubric
from sidecar.sample import Sampler
from sidecar.settings import ConversationSettings
from sidecar.verdict import Verdict

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
# Emits one verdict (span, metrics, record acknowledged, review); returns when done.
Emit = Callable[[Verdict, Case], Awaitable[None]]


class TurnRecordIn(Protocol):
    """One record of ``eval_turns`` (``sidecar.adapters.broker.Record`` is one)."""

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def value(self) -> bytes | None: ...


class Listener(Protocol):
    async def on_assigned(self, partitions: set[int]) -> None: ...

    async def on_revoked(self, partitions: set[int]) -> None: ...


class TurnSource(Protocol):
    """``eval_turns`` read as a group member with manual commits (a broker ``Source`` is one)."""

    async def start(self, listener: Listener) -> None: ...

    async def stop(self) -> None: ...

    async def fetch(self) -> Sequence[TurnRecordIn]: ...

    async def commit(
        self, offsets: Mapping[int, int], metadata: Mapping[int, str] | None = None
    ) -> bool: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    @property
    def paused(self) -> bool: ...


class TurnSink(Protocol):
    """Producer of turn records to ``eval_turns``; a send returns once acknowledged."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send_turn(self, conversation_id: str, payload: bytes) -> None: ...


class StageMetrics(Protocol):
    """What the stage writes (``sidecar.adapters.metrics.ConversationMetrics``)."""

    @property
    def turns(self) -> _Family: ...

    @property
    def open(self) -> _Gauge: ...

    @property
    def open_limit(self) -> _Gauge: ...

    @property
    def held_turns(self) -> _Gauge: ...

    @property
    def decided(self) -> _Family: ...

    @property
    def reopened(self) -> _Counter: ...

    @property
    def forgotten(self) -> _Counter: ...

    @property
    def turns_per_conversation(self) -> _Histogram: ...

    @property
    def verdict_seconds(self) -> _Histogram: ...


class _Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class _Family(Protocol):
    def labels(self, *values: str, **labels: str) -> _Counter: ...


class _Gauge(Protocol):
    def set(self, value: float) -> None: ...


class _Histogram(Protocol):
    def observe(self, amount: float) -> None: ...


class ConversationStage:
    """One replica's conversation stage; the rebalance listener of its own source."""

    def __init__(
        self,
        settings: ConversationSettings,
        rubrics: Sequence[Rubric],
        *,
        source: Callable[[], TurnSource],
        emit: Emit,
        judge: Judge | None,
        sampler: Sampler,
        metrics: StageMetrics,
        evictions: _Counter,
        commit_interval_s: float = 2.0,
        shutdown_timeout_s: float = 20.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        screen: Screen = screen_case,
        on_fault: Callable[[Fault], None] | None = None,
    ) -> None:
        self.settings = settings
        self.rubrics = {r.id: r for r in rubrics if r.conversational is not None}
        specs = {rid: r.conversational for rid, r in self.rubrics.items()}
        self.store = ConversationStore(
            {rid: spec for rid, spec in specs.items() if spec is not None},
            max_open=settings.max_open_conversations,
            decided_memory=settings.decided_memory,
        )
        self.offsets = OffsetTracker()
        self.metrics = metrics
        self.evictions = evictions
        self.judge = judge
        self.sampler = sampler
        self.clock = clock
        self.sleep = sleep
        self.screen = screen
        self._emit = emit
        self._on_fault = on_fault or (lambda fault: None)
        self._new_source = source
        self._source: TurnSource | None = None
        self.commit_interval_s = commit_interval_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self._inflight: set[asyncio.Task[None]] = set()
        self._waiting: deque[tuple[DecidedConversation, int, float]] = deque()
        self._exported = StoreStats()
        self._committed: dict[int, int] = {}
        self._last_commit = 0.0
        metrics.open_limit.set(settings.max_open_conversations)

    @property
    def source(self) -> TurnSource:
        assert self._source is not None, "ConversationStage.start() creates the source"
        return self._source

    @property
    def in_flight(self) -> int:
        return len(self._inflight) + len(self._waiting)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Join the group; SourceError when the broker cannot be reached."""
        self._source = self._new_source()
        await self._source.start(self)
        self._last_commit = self.clock()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then :meth:`drain`."""
        while not stop.is_set():
            await self.step()
        await self.drain()

    async def step(self) -> None:
        """One round: back-pressure, fetch, hold, decide what is due, commit on interval."""
        self._apply_backpressure()
        records = await self.source.fetch()
        now = self.clock()
        for record in records:
            self._ingest(record, now)
        self._dispatch_due(now)
        self._export()
        if now - self._last_commit >= self.commit_interval_s:
            await self.commit()
            self._last_commit = now

    async def drain(self) -> None:
        """Shutdown: leave open conversations to be rebuilt; wait bounded for in-flight; commit."""
        self._start_waiting()
        pending = {t for t in self._inflight if not t.done()}
        if pending:
            timer = asyncio.ensure_future(self.sleep(self.shutdown_timeout_s))
            try:
                while pending and not timer.done():
                    await asyncio.wait({*pending, timer}, return_when=asyncio.FIRST_COMPLETED)
                    self._start_waiting()
                    pending = {t for t in self._inflight if not t.done()}
            finally:
                timer.cancel()
        for task in pending:
            task.cancel()
        if self.store.open_conversations:
            log.info(
                "shutdown: %d open conversations left uncommitted; they are rebuilt from %s",
                self.store.open_conversations,
                self.settings.topic,
            )
        self._export()
        await self.commit()

    async def stop(self) -> None:
        if self._source is not None:
            await self._source.stop()

    # -- turns ----------------------------------------------------------------------------

    def _ingest(self, record: TurnRecordIn, now: float) -> None:
        self.offsets.consumed(record.partition, record.offset)
        try:
            turn = parse_turn(record.value, f"{self.settings.topic}[{record.partition}]")
        except RecordError as exc:
            log.warning("ignoring a malformed turn record at offset %d: %s", record.offset, exc)
            self.metrics.turns.labels(result="malformed").inc()
            return
        ref = RecordRef(record.partition, record.offset)
        for rubric_id in turn.rubrics:
            for decided in self.store.add(rubric_id, turn, now, ref):
                self._decided(decided, now)

    def _decided(self, conversation: DecidedConversation, now: float) -> None:
        """Hold the conversation's offsets; evaluate it now, or once there is room."""
        self.metrics.decided.labels(reason=conversation.reason.value).inc()
        self.metrics.turns_per_conversation.observe(len(conversation.turns))
        token = self.offsets.hold(conversation.first_offsets)
        self._waiting.append((conversation, token, now))
        self._start_waiting()

    def _room(self) -> int:
        return max(0, self.settings.max_inflight - len(self._inflight))

    def _start_waiting(self) -> None:
        while self._waiting and self._room() > 0:
            conversation, token, decided_at = self._waiting.popleft()
            task = asyncio.create_task(self._finish(conversation, token, decided_at))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    def _dispatch_due(self, now: float) -> None:
        self._start_waiting()
        room = self._room()
        if room > 0 and not self._waiting:
            for conversation in self.store.due(now, limit=room):
                self._decided(conversation, now)

    async def _finish(
        self, conversation: DecidedConversation, token: int, decided_at: float
    ) -> None:
        rubric = self.rubrics[conversation.rubric_id]
        try:
            case = plan_conversation(
                rubric,
                conversation.transcript(),
                conversation.conversation_id,
                self.sampler,
                self.clock(),
                screen=self.screen,
                on_fault=self._on_fault,
            )
            verdict = await conversation_verdict(
                case,
                self.judge,
                conversation_id=conversation.conversation_id,
                revision=conversation.revision,
                on_fault=self._on_fault,
            )
            await self._emit(verdict, case)
            self.metrics.verdict_seconds.observe(max(0.0, self.clock() - decided_at))
        except asyncio.CancelledError:
            raise
        except Exception:
            # The last resort (evaluation isolates its own faults): the offsets are released.
            log.exception(
                "emitting the verdict of conversation %s failed", conversation.conversation_id
            )
            self._on_fault(Fault("evaluate", "conversation"))
        self.offsets.release(token)

    # -- offsets, rebalance, back-pressure -------------------------------------------------

    async def commit(self) -> None:
        wanted = self.offsets.committable(self.store.held_offsets())
        changed = {p: o for p, o in wanted.items() if self._committed.get(p) != o}
        if changed and await self.source.commit(changed):
            self._committed.update(changed)

    async def on_revoked(self, partitions: set[int]) -> None:
        """Commit while the partitions are ours, then leave their conversations to the new owner."""
        await self.commit()
        dropped = self.store.drop_partitions(partitions)
        self.offsets.drop_partitions(partitions)
        for partition in partitions:
            self._committed.pop(partition, None)
        if dropped:
            log.info(
                "%s partitions %s revoked: %d open conversations left to the new owner",
                self.settings.topic,
                sorted(partitions),
                dropped,
            )

    async def on_assigned(self, partitions: set[int]) -> None:
        log.info("%s partitions assigned: %s", self.settings.topic, sorted(partitions))

    def _apply_backpressure(self) -> None:
        busy = len(self._inflight) + len(self._waiting)
        limit = self.settings.max_inflight
        if busy >= limit:
            self.source.pause()
        elif self.source.paused and busy <= limit // 2:
            self.source.resume()

    def _export(self) -> None:
        st, done = self.store.stats, self._exported
        self.metrics.turns.labels(result="accepted").inc(st.turns - done.turns)
        self.metrics.turns.labels(result="duplicate").inc(st.duplicates - done.duplicates)
        self.metrics.turns.labels(result="unknown_rubric").inc(
            st.unknown_rubric - done.unknown_rubric
        )
        self.metrics.reopened.inc(st.reopened - done.reopened)
        self.metrics.forgotten.inc(st.forgotten - done.forgotten)
        self.evictions.inc(st.evicted - done.evicted)
        self._exported = dataclasses.replace(st)
        self.metrics.open.set(self.store.open_conversations)
        self.metrics.held_turns.set(self.store.held_turns)
