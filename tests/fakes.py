"""The broker in memory: the ports of :mod:`sidecar.ports` without a network (for tests).

Like httpx's ``MockTransport``: real behaviour, no patching. A
:class:`MemoryTopic` holds partitions of records and one consumer group's
committed offsets, with their metadata. A :class:`MemorySource` is one member
of that group, reading a spans topic and, when given, a logs topic
co-partitioned with it (partition i of both is assigned and revoked together); the test moves partitions with :meth:`~MemorySource.assign` and
:meth:`~MemorySource.revoke`, which call the rebalance listener as Kafka does
(on revoke while the partitions are still assigned, so the listener can commit).
:class:`MemorySink` keeps what was sent, by kind, and can be told to refuse the
next records with the error the Kafka sink raises (retriably, or for good with
a reason); turn and state records go on to a :class:`MemoryTurns` and a
:class:`MemoryConversationState` when given. :class:`MemoryLabels` hands out pushed labels.
:class:`MemoryHistory` reads a topic by position with record timestamps (``sidecar backfill``).
:class:`MemoryConversationState` is the conversation state topic plus read-backs
of the turns topic by offset; :meth:`MemoryTopic.delete_before` stands for retention.

Each client writes what it did to a ``journal`` (a list of short strings, which
may be shared) so that a test can check the order of events across clients.
Fetches, commits and sends yield to the event loop once, as the real ones do;
none waits for time (a fetch with nothing to read returns an empty list).
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from sidecar.adapters.workers import fair_share
from sidecar.errors import DeliveryError, Refusal
from sidecar.model import RecordRef
from sidecar.ports import OutRecord, Position, RebalanceListener, Record, RecordKind, StateEntry
from sidecar.telemetry import ConsumerLag

__all__ = [
    "MemoryConversationState",
    "MemoryHistory",
    "MemoryLabels",
    "MemorySink",
    "MemorySource",
    "MemoryTopic",
    "MemoryTurns",
]


class MemoryTopic:
    """Partitions of records (offsets from 0) and the group's committed offsets."""

    def __init__(self, partitions: int = 1, *, name: str = "otlp_spans") -> None:
        self.name = name
        self._logs: list[list[Record]] = [[] for _ in range(partitions)]
        self.committed: dict[int, int] = {}
        self.metadata: dict[int, str] = {}
        # The first offset still kept per partition (retention deleted those below).
        self.log_start: dict[int, int] = {}

    def delete_before(self, partition: int, offset: int) -> None:
        """Retention: records of ``partition`` below ``offset`` are gone for readers by offset."""
        self.log_start[partition] = max(offset, self.log_start.get(partition, 0))

    @property
    def partitions(self) -> range:
        return range(len(self._logs))

    def append(self, partition: int, value: bytes | None, key: bytes | None = None) -> Record:
        log = self._logs[partition]
        record = Record(partition, len(log), key, value, self.name)
        log.append(record)
        return record

    def records(self, partition: int) -> list[Record]:
        return self._logs[partition]

    def highwater(self, partition: int) -> int:
        return len(self._logs[partition])


class MemorySource:
    """A ``Source``: one group member reading a :class:`MemoryTopic`.

    ``partitions`` are assigned on ``start`` (default: all of the topic's);
    pass an empty set and call :meth:`assign` to hand them over later. With
    ``logs``, the same partitions of that topic are read too.
    ``idle`` is set whenever a fetch found nothing to read.
    """

    def __init__(
        self,
        topic: MemoryTopic,
        *,
        logs: MemoryTopic | None = None,
        partitions: Iterable[int] | None = None,
        max_records: int = 500,
        journal: list[str] | None = None,
    ) -> None:
        self.topic = topic
        self.logs = logs
        self.log_positions: dict[int, int] = {}
        self.max_records = max_records
        self.journal: list[str] = [] if journal is None else journal
        self.positions: dict[int, int] = {}
        self.commits: list[dict[int, int]] = []
        self.log_commits: list[dict[int, int]] = []
        self.idle = asyncio.Event()
        self._initial = set(topic.partitions if partitions is None else partitions)
        self._listener: RebalanceListener | None = None
        self._paused_partitions: set[int] = set()
        self._paused = False
        # Members started together (--workers), and the clock their fair-share wait runs on.
        self.members = 1
        self.assignments = 0
        self.fair_share_wait_s = 10.0
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def start(self, listener: RebalanceListener) -> None:
        self.journal.append("source.start")
        self._listener = listener
        if self._initial:
            await self.assign(self._initial)
        if self.members > 1:
            # As the Kafka source does with --workers (sidecar.adapters.workers.fair_share).
            await fair_share(
                assigned=self.assigned,
                partition_count=lambda: len(self.topic.partitions),
                assignments=lambda: self.assignments,
                members=self.members,
                timeout_s=self.fair_share_wait_s,
                clock=self.clock,
                sleep=self.sleep,
            )

    async def stop(self) -> None:
        self.journal.append("source.stop")
        self.positions.clear()
        self.log_positions.clear()
        self._paused_partitions.clear()

    async def assign(self, partitions: Iterable[int]) -> None:
        """The group hands ``partitions`` to this member; reading starts at the committed offset."""
        assert self._listener is not None, "start() the source first"
        added = set(partitions) - set(self.positions)
        self.assignments += 1
        for partition in added:
            self.positions[partition] = self.topic.committed.get(partition, 0)
            if self.logs is not None and partition in self.logs.partitions:
                self.log_positions[partition] = self.logs.committed.get(partition, 0)
        self.journal.append(f"source.assigned {sorted(added)}")
        metadata = {p: self.topic.metadata[p] for p in added if p in self.topic.metadata}
        await self._listener.on_assigned(added, metadata)

    async def revoke(self, partitions: Iterable[int]) -> None:
        """The group takes ``partitions`` away; the listener runs while they are still ours."""
        assert self._listener is not None, "start() the source first"
        revoked = set(partitions) & set(self.positions)
        self.journal.append(f"source.revoked {sorted(revoked)}")
        await self._listener.on_revoked(revoked)
        for partition in revoked:
            del self.positions[partition]
            self.log_positions.pop(partition, None)
            self._paused_partitions.discard(partition)

    async def fetch(self) -> list[Record]:
        self.journal.append("source.fetch")
        await asyncio.sleep(0)
        records: list[Record] = []
        reads = [(self.topic, self.positions)]
        if self.logs is not None:
            reads.append((self.logs, self.log_positions))
        for topic, positions in reads:
            for partition in sorted(positions):
                if partition in self._paused_partitions:
                    continue
                start = positions[partition]
                batch = topic.records(partition)[start : start + self.max_records - len(records)]
                records.extend(batch)
                positions[partition] = start + len(batch)
        if records:
            self.idle.clear()
        else:
            self.idle.set()
        return records

    def assigned(self) -> set[int]:
        return set(self.positions)

    def lag(self) -> ConsumerLag:
        """Records behind each assigned partition's end, from the fetch position."""
        return ConsumerLag(
            {p: max(0, self.topic.highwater(p) - o) for p, o in self.positions.items()}
        )

    async def commit(self, positions: Mapping[tuple[str, int], Position]) -> bool:
        await asyncio.sleep(0)
        logs_name = self.logs.name if self.logs is not None else None
        accepted = {
            p: pos
            for (topic, p), pos in positions.items()
            if topic == self.topic.name and p in self.positions
        }
        logs = {
            p: pos.offset
            for (topic, p), pos in positions.items()
            if topic == logs_name and p in self.log_positions
        }
        if not accepted and not logs:
            return False
        if accepted:
            offsets = {p: pos.offset for p, pos in accepted.items()}
            self.topic.committed.update(offsets)
            for partition, pos in accepted.items():
                self.topic.metadata[partition] = pos.metadata
            self.commits.append(offsets)
            self.journal.append(f"source.commit {offsets}")
        if logs:
            assert self.logs is not None
            self.logs.committed.update(logs)
            self.log_commits.append(logs)
            self.journal.append(f"source.commit_logs {logs}")
        return True

    def pause(self) -> None:
        if not self._paused:
            self._paused_partitions |= set(self.positions)
            self._paused = True

    def resume(self) -> None:
        if self._paused:
            self._paused_partitions -= set(self.positions)
            self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused


class MemorySink:
    """A ``RecordSink`` that keeps every acknowledged record, by kind.

    :meth:`fail` makes the next records refused, retriably (a broker away)
    or for good with ``reason`` (``too_large``, ``not_authorized``, ...), as
    the Kafka sink reports them. Turn records go on to ``turns`` and state
    records to ``state`` when given (each may refuse them too).
    """

    def __init__(
        self,
        *,
        journal: list[str] | None = None,
        turns: MemoryTurns | None = None,
        state: MemoryConversationState | None = None,
    ) -> None:
        self.journal: list[str] = [] if journal is None else journal
        self.verdicts: list[tuple[str, bytes]] = []
        self.reviews: list[tuple[str, str, bytes]] = []
        self.dead_letters: list[tuple[Record, str, str]] = []
        self.letters: list[OutRecord] = []
        self.turns = turns
        self.state = state
        self.refused = 0
        self._failures = 0
        self._refusal = Refusal(True, "unavailable", "refused by the in-memory broker")
        # Refuse only records of these kinds (all kinds when empty).
        self._kinds: frozenset[RecordKind] = frozenset()

    def routed(
        self, *, turns: MemoryTurns | None = None, state: MemoryConversationState | None = None
    ) -> MemorySink:
        """A sink keeping its records in this one's lists, routing turns and state its own way."""
        view = MemorySink(journal=self.journal, turns=turns, state=state)
        view.verdicts, view.reviews = self.verdicts, self.reviews
        view.dead_letters, view.letters = self.dead_letters, self.letters
        return view

    def fail(
        self, times: int, *, reason: str | None = None, kinds: Iterable[RecordKind] = ()
    ) -> None:
        """Refuse the next ``times`` records (of ``kinds``); ``reason`` given: for good."""
        self._failures = times
        self._kinds = frozenset(kinds)
        self._refusal = (
            Refusal(True, "unavailable", "refused by the in-memory broker")
            if reason is None
            else Refusal(False, reason, f"refused by the in-memory broker: {reason}")
        )

    async def start(self) -> None:
        self.journal.append("sink.start")

    async def stop(self) -> None:
        self.journal.append("sink.stop")

    async def send(self, records: Sequence[OutRecord]) -> None:
        """Each record is acknowledged or refused on its own; the refused are named."""
        refused: dict[int, Refusal] = {}
        for i, record in enumerate(records):
            await asyncio.sleep(0)
            if self._failures > 0 and (not self._kinds or record.kind in self._kinds):
                self._failures -= 1
                self.refused += 1
                refused[i] = self._refusal
                continue
            try:
                await self._take(record)
            except DeliveryError:
                refused[i] = Refusal(True, "unavailable", "refused by the in-memory broker")
        if refused:
            raise DeliveryError(f"refused by the in-memory broker: {len(refused)} records", refused)

    async def _take(self, record: OutRecord) -> None:
        key = (record.key or b"").decode("utf-8", "replace")
        value = record.value or b""
        match record.kind:
            case RecordKind.VERDICT:
                self.journal.append(f"sink.verdict {key}")
                self.verdicts.append((key, value))
            case RecordKind.REVIEW:
                self.journal.append(f"sink.review {key}")
                self.reviews.append((record.topic, key, value))
            case RecordKind.DEAD_LETTER:
                headers = {name: v.decode("utf-8", "replace") for name, v in record.headers}
                source = Record(
                    int(headers.get("sidecar.source.partition", "-1")),
                    int(headers.get("sidecar.source.offset", "-1")),
                    record.key,
                    record.value,
                    headers.get("sidecar.source.topic", ""),
                )
                self.journal.append(f"sink.dead_letter {source.partition}:{source.offset}")
                self.letters.append(record)
                self.dead_letters.append(
                    (source, headers["sidecar.dlq.reason"], headers["sidecar.dlq.detail"])
                )
            case RecordKind.TURN:
                assert self.turns is not None, "a turn record without a MemoryTurns"
                await self.turns.send_turn(key, value)
            case RecordKind.STATE:
                assert self.state is not None
                assert record.partition is not None
                await self.state.write(record.partition, record.key or b"", record.value)


class MemoryLabels:
    """A ``LabelSource`` handing out the payloads given to :meth:`push`."""

    def __init__(self, *, journal: list[str] | None = None) -> None:
        self.journal: list[str] = [] if journal is None else journal
        self.commits = 0
        self._pending: list[bytes] = []

    def push(self, *payloads: bytes) -> None:
        self._pending.extend(payloads)

    async def start(self) -> None:
        self.journal.append("labels.start")

    async def stop(self) -> None:
        self.journal.append("labels.stop")

    async def fetch(self) -> list[bytes]:
        await asyncio.sleep(0)
        payloads, self._pending = self._pending, []
        return payloads

    async def commit(self) -> None:
        self.commits += 1
        self.journal.append("labels.commit")


class MemoryHistory:
    """A ``sidecar.engine.history.History`` over a :class:`MemoryTopic` whose records have timestamps.

    ``timestamps[partition][offset]`` is each record's time (ms); a record
    appended to the topic during the run is there for the next fetch, as in
    Kafka. ``commits`` keeps what the backfill committed to its own group;
    the topic's ``committed`` (the live group's) is never touched.
    """

    def __init__(
        self,
        topic: MemoryTopic,
        timestamps: dict[int, list[int]],
        *,
        max_records: int = 500,
    ) -> None:
        self.topic = topic
        self.timestamps = timestamps
        self.max_records = max_records
        self.positions_: dict[int, int] = {}
        self.finished: set[int] = set()
        self.commits: list[dict[int, int]] = []
        self.fetches = 0
        self.stopped = False

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    async def end_offsets(self) -> dict[int, int]:
        return {p: self.topic.highwater(p) for p in self.topic.partitions}

    async def offsets_for_time(self, timestamp_ms: int) -> dict[int, int | None]:
        found: dict[int, int | None] = {}
        for partition in self.topic.partitions:
            times = self.timestamps.get(partition, [])
            found[partition] = next((o for o, t in enumerate(times) if t >= timestamp_ms), None)
        return found

    async def assign(self, starts: Mapping[int, int]) -> None:
        self.positions_ = dict(starts)

    async def fetch(self) -> list[Record]:
        self.fetches += 1
        await asyncio.sleep(0)
        records: list[Record] = []
        for partition in sorted(self.positions_):
            if partition in self.finished:
                continue
            start = self.positions_[partition]
            batch = self.topic.records(partition)[start : start + self.max_records - len(records)]
            times = self.timestamps.get(partition, [])
            records.extend(
                Record(
                    r.partition,
                    r.offset,
                    r.key,
                    r.value,
                    self.topic.name,
                    times[r.offset] if r.offset < len(times) else None,
                )
                for r in batch
            )
            self.positions_[partition] = start + len(batch)
        return records

    async def positions(self) -> dict[int, int]:
        return {p: o for p, o in self.positions_.items() if p not in self.finished}

    def finish(self, partitions: set[int]) -> None:
        self.finished |= partitions

    async def commit(self, offsets: Mapping[int, int]) -> None:
        self.commits.append(dict(offsets))


class MemoryTurns:
    """Turn records appended to a :class:`MemoryTopic`, partitioned by key as Kafka does."""

    def __init__(self, topic: MemoryTopic, *, journal: list[str] | None = None) -> None:
        self.topic = topic
        self.journal: list[str] = [] if journal is None else journal
        self.refused = 0
        self._failures = 0

    def fail(self, times: int) -> None:
        self._failures = times

    async def start(self) -> None:
        self.journal.append("turns.start")

    async def stop(self) -> None:
        self.journal.append("turns.stop")

    async def send_turn(self, conversation_id: str, payload: bytes) -> None:
        await asyncio.sleep(0)
        if self._failures > 0:
            self._failures -= 1
            self.refused += 1
            raise DeliveryError(f"refused by the in-memory broker: turn {conversation_id}")
        key = conversation_id.encode()
        partition = zlib.crc32(key) % len(self.topic.partitions)
        self.topic.append(partition, payload, key)
        self.journal.append(f"turns.send {conversation_id}")


class MemoryConversationState:
    """A ``TopicReader`` (state records on ``state``, turns read back from ``turns``).

    State records written through a :class:`MemorySink` land here.

    ``state`` None stands for a deployment without a state topic (writes are
    dropped, nothing is restored). :meth:`fail` makes the next writes refused.
    ``loads`` counts :meth:`load` calls, ``reads`` the turns read back.
    """

    def __init__(
        self,
        state: MemoryTopic | None,
        turns: MemoryTopic,
        *,
        journal: list[str] | None = None,
    ) -> None:
        self.state = state
        self.turns = turns
        self.journal: list[str] = [] if journal is None else journal
        self.loads = 0
        self.reads = 0
        self.refused = 0
        self._failures = 0

    def fail(self, times: int) -> None:
        self._failures = times

    async def start(self) -> None:
        self.journal.append("state.start")

    async def stop(self) -> None:
        self.journal.append("state.stop")

    async def load(self, partitions: set[int]) -> list[StateEntry]:
        await asyncio.sleep(0)
        self.loads += 1
        if self.state is None:
            return []
        self.journal.append(f"state.load {sorted(partitions)}")
        return [
            StateEntry(r.partition, r.key, r.value)
            for p in sorted(partitions)
            if p in self.state.partitions
            for r in self.state.records(p)[self.state.log_start.get(p, 0) :]
        ]

    async def write(self, partition: int, key: bytes, value: bytes | None) -> None:
        await asyncio.sleep(0)
        if self._failures > 0:
            self._failures -= 1
            self.refused += 1
            raise DeliveryError("refused by the in-memory broker: state record")
        if self.state is None:
            return
        self.state.append(partition, value, key)
        self.journal.append(f"state.{'write' if value is not None else 'tombstone'} {partition}")

    async def read_turns(self, refs: Sequence[RecordRef]) -> dict[RecordRef, bytes]:
        await asyncio.sleep(0)
        found: dict[RecordRef, bytes] = {}
        for ref in refs:
            records = self.turns.records(ref.partition)
            if self.turns.log_start.get(ref.partition, 0) <= ref.offset < len(records):
                value = records[ref.offset].value
                if value is not None:
                    found[ref] = value
        self.reads += len(found)
        return found
