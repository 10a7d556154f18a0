"""The conversation stage: turn records in from ``eval_turns``, conversation verdicts out.

It reads ``eval_turns`` as a member of its own consumer group (default
``<group>.conversations``), so conversations scale out like traces: more
replicas share the partitions, and all turns of a conversation (keyed by its
id) reach the one replica that owns its partition.

The stage is a configuration of the partition engine
(:mod:`sidecar.engine.partitions`): :class:`ConversationBuffer` holds each
turn record in the store (:mod:`.store`), which may decide a conversation at
once (``turn_limit``, ``evicted``) and decides the others when due (``idle``,
``max_age``); :class:`ConversationWork` plans each decided conversation on
the planning thread (its merged transcript, checks, screening, sampling by
conversation id: :mod:`.evaluate`), judges it, and emits its verdict through
the service's emitter and deliverer (span, metrics, verdict record, review).

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
pause beyond it). A malformed turn record is counted and skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass

from sidecar.conversation.evaluate import conversation_verdict, plan_conversation
from sidecar.conversation.state import fold
from sidecar.conversation.store import (
    ConversationStore,
    DecidedConversation,
    Key,
    Known,
    Place,
    StoreStats,
)
from sidecar.engine.deliver import Deliverer
from sidecar.engine.emit import Emitter
from sidecar.errors import RecordError, SourceError
from sidecar.evaluate.pipeline import Case, Fault, Screen
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import Sampler
from sidecar.ingest.offsets import Held
from sidecar.judge import Judge, screen_case
from sidecar.model import Flag, RecordRef
from sidecar.ports import OutRecord, Position, Record, RecordKind, StateEntry, TopicReader
from sidecar.settings import ConversationSettings
from sidecar.telemetry import (
    ConversationDecided,
    ConversationEmitted,
    FaultRaised,
    NullTelemetry,
    StateRestored,
    StateWritten,
    Telemetry,
    TurnRead,
    TurnsReread,
)
from sidecar.wire.state_records import MAX_STATE_TURNS, StateRecord, StateTurn, state_key
from sidecar.wire.turn_records import TurnRecord, parse_turn

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class ConversationStats:
    """The store's counts and sizes, and its bound, read at scrape time."""

    store: StoreStats
    open: int
    held_turns: int
    known: int
    limit: int


class ConversationBuffer:
    """The conversation engine's buffer: turn records held in the store until decided."""

    def __init__(
        self,
        settings: ConversationSettings,
        rubrics: Sequence[Rubric],
        *,
        state: TopicReader | None,
        clock: Clock,
        telemetry: Telemetry,
    ) -> None:
        self.settings = settings
        self.topic = settings.topic
        specs = {r.id: r.conversational for r in rubrics if r.conversational is not None}
        self.store = ConversationStore(
            {rid: spec for rid, spec in specs.items() if spec is not None},
            max_open=settings.max_open_conversations,
            decided_memory=settings.decided_memory,
            max_known=settings.max_known_per_partition,
        )
        self.state = state
        self.clock = clock
        self.telemetry = telemetry

    def stats(self) -> ConversationStats:
        store = self.store
        return ConversationStats(
            store.stats,
            store.open_conversations,
            store.held_turns,
            store.known_conversations,
            self.settings.max_open_conversations,
        )

    async def add(self, record: Record, now: float) -> Sequence[DecidedConversation]:
        try:
            turn = parse_turn(record.value, f"{self.topic}[{record.partition}]")
        except RecordError as exc:
            log.warning("ignoring a malformed turn record at offset %d: %s", record.offset, exc)
            self.telemetry.event(TurnRead("malformed"))
            return []
        ref = RecordRef(record.partition, record.offset)
        decided: list[DecidedConversation] = []
        for rubric_id in turn.rubrics:
            known = self.store.wanted(rubric_id, turn)
            if known is not None and self.state is not None:
                await self._read_back((rubric_id, turn.conversation_id), known)
            decided.extend(self.store.add(rubric_id, turn, now, ref))
        return self._decided(decided)

    def due(self, now: float, limit: int) -> Sequence[DecidedConversation]:
        return self._decided(self.store.due(now, limit=limit))

    def drain(self) -> Sequence[DecidedConversation]:
        # Open conversations are not decided at shutdown: they are rebuilt from the topic.
        if self.store.open_conversations:
            log.info(
                "shutdown: %d open conversations left uncommitted; they are rebuilt from %s",
                self.store.open_conversations,
                self.topic,
            )
        return []

    def holds(self, item: DecidedConversation) -> Held:
        return {self.topic: item.first_offsets}

    def held_offsets(self) -> Held:
        return {self.topic: self.store.held_offsets()}

    def drop_partitions(self, partitions: set[int]) -> int:
        return self.store.drop_partitions(partitions)

    def _decided(self, conversations: Sequence[DecidedConversation]) -> list[DecidedConversation]:
        for conversation in conversations:
            self.telemetry.event(
                ConversationDecided(conversation.reason.value, len(conversation.turns))
            )
        return list(conversations)

    async def _read_back(self, key: Key, known: Known) -> None:
        """Read the earlier turns of a conversation known by place, to re-open it whole."""
        assert self.state is not None
        places = known.places[-self.settings.max_reread_turns :]
        started = self.clock()
        try:
            payloads = await asyncio.wait_for(
                self.state.read_turns([p.ref for p in places]), self.settings.reread_timeout_s
            )
        except (SourceError, TimeoutError) as exc:
            log.warning("reading back the turns of conversation %s failed: %s", key[1], exc)
            payloads = {}
        found: list[tuple[Place, TurnRecord]] = []
        for place in places:
            payload = payloads.get(place.ref)
            try:
                turn = parse_turn(payload, self.topic)
            except RecordError:
                continue
            if turn.trace_id == place.trace_id and turn.conversation_id == key[1]:
                found.append((place, turn))
        missing = len(known.places) - len(found)
        self.store.reopen_with(key, known, found, missing)
        self.telemetry.event(TurnsReread(complete=not missing))
        log.log(
            logging.WARNING if missing else logging.INFO,
            "conversation %s (rubric %s) re-opened after revision %d: %d earlier turns read "
            "back from %s in %.3fs, %d missing",
            key[1],
            key[0],
            known.revision,
            len(found),
            self.topic,
            max(0.0, self.clock() - started),
            missing,
        )


class ConversationWork:
    """Plans, judges and emits decided conversations; keeps their state (module docstring)."""

    def __init__(
        self,
        settings: ConversationSettings,
        rubrics: Sequence[Rubric],
        buffer: ConversationBuffer,
        *,
        judge: Judge | None,
        sampler: Sampler,
        emitter: Emitter,
        deliverer: Deliverer,
        group: str,
        clock: Clock,
        wall_clock: Clock,
        screen: Screen = screen_case,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.rubrics = {r.id: r for r in rubrics if r.conversational is not None}
        self.buffer = buffer
        self.judge = judge
        self.sampler = sampler
        self.emitter = emitter
        self.deliverer = deliverer
        self.group = group
        self.clock = clock
        self.wall_clock = wall_clock
        self.screen = screen
        self.telemetry: Telemetry = telemetry if telemetry is not None else NullTelemetry()
        self.state_topic = settings.state_topic or None

    def _fault(self, fault: Fault) -> None:
        self.telemetry.event(FaultRaised(fault.stage))

    def plan(self, items: Sequence[DecidedConversation]) -> list[Case | BaseException]:
        """On the planning thread: each conversation's merged transcript, checks, screening."""
        now = self.clock()
        planned: list[Case | BaseException] = []
        for conversation in items:
            try:
                planned.append(
                    plan_conversation(
                        self.rubrics[conversation.rubric_id],
                        conversation.transcript(),
                        conversation.conversation_id,
                        self.sampler,
                        now,
                        screen=self.screen,
                        on_fault=self._fault,
                    )
                )
            except Exception as exc:  # noqa: BLE001
                planned.append(exc)
        return planned

    async def finish(
        self, planned: Sequence[tuple[DecidedConversation, Case]]
    ) -> AsyncIterator[int]:
        await self._tombstones()
        tasks = [
            asyncio.create_task(self._one(position, conversation, case))
            for position, (conversation, case) in enumerate(planned)
        ]
        try:
            for task in asyncio.as_completed(tasks):
                yield await task
        finally:
            for task in tasks:
                task.cancel()

    async def _one(self, position: int, conversation: DecidedConversation, case: Case) -> int:
        decided_at = self.clock()
        try:
            verdict = await conversation_verdict(
                case,
                self.judge,
                conversation_id=conversation.conversation_id,
                revision=conversation.revision,
                on_fault=self._fault,
            )
            records = self.emitter.verdict(verdict, case.transcript)
        except Exception:
            # The last resort (evaluation isolates its own faults): the offsets are released.
            log.exception(
                "emitting the verdict of conversation %s failed", conversation.conversation_id
            )
            self._fault(Fault("evaluate", "conversation"))
            return position
        await self.deliverer.deliver(records)
        self.telemetry.event(ConversationEmitted(max(0.0, self.clock() - decided_at)))
        # After the verdict is acknowledged, before the turns' offsets are released.
        await self._write_state(conversation)
        return position

    async def _write_state(self, conversation: DecidedConversation) -> None:
        if self.state_topic is None or conversation.partition is None:
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
        await self.deliverer.deliver(
            [
                OutRecord(
                    RecordKind.STATE,
                    self.state_topic,
                    key,
                    record.to_bytes(),
                    partition=conversation.partition,
                )
            ]
        )
        self.telemetry.event(StateWritten("state"))

    async def _tombstones(self) -> None:
        """Forget on the state topic what the per-partition bound evicted."""
        store = self.buffer.store
        evicted, store.evicted_state = store.evicted_state, []
        if self.state_topic is None or not evicted:
            return
        await self.deliverer.deliver(
            [
                OutRecord(
                    RecordKind.STATE,
                    self.state_topic,
                    state_key(self.group, rubric_id, cid),
                    None,
                    partition=partition,
                )
                for partition, (rubric_id, cid) in evicted
            ]
        )
        for _ in evicted:
            self.telemetry.event(StateWritten("tombstone"))

    async def assigned(self, partitions: set[int], metadata: Mapping[int, str]) -> None:
        """Restore the decided conversations of ``partitions`` before any of their turns is read."""
        state = self.buffer.state
        if state is None or self.state_topic is None:
            return
        started = self.clock()
        try:
            entries = await state.load(partitions)
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
        store = self.buffer.store
        for partition, found in sorted(by_partition.items()):
            folded = fold(found, group=self.group, topic=self.settings.topic)
            malformed += folded.malformed
            foreign += folded.foreign
            restored += store.load_known(partition, (known_of(r) for r in folded.records))
        elapsed = max(0.0, self.clock() - started)
        self.telemetry.event(StateRestored(restored, elapsed))
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

    def commit_position(self, partition: int, offset: int) -> Position:
        return Position(offset)


def known_of(record: StateRecord) -> tuple[Key, Known]:
    """A restored state record as the store knows it."""
    flags = tuple(f for f in Flag if f.value in record.flags)
    places = tuple(
        Place(t.trace_id, t.partition, t.offset, t.start_unix_nano) for t in record.turns
    )
    return record.key, Known(record.revision, places, record.decided_at, flags)
