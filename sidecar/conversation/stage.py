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

State of decided conversations (:mod:`.state`): after a verdict is
acknowledged, and before the offsets of its turns are released, the stage
writes the conversation's state record (revision, the place of each turn in
``eval_turns``) to the state topic, on the partition its turns are on. On
assignment it reads the state partitions of the assigned partitions from their
start (timed, logged) before it reads any turn. A late turn for a
conversation known only by place has its earlier turns read back from
``eval_turns`` by offset (:meth:`ConversationState.read_turns`) before it is
held, so the next verdict is revision n+1 over all turns; turns that cannot be
read back (retention) flag it ``partial`` + ``earlier_turns_missing``.

Bounds: ``max_open_conversations`` (the least recently active conversation is
decided early, flagged ``decided_early``, counted), ``max_turns`` per
conversation (rubric), ``decided_memory`` decided conversations remembered
with their transcripts, ``max_known_per_partition`` remembered by place
(evicted ones counted and tombstoned), ``max_reread_turns`` read back per
re-open, ``max_inflight`` conversations evaluated at once (the partitions
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
from sidecar.conversation.state import StateEntry, fold
from sidecar.conversation.store import (
    ConversationStore,
    DecidedConversation,
    Key,
    Known,
    Place,
    StoreStats,
)
from sidecar.errors import DeliveryError, RecordError, SourceError
from sidecar.evaluate.pipeline import Case, Fault, Screen
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict
from sidecar.ingest.offsets import OffsetTracker
from sidecar.judge import Judge, screen_case
from sidecar.model import Flag, RecordRef
from sidecar.settings import ConversationSettings
from sidecar.wire.state_records import MAX_STATE_TURNS, StateRecord, StateTurn, state_key
from sidecar.wire.turn_records import TurnRecord, parse_turn

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
# Emits one verdict (span, metrics, record acknowledged, review); returns when done.
Emit = Callable[[Verdict, Case], Awaitable[None]]


class TurnRecordIn(Protocol):
    """One record of ``eval_turns`` (``sidecar.ports.Record`` is one)."""

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


class ConversationState(Protocol):
    """The state topic, and ``eval_turns`` read back by offset (no group, no commits).

    ``sidecar.adapters.kafka_turns.KafkaConversationState`` on Kafka,
    ``tests.fakes.MemoryConversationState`` in memory.
    """

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def load(self, partitions: set[int]) -> Sequence[StateEntry]:
        """Every state record of ``partitions``, from each start to its end, in offset order.

        SourceError when that could not be read in time.
        """
        ...

    async def write(self, partition: int, key: bytes, value: bytes | None) -> None:
        """One state record (``None``: a tombstone) to ``partition``; DeliveryError if refused."""
        ...

    async def read_turns(self, refs: Sequence[RecordRef]) -> Mapping[RecordRef, bytes]:
        """The turn records at ``refs``; those no longer there (retention) are left out."""
        ...


class TurnSink(Protocol):
    """Producer of turn records to ``eval_turns``; a send returns once acknowledged."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send_turn(self, conversation_id: str, payload: bytes) -> None: ...


class StageMetrics(Protocol):
    """What the stage writes (``sidecar.adapters.prometheus.ConversationMetrics``)."""

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

    @property
    def known(self) -> _Gauge: ...

    @property
    def state_records(self) -> _Family: ...

    @property
    def restored(self) -> _Counter: ...

    @property
    def restore_seconds(self) -> _Histogram: ...

    @property
    def rereads(self) -> _Family: ...

    @property
    def partial(self) -> _Counter: ...


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
        state: Callable[[], ConversationState] | None = None,
        state_evictions: _Counter | None = None,
        group: str = "",
        commit_interval_s: float = 2.0,
        shutdown_timeout_s: float = 20.0,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
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
            max_known=settings.max_known_per_partition,
        )
        self.offsets = OffsetTracker()
        self.metrics = metrics
        self.evictions = evictions
        self.state_evictions = state_evictions
        self.group = group
        self.wall_clock = wall_clock
        self._new_state = state
        self._state: ConversationState | None = None
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
        if self._new_state is not None:
            self._state = self._new_state()
            await self._state.start()
        self._source = self._new_source()
        try:
            await self._source.start(self)
        except SourceError:
            if self._state is not None:
                await self._state.stop()
            raise
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
            await self._ingest(record, now)
        self._dispatch_due(now)
        await self._tombstones()
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
        if self._state is not None:
            await self._state.stop()

    # -- turns ----------------------------------------------------------------------------

    async def _ingest(self, record: TurnRecordIn, now: float) -> None:
        self.offsets.consumed(record.partition, record.offset)
        try:
            turn = parse_turn(record.value, f"{self.settings.topic}[{record.partition}]")
        except RecordError as exc:
            log.warning("ignoring a malformed turn record at offset %d: %s", record.offset, exc)
            self.metrics.turns.labels(result="malformed").inc()
            return
        ref = RecordRef(record.partition, record.offset)
        for rubric_id in turn.rubrics:
            known = self.store.wanted(rubric_id, turn)
            if known is not None and self._state is not None:
                await self._read_back((rubric_id, turn.conversation_id), known)
            for decided in self.store.add(rubric_id, turn, now, ref):
                self._decided(decided, now)

    async def _read_back(self, key: Key, known: Known) -> None:
        """Read the earlier turns of a conversation known by place, to re-open it whole."""
        assert self._state is not None
        places = known.places[-self.settings.max_reread_turns :]
        started = self.clock()
        try:
            payloads = await asyncio.wait_for(
                self._state.read_turns([p.ref for p in places]), self.settings.reread_timeout_s
            )
        except (SourceError, TimeoutError) as exc:
            log.warning("reading back the turns of conversation %s failed: %s", key[1], exc)
            payloads = {}
        found: list[tuple[Place, TurnRecord]] = []
        for place in places:
            payload = payloads.get(place.ref)
            try:
                turn = parse_turn(payload, self.settings.topic)
            except RecordError:
                continue
            if turn.trace_id == place.trace_id and turn.conversation_id == key[1]:
                found.append((place, turn))
        missing = len(known.places) - len(found)
        self.store.reopen_with(key, known, found, missing)
        self.metrics.rereads.labels(result="partial" if missing else "complete").inc()
        log.log(
            logging.WARNING if missing else logging.INFO,
            "conversation %s (rubric %s) re-opened after revision %d: %d earlier turns read "
            "back from %s in %.3fs, %d missing",
            key[1],
            key[0],
            known.revision,
            len(found),
            self.settings.topic,
            max(0.0, self.clock() - started),
            missing,
        )

    async def _tombstones(self) -> None:
        """Forget on the state topic what the per-partition bound evicted (best effort)."""
        evicted, self.store.evicted_state = self.store.evicted_state, []
        if self._state is None:
            return
        for partition, (rubric_id, cid) in evicted:
            try:
                await self._state.write(partition, state_key(self.group, rubric_id, cid), None)
            except DeliveryError as exc:
                log.warning("tombstone for conversation %s not written: %s", cid, exc)
                continue
            self.metrics.state_records.labels(kind="tombstone").inc()

    async def _write_state(self, conversation: DecidedConversation) -> None:
        """The decided conversation's state record, acknowledged; retried until it is."""
        if self._state is None or conversation.partition is None:
            return
        record = StateRecord(
            group=self.group,
            topic=self.settings.topic,
            rubric_id=conversation.rubric_id,
            conversation_id=conversation.conversation_id,
            revision=conversation.revision,
            decided_at=self.wall_clock(),
            turns=tuple(
                StateTurn(
                    trace_id=p.trace_id,
                    partition=p.partition,
                    offset=p.offset,
                    start_unix_nano=p.start_unix_nano,
                )
                for p in conversation.places[-MAX_STATE_TURNS:]
            ),
            flags=tuple(f.value for f in conversation.flags if f is not Flag.DECIDED_EARLY),
        )
        key = state_key(self.group, conversation.rubric_id, conversation.conversation_id)
        payload = record.to_bytes()
        delay = 0.5
        while True:
            try:
                await self._state.write(conversation.partition, key, payload)
            except DeliveryError as exc:
                self._on_fault(Fault("state", "DeliveryError"))
                log.warning("writing conversation state failed (%s); retrying in %.1fs", exc, delay)
                await self.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            self.metrics.state_records.labels(kind="state").inc()
            return

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
            # After the verdict is acknowledged, before the turns' offsets are released.
            await self._write_state(conversation)
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
        """Restore the decided conversations of ``partitions`` before any of their turns is read."""
        log.info("%s partitions assigned: %s", self.settings.topic, sorted(partitions))
        if self._state is None or not partitions:
            return
        started = self.clock()
        try:
            entries = await self._state.load(partitions)
        except SourceError as exc:
            log.error(
                "restoring decided conversations of %s partitions %s failed (%s): a late turn "
                "of a conversation decided before is judged without its earlier turns",
                self.settings.topic,
                sorted(partitions),
                exc,
            )
            return
        by_partition: dict[int, list[StateEntry]] = {p: [] for p in partitions}
        for entry in entries:
            by_partition.setdefault(entry.partition, []).append(entry)
        restored = malformed = foreign = 0
        for partition, found in sorted(by_partition.items()):
            state = fold(found, group=self.group, topic=self.settings.topic)
            malformed += state.malformed
            foreign += state.foreign
            restored += self.store.load_known(partition, (known_of(r) for r in state.records))
        elapsed = max(0.0, self.clock() - started)
        self.metrics.restored.inc(restored)
        self.metrics.restore_seconds.observe(elapsed)
        log.info(
            "restored %d decided conversations of %s partitions %s from %d state records in "
            "%.3fs (%d malformed, %d of another group or topic)",
            restored,
            self.settings.topic,
            sorted(partitions),
            len(entries),
            elapsed,
            malformed,
            foreign,
        )
        self._export()

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
        self.metrics.partial.inc(st.partial - done.partial)
        self.evictions.inc(st.evicted - done.evicted)
        if self.state_evictions is not None:
            self.state_evictions.inc(st.state_evicted - done.state_evicted)
        self._exported = dataclasses.replace(st)
        self.metrics.open.set(self.store.open_conversations)
        self.metrics.held_turns.set(self.store.held_turns)
        self.metrics.known.set(self.store.known_conversations)


def known_of(record: StateRecord) -> tuple[Key, Known]:
    """A restored state record as the store knows it."""
    flags = tuple(f for f in Flag if f.value in record.flags)
    places = tuple(
        Place(t.trace_id, t.partition, t.offset, t.start_unix_nano) for t in record.turns
    )
    return record.key, Known(record.revision, places, record.decided_at, flags)
